package board

//go:generate go run ../internal/storegen -layer board -root ..

import (
	"context"
	"hash/fnv"
	"time"
)

// ClaimParams asks for a claim on one card.
type ClaimParams struct {
	Card   string        `json:"card"`
	Marker string        `json:"marker"`
	Lease  time.Duration `json:"lease"`
}

// ClaimNextParams asks for the oldest unclaimed card in a pool state.
type ClaimNextParams struct {
	Marker string        `json:"marker"`
	Lease  time.Duration `json:"lease"`
	// Labels, when set, passes over every card that does not carry all of
	// them (DESIGN.md#label-routing).
	Labels []string `json:"labels,omitempty"`
}

// StartParams claims a card and starts its run in one atomic, durable
// write (Store.Start). Exactly one of Card and Next is set.
type StartParams struct {
	// Card names the card to start.
	Card string `json:"card,omitempty"`
	// Next takes the oldest unclaimed card in a pool state instead, as
	// ClaimNext does; with Labels, the oldest that carries all of them.
	Next   bool          `json:"next,omitempty"`
	Labels []string      `json:"labels,omitempty"`
	Marker string        `json:"marker"`
	Lease  time.Duration `json:"lease"`
	// Run describes the run to create: ID (required; minted by the caller,
	// so a retry after an unknown outcome names the same run), Status
	// (running or queued; empty means running), Checkpoint, and the
	// owner's identity (Host, PID, PIDStart, PIDStartTicks, BootID). The
	// store sets Card, Owner, Epoch and the times.
	Run Run `json:"run"`
	// Fresh starts a new run even when the card records a resumable one
	// (DESIGN.md#resume).
	Fresh bool `json:"fresh,omitempty"`
}

// StartResult is what Start wrote.
type StartResult struct {
	// Card is the card after the write: claimed by Token, in the running
	// column, pointing at Run (LastRunID, LastRunEpoch = Token.Epoch).
	Card  Card       `json:"card"`
	Token ClaimToken `json:"token"`
	Run   Run        `json:"run"`
	// Resumed is true when Run is the card's recorded resumable run taken
	// over by the new claim (its ID and checkpoint kept, its owner, epoch
	// and identity replaced), not a new run.
	Resumed bool `json:"resumed,omitempty"`
}

// FinishParams is the run's verdict, the card's filing and the release of
// the claim, in one fenced write (Store.Finish).
type FinishParams struct {
	Card  string     `json:"card"`
	Token ClaimToken `json:"token"`
	// RunID is the run the verdict is for: the card's recorded run, started
	// (or resumed) under Token.
	RunID string `json:"run_id"`
	// Status is the verdict: RunFinished, RunFailed or RunFailedResumable.
	Status      RunStatus `json:"status"`
	FailureCode string    `json:"failure_code,omitempty"`
	// Checkpoint, when set, replaces the run's checkpoint (a resumable run
	// records where the next claim resumes from).
	Checkpoint *string `json:"checkpoint,omitempty"`
	// Retryable marks a failed verdict worth another attempt under the
	// card's retry policy (DESIGN.md#retries): a crash rather than the
	// work's own verdict. Only with Status RunFailed.
	Retryable bool `json:"retryable,omitempty"`
}

// FinishResult is what Finish wrote.
type FinishResult struct {
	// Card is the card after the write: released, filed (or left where an
	// operator put it; DESIGN.md#lifecycle, DESIGN.md#started-from).
	Card Card `json:"card"`
	Run  Run  `json:"run"`
}

// CreateRunParams is a fenced run start for workers that use the fine-grained
// verbs (Store.CreateRun).
type CreateRunParams struct {
	// Token is the claim the run is started under; the card (Run.Card)
	// must be held by exactly it.
	Token ClaimToken `json:"token"`
	// Run is as in StartParams.Run, with Run.Card set.
	Run Run `json:"run"`
}

// RenewResult is the outcome of renewing one Hold. Err is nil when the lease
// was pushed to LeaseUntil; an ErrClaimConflict when the token is stale.
type RenewResult struct {
	Card       string
	LeaseUntil time.Time
	Err        error
}

// SetStateOwnedParams is a fenced state move by the claim holder.
type SetStateOwnedParams struct {
	Card  string
	Token ClaimToken
	To    string
	// From, when set, makes the move a CAS on the declared source state as
	// well: drift is changed=false with no event.
	From string
	// Reason is the provenance; a move by a recovery (reaper:) marker is
	// stamped ReasonWatchdog whatever is passed here, except the descriptive
	// run_finished / run_failed verdicts a watchdog filing carries.
	Reason Reason
	// Retry makes the move a retry (DESIGN.md#retries): the store stamps
	// the card's RetryAt from its own clock and the card's retry policy
	// (Board.RetryFor, RetryPolicy.Delay of its Attempts). Into the state
	// the card is already in, it stamps RetryAt alone: no state event, and
	// no move reported.
	Retry bool
}

// MoveParams is an operator or automation state move (no claim needed).
type MoveParams struct {
	Card   string
	To     string
	From   string // SetStateFrom only: the declared source
	Reason Reason
	Actor  string
}

// AdjustLabelsParams is a relative label edit.
type AdjustLabelsParams struct {
	Card   string
	Add    []string
	Remove []string
	Actor  string
}

// ReclaimExpiredParams is the watchdog's transfer request: ONE CAS whose precondition is
// "the claim is still exactly Prev AND its lease is still expired at Cutoff".
type ReclaimExpiredParams struct {
	Card           string
	Prev           ClaimToken
	RecoveryMarker string
	Cutoff         time.Time
	Lease          time.Duration
}

// ListExpiredClaimCandidatesParams asks for one page of expired claims: claims whose lease
// ended at or before Cutoff, lease ascending, at most Limit (applied in the
// query; 0 = no limit), resuming strictly after the position After names.
type ListExpiredClaimCandidatesParams struct {
	Cutoff time.Time `json:"cutoff"`
	Limit  int       `json:"limit"`
	// After is the Next of an earlier page of the same listing; empty
	// starts from the oldest lease. It is opaque: only the store that
	// issued it reads it.
	After string `json:"after,omitempty"`
	// Share, when set, asks for one reaper's share of the listing on a
	// store several agents reap (DESIGN.md#reaper-shares). A store one
	// agent reaps lists everything and ignores it.
	Share *ReaperShare `json:"share,omitempty"`
}

// ReaperShare names the reaper that lists and how often it passes. The
// store counts the reaper live until one and a half intervals after this
// listing, and splits the expired claims among the reapers live at the
// listing's time, so about one of them examines each claim per pass.
type ReaperShare struct {
	Reaper   string        `json:"reaper"`
	Interval time.Duration `json:"interval"`
}

// ShareKey is a card's key among the reapers' shares: 32 bits of FNV-1a of
// its id, the same on every agent and every release.
func ShareKey(card string) int64 {
	h := fnv.New32a()
	h.Write([]byte(card))
	return int64(h.Sum32())
}

// ListExpiredClaimCandidatesResult is one page of ListExpiredClaimCandidates.
type ListExpiredClaimCandidatesResult struct {
	Cards []Card `json:"cards"`
	// Next resumes the listing after the last card of this page; empty
	// when the listing has nothing beyond this page. A reaper that keeps
	// cards must page on with it instead of starting from the oldest lease
	// again, or the cards it keeps would fill every batch for ever.
	Next string `json:"next,omitempty"`
	// Reapers is how many live reapers shared the listing, this one
	// included; 0 when the query asked for no share or the store lists
	// everything to every reaper. With more than one, the page holds the
	// claims whose ShareKey is ShareIndex modulo Reapers, and the claims
	// that carry no share key (or one no share can place).
	Reapers    int `json:"reapers,omitempty"`
	ShareIndex int `json:"share_index,omitempty"`
	// ShareError, when set, says why a share was asked for and the page
	// lists every reaper's claims instead: the store could not record or
	// read the reapers. The listing is whole, so nothing waits for a share
	// nobody examines; the reaper reports the cause.
	ShareError string `json:"share_error,omitempty"`
}

// ReleaseExpiredParams is the fenced release of an abandoned claim: ONE CAS whose
// precondition is "the claim is still exactly Prev AND still expired at
// Cutoff (its lease ended then, or it carries no lease at all)". The
// repair sweep that releases an abandoned recovery claim uses it, so an
// owner that re-took the card (a new epoch, a fresh lease) in between is a
// clean ErrClaimConflict rather than a claim pulled from under it.
type ReleaseExpiredParams struct {
	Card   string     `json:"card"`
	Prev   ClaimToken `json:"prev"`
	Cutoff time.Time  `json:"cutoff"`
	// State, when set, is part of the precondition: the card is still in
	// the state it was judged in. A caller that released only because the
	// card's column is safe to leave it free in must not release it after
	// someone moved it elsewhere. A card that moved is ErrTransitionRejected.
	State string `json:"state,omitempty"`
	Actor string `json:"actor"`
}

// Traits are what a store declares about itself. The agent decides by
// them, never by a backend's name, so an external plugin is treated as what
// it says it is.
type Traits struct {
	// Shared: several agents, on several hosts, write this store (the
	// fleet twin). Their workers' claims are not this host's to probe, and
	// a foreign writer may strip a lease, so the watchdog runs the fleet's
	// sweeps (DESIGN.md#twins).
	Shared bool `json:"shared"`
	// ServerClock: Now reads a clock other than this host's (a server's),
	// as a lower bound (DESIGN.md#store-clock).
	ServerClock bool `json:"server_clock"`
	// Outbox: a write's events ride in an outbox on the document it
	// changes and are published to the event log after the write, not in
	// its own transaction; a reader sees them once the store's event lag
	// has passed (DESIGN.md#event-log).
	Outbox bool `json:"outbox"`
}

// Store is the contract every backend honours (bbolt, MongoDB, the plugin
// proxy). Package boardtest holds the conformance suite that pins it.
//
// Every write appends its events in the same atomic step. Ordinary writes
// never touch the claim family (claim, claim_epoch, claimed_at,
// claim_lease_until). Every owner write is a compare-and-set on
// (claim, claim_epoch) and is refused with ErrClaimConflict for a stale
// token, even when it would change nothing.
//
// The board definition is read with LoadBoard, under the caller's
// context: the store keeps no copy for its callers to read without one
// (the agent caches it, with a bound on how stale it may be).
//
// IsRead reports whether the verb of Store named verb writes nothing: its
// comment carries the directive //storegen:read (the list is generated
// into verbs_gen.go). A wrapper that treats reads and writes apart (the
// agent's health check, the watchdog's simulation) asks it rather than
// keeping a list of its own.
func IsRead(verb string) bool { return readVerbs[verb] }

// Store is the union of the role interfaces declared below (and
// BoardAdmin): a consumer takes only the roles it calls, so a test double
// implements those and a reader sees what the consumer may write. A new
// verb joins the role of the callers it is for (CONTRIBUTING.md, "Adding a
// store verb").
type Store interface {
	BoardAdmin
	CardReader
	CardWriter
	Claimer
	OwnerWriter
	Lifecycle
	Runs
	Recovery
	EventLog
	Retention

	// Traits are the store's declaration of what it is (see Traits). They
	// do not change while the store is open.
	Traits() Traits

	Close() error
}

// CardReader is the reads of cards and of the board definition. The
// board is read under the caller's context, never from a copy the store
// keeps (DESIGN.md#board-in-store).
type CardReader interface {
	BoardReader

	//storegen:read
	GetCard(ctx context.Context, p GetCardParams) (Card, error)
	// ListCards lists cards ordered by creation time, oldest first.
	//storegen:read
	ListCards(ctx context.Context, p ListCardsParams) ([]Card, error)
	// Dependents lists the cards that declare p.ID among their blockers.
	//storegen:read
	Dependents(ctx context.Context, p DependentsParams) ([]Card, error)
	// CountCards counts the cards in each state and the claimed ones
	// without handing back the cards (DESIGN.md#queue-depth).
	//storegen:read
	CountCards(ctx context.Context) (CardCounts, error)
}

// CardCounts is how many cards each state holds (a state with none is
// absent) and how many cards carry a claim (CountCards).
type CardCounts struct {
	States  map[string]int `json:"states"`
	Claimed int            `json:"claimed"`
}

// CardWriter is the writes that need no claim: card creation, operator
// and automation moves, labels, and the force-release by marker
// (DESIGN.md#automation-moves, DESIGN.md#reopen, DESIGN.md#one-shot-labels).
type CardWriter interface {
	// CreateCard creates a card. Empty State means the first pool state, or
	// waiting_deps when a blocker is not yet complete. Unknown blockers, a
	// dependency cycle or a duplicate id are ErrInvalidArgument.
	CreateCard(ctx context.Context, p CreateCardParams) (Card, error)
	// SetState is an operator move. Leaving a terminal state is
	// ErrTerminalStateExit; terminal → terminal is a refiling (DESIGN.md#sinks).
	SetState(ctx context.Context, p MoveParams) error
	// SetStateFrom is an automation move, a CAS on p.From: drift is
	// changed=false with no event; a terminal From is ErrTerminalStateExit
	// even when drifted (DESIGN.md#automation-moves).
	SetStateFrom(ctx context.Context, p MoveParams) (MoveResult, error)
	// Reopen moves a terminal card into a working state (a CAS on p.From
	// when set); the rule's refusals are ErrTransitionRejected
	// (DESIGN.md#reopen).
	Reopen(ctx context.Context, p MoveParams) error
	// AdjustLabels adds then removes labels in one atomic step (removes win).
	// A no-op writes nothing and emits no event.
	AdjustLabels(ctx context.Context, p AdjustLabelsParams) (Card, error)
	// SetLabels replaces the label set (absolute by contract: it may re-arm
	// a one-shot label, by design; DESIGN.md#one-shot-labels).
	SetLabels(ctx context.Context, p SetLabelsParams) (Card, error)
	// Release is the operator's force-release (and the boot sweep's of a
	// dead owner's legacy claim): it clears the claim held by p.Marker, any
	// epoch, closing its open run and filing a stranded card; a free card
	// is nil, another holder ErrClaimConflict (DESIGN.md#resume).
	Release(ctx context.Context, p ReleaseParams) error
}

// Claimer takes claims and keeps their leases: a claim, the heartbeat's
// batched renewal, the expiry of a dead worker's lease and the mark of a
// silent one's (DESIGN.md#lease, DESIGN.md#heartbeat-batch,
// DESIGN.md#owner-dead, DESIGN.md#keepalive).
type Claimer interface {
	// Claim acquires a free card, or refreshes the lease of the marker that
	// holds it (DESIGN.md#epoch); another marker's claim, live or expired,
	// is ErrClaimConflict (DESIGN.md#claim-family).
	Claim(ctx context.Context, p ClaimParams) (Card, error)
	// ClaimNext claims the oldest unclaimed card in a pool state;
	// ErrNotFound when there is none (DESIGN.md#label-routing).
	ClaimNext(ctx context.Context, p ClaimNextParams) (Card, error)
	// RenewClaims renews every hold in one batched write: one result per
	// hold, the error the batch's (DESIGN.md#heartbeat-batch).
	RenewClaims(ctx context.Context, p RenewClaimsParams) ([]RenewResult, error)
	// ExpireClaimOwned sets the lease to now, so the watchdog may rule on the
	// card at once instead of waiting out the TTL (DESIGN.md#owner-dead).
	ExpireClaimOwned(ctx context.Context, p OwnedParams) error
	// DisownClaimOwned records that the holder's agent stopped vouching for
	// the claim while its lease runs on (Card.Disowned): the lease and the
	// claim are left as they are, and no event is recorded
	// (DESIGN.md#keepalive).
	DisownClaimOwned(ctx context.Context, p OwnedParams) error
}

// OwnerWriter is the claim holder's fenced writes: each is a
// compare-and-set on (claim, claim_epoch) (DESIGN.md#fence).
type OwnerWriter interface {
	// SetStateOwned is the holder's move (DESIGN.md#machine-reasons,
	// DESIGN.md#retries for p.Reason and p.Retry).
	SetStateOwned(ctx context.Context, p SetStateOwnedParams) (MoveResult, error)
	// SetLastRunOwned points the card at p.RunID under p.Token's epoch; an
	// open run of another claim is ErrInvalidArgument (DESIGN.md#claim-run,
	// DESIGN.md#run-fence).
	SetLastRunOwned(ctx context.Context, p SetLastRunOwnedParams) error
	SetAwaitingInputOwned(ctx context.Context, p SetAwaitingInputOwnedParams) error
	SetGaveUpOwned(ctx context.Context, p SetGaveUpOwnedParams) error
	// ReleaseOwned is the holder's hand-back: it clears the claim (epoch
	// kept), closing its open run and filing a stranded card as Release
	// does; a free card is nil (DESIGN.md#resume).
	ReleaseOwned(ctx context.Context, p OwnedParams) error
}

// Lifecycle is a card's first and last write in one each: Start claims
// and starts the run, Finish records the verdict, files and releases
// (DESIGN.md#lifecycle).
type Lifecycle interface {
	// Start claims the card (p.Card, or with p.Next the oldest claimable),
	// starts or resumes its run and moves it into the running column, in one
	// write (DESIGN.md#lifecycle, DESIGN.md#start-next, DESIGN.md#resume).
	// Refusals write nothing (DESIGN.md#lifecycle-refusals); a retry whose
	// answer was lost is answered from what it wrote.
	Start(ctx context.Context, p StartParams) (StartResult, error)
	// Finish records the verdict on the claim's run, files the card and
	// releases the claim, in one write fenced on p.Token and the run
	// (DESIGN.md#lifecycle, DESIGN.md#started-from, DESIGN.md#retries);
	// refusals write nothing (DESIGN.md#lifecycle-refusals).
	Finish(ctx context.Context, p FinishParams) (FinishResult, error)
}

// Runs is the fine-grained run verbs: a run started, updated and read
// under the claim that owns it (DESIGN.md#claim-run).
type Runs interface {
	// CreateRun starts a run owned by p.Token and points its card at it, in
	// one write; a stale token is ErrClaimConflict, a taken run id
	// ErrAlreadyExists (DESIGN.md#run-fence).
	CreateRun(ctx context.Context, p CreateRunParams) (Run, error)
	// UpdateRun writes a run under the claim that owns it (p.Token is
	// required); anything else is ErrClaimConflict (DESIGN.md#run-fence).
	UpdateRun(ctx context.Context, p UpdateRunParams) (Run, error)
	//storegen:read
	GetRun(ctx context.Context, p GetRunParams) (Run, error)
}

// Recovery is the watchdog's verbs: the store's clock every expiry is
// judged by, the listings of expired and un-leased claims, the transfer
// and the fenced release of an abandoned claim (DESIGN.md#store-clock,
// DESIGN.md#transfer-first, DESIGN.md#recovery-sweep).
type Recovery interface {
	// Now is the store's clock, a lower bound of its stamps: every
	// comparison with a store-stamped time uses it (DESIGN.md#store-clock).
	//storegen:read
	Now(ctx context.Context) (time.Time, error)
	// ListExpiredClaimCandidates lists one page of claimed cards whose lease
	// ended at or before p.Cutoff, lease ascending, at most p.Limit (applied
	// in the query), resuming after p.After (DESIGN.md#paging).
	//storegen:read
	ListExpiredClaimCandidates(ctx context.Context, p ListExpiredClaimCandidatesParams) (ListExpiredClaimCandidatesResult, error)
	// ListUnleasedRunningClaims lists the claims with no lease on running
	// cards with a recorded run, last updated at or before p.Cutoff, oldest
	// first, at most p.Limit, selected in the query (DESIGN.md#unleased-sweep);
	// the local twin has none (DESIGN.md#twin-unleased).
	//storegen:read
	ListUnleasedRunningClaims(ctx context.Context, p ListUnleasedRunningClaimsParams) ([]Card, error)
	// ReclaimExpired transfers an expired claim to a recovery marker in one
	// CAS and returns the card as the transfer left it
	// (DESIGN.md#transfer-first, DESIGN.md#claim-run).
	ReclaimExpired(ctx context.Context, p ReclaimExpiredParams) (Card, error)
	// ReleaseExpired clears an abandoned claim in one CAS on its whole
	// precondition (see ReleaseExpiredParams). A free card is ErrClaimConflict:
	// the claim the caller judged is not there any more.
	ReleaseExpired(ctx context.Context, p ReleaseExpiredParams) error
}

// EventLog is the read of the event log every write appends to
// (DESIGN.md#effects, DESIGN.md#event-log).
type EventLog interface {
	// Events returns a page of events with Seq > p.After; a page shorter
	// than p.Limit is the end of the log (DESIGN.md#effects), and a reader
	// below a prune is refused (ErrEventsPruned, DESIGN.md#retention).
	//storegen:read
	Events(ctx context.Context, p EventsParams) ([]Event, error)
}
