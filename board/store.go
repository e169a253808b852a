package board

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
	// (see Store.Start).
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
	// operator put it; see Store.Finish).
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

	GetCard(ctx context.Context, p GetCardParams) (Card, error)
	// ListCards lists cards ordered by creation time, oldest first.
	ListCards(ctx context.Context, p ListCardsParams) ([]Card, error)
	// Dependents lists the cards that declare id among their blockers.
	Dependents(ctx context.Context, p DependentsParams) ([]Card, error)
	// CountCards counts the cards in each state and the claimed ones
	// without handing back the cards (DESIGN.md#queue-depth).
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
	// ErrTerminalStateExit; terminal → terminal is an ordinary refiling.
	SetState(ctx context.Context, p MoveParams) error
	// SetStateFrom is an automation move, CAS on m.From: drift is
	// changed=false with no event; a terminal From is ErrTerminalStateExit
	// even when drifted.
	SetStateFrom(ctx context.Context, p MoveParams) (MoveResult, error)
	// Reopen is the only exit from a terminal state: the card must be
	// terminal, the target a working (non-terminal) state, and no card that
	// names this one among its blockers may be outside waiting_deps
	// (Board.ReopenBlockedBy words the refusal). A declared
	// m.From makes it a compare-and-set on the source as well: a card no
	// longer in From is refused with ErrTransitionRejected and nothing is
	// written (the bulk reopen of a state sweep walks an ageing snapshot).
	Reopen(ctx context.Context, p MoveParams) error
	// AdjustLabels adds then removes labels in one atomic step (removes win).
	// A no-op writes nothing and emits no event.
	AdjustLabels(ctx context.Context, p AdjustLabelsParams) (Card, error)
	// SetLabels replaces the label set (absolute by contract: it may re-arm
	// a one-shot label, by design).
	SetLabels(ctx context.Context, p SetLabelsParams) (Card, error)
	// Release clears the claim when it is held by exactly marker (any epoch):
	// the operator's force-release (after reading the holder) and the sweeps
	// of legacy and recovery claims. A free card is nil; another holder is
	// ErrClaimConflict. In the same write it closes the released claim's
	// own open run — the card's recorded run when its owner and epoch are
	// the released claim's and its status is running or queued — as
	// RunFailedResumable with failure code FailureClaimReleased, so the
	// next Start resumes it and the released holder's late run writes are
	// refused by the fence — and a card that would be left free in a
	// running column that is not a pool state is filed to the first pool
	// state (as ReleaseOwned; Board.ReleaseFiling).
	Release(ctx context.Context, p ReleaseParams) error
}

// Claimer takes claims and keeps their leases: a claim, the heartbeat's
// batched renewal, and the expiry of a dead worker's lease
// (DESIGN.md#lease, DESIGN.md#heartbeat-batch, DESIGN.md#owner-dead).
type Claimer interface {
	// Claim acquires a free card (epoch bumped, claimed_at and lease stamped,
	// claimed event) or refreshes the lease of the same marker (idempotent:
	// same epoch, no event, no updated_at bump). Another marker's live or
	// expired claim is ErrClaimConflict: only ReclaimExpired transfers. It
	// returns the card as the write left it.
	Claim(ctx context.Context, p ClaimParams) (Card, error)
	// ClaimNext claims the oldest unclaimed card in a pool state;
	// ErrNotFound when there is none.
	ClaimNext(ctx context.Context, p ClaimNextParams) (Card, error)
	// RenewClaims pushes the lease of each hold to now+lease, never
	// backwards, in one batched write. One result per hold, in order. The
	// returned error is for the batch as a whole (store unreachable,
	// ErrOutcomeUnknown); per-hold conflicts are in the results.
	RenewClaims(ctx context.Context, p RenewClaimsParams) ([]RenewResult, error)
	// ExpireClaimOwned sets the lease to now, so the watchdog may rule on the
	// card at once instead of waiting out the TTL (a dead worker's claims).
	ExpireClaimOwned(ctx context.Context, p OwnedParams) error
}

// OwnerWriter is the claim holder's fenced writes: each is a
// compare-and-set on (claim, claim_epoch) (DESIGN.md#fence).
type OwnerWriter interface {
	// Owner writes: CAS on (claim, claim_epoch).
	SetStateOwned(ctx context.Context, p SetStateOwnedParams) (MoveResult, error)
	// SetLastRunOwned points the card at runID and records tok's epoch as
	// the pointer's (Card.LastRunEpoch), also when the pointer is already
	// runID but was stamped by an earlier claim. A run that has no final
	// verdict must be tok's own (its Owner and Epoch): pointing at another
	// claim's open run is ErrInvalidArgument and writes nothing — taking
	// it over is Start's resume — so an open run's pointer epoch is always
	// its own (board.PointFence).
	SetLastRunOwned(ctx context.Context, p SetLastRunOwnedParams) error
	SetAwaitingInputOwned(ctx context.Context, p SetAwaitingInputOwnedParams) error
	SetGaveUpOwned(ctx context.Context, p SetGaveUpOwnedParams) error
	// ReleaseOwned clears claim, claimed_at and lease and keeps the epoch:
	// the holder's hand-back. Releasing a free card is nil. In the same
	// write, as Release does, it closes the released claim's own open run
	// (RunFailedResumable, FailureClaimReleased; a recovery claim owns no
	// run) and files a card that would be left free in a running column
	// that is not a pool state (Board.Strands: the fleet board's) to the
	// first pool state, with no reason and the move's state event, so
	// nothing is left where no worker picks it up.
	ReleaseOwned(ctx context.Context, p OwnedParams) error
}

// Lifecycle is a card's first and last write in one each: Start claims
// and starts the run, Finish records the verdict, files and releases
// (DESIGN.md#lifecycle).
type Lifecycle interface {
	// Start is a card's first lifecycle write: it claims the card (as
	// Claim or ClaimNext would, epoch bumped, claimed event), starts its
	// run owned by the new token, points the card at it (LastRunID,
	// LastRunEpoch, Runs) and moves the card into the running column
	// (no move when it is there already), as ONE atomic, durable write.
	// Refused up front, minting nothing (no epoch, no run, no event): a
	// card in a terminal state (ErrTerminalStateExit), a card claimed by
	// anyone, the same marker included (ErrClaimConflict naming the
	// holder), a card whose recorded run is paused (paused_operator or
	// paused_waiting_human: the parking brake, which a Start neither
	// resumes nor supersedes, with r.Fresh neither; ErrTransitionRejected
	// naming the run and its status), an invalid run or request
	// (ErrInvalidArgument); with Next, a card whose run is paused is
	// passed over as a held one is, and no claimable card is ErrNotFound.
	//
	// Resume: when the card records a run that has no final verdict (its
	// status is not finished, failed or cancelled: a resumable failure, or
	// a run whose claim ended without one) and is not paused, and r.Fresh
	// is false, that run
	// is taken over instead of creating one (a card's free claim cannot
	// have a live owner writing it: the fence refuses the old epoch): its
	// ID, checkpoint and continuation are kept, its status becomes
	// r.Run.Status (running by default), its failure code is cleared, and
	// its owner, epoch and identity become the new claim's.
	// Runs does not grow (a resumed run is not a new one). r.Run.ID is
	// then unused. Only a store whose board resumes runs does this: the
	// local (bbolt) twin. The fleet (MongoDB) twin always starts a fresh
	// run, as if r.Fresh were set, because its watchdog bounds a card's
	// returns to the pool by counting its runs (the run ceiling,
	// DESIGN.md#twin-repark), which a resume would never grow. With
	// r.Fresh, such a run is closed in the same write
	// (status cancelled, failure code FailureRunSuperseded) and a new one
	// is created, so no run is ever left open with nothing pointing at it.
	//
	// A retry after an unknown outcome is answered, not repeated: when the
	// card is already claimed by r.Marker with a lease that has not ended
	// and points at r.Run.ID under that claim's epoch (the write landed),
	// Start returns that state again. It refreshes the lease as an
	// idempotent same-marker Claim does (now+r.Lease, never backwards; same
	// epoch, no event, no updated_at bump) — the caller counts the claim
	// from the retry, so the stored lease must reach as far — and writes
	// nothing else. With r.Next, the
	// card is the one whose run is r.Run.ID. A Start that resumed a run
	// wrote no run named r.Run.ID, so its retry cannot be told from a
	// second Start by the same marker: it is ErrClaimConflict naming
	// r.Marker, and the caller reads the card (its claim and LastRunID)
	// to recover the answer.
	Start(ctx context.Context, p StartParams) (StartResult, error)
	// Finish is a card's last lifecycle write, fenced on r.Token (CAS on
	// the card's claim and epoch) and on the run: r.RunID must be the
	// card's recorded run (LastRunID) started or resumed under r.Token
	// (run.Owner and run.Epoch), and still open (running, queued or
	// paused; a run that already has a verdict is ErrTransitionRejected).
	// In ONE write it records the verdict (status, failure code,
	// checkpoint), files the card by the board — RunFinished to the
	// completion state (reason run_finished, dependents promoted as for
	// any completion), RunFailed to the failed state (reason run_failed;
	// a board without one is ErrInvalidArgument, checked before anything
	// is written), RunFailedResumable out of the running column to the
	// first pool state when the running column is not itself a pool
	// state (no reason: the owner's own hand-back) — and releases the
	// claim (epoch kept). A card an operator moved while the run went on
	// is not moved by the filing when it is in a terminal state, or (for
	// RunFailedResumable) anywhere but the running column: the verdict and
	// the release still land. A stale token is ErrClaimConflict and
	// writes nothing.
	Finish(ctx context.Context, p FinishParams) (FinishResult, error)
}

// Runs is the fine-grained run verbs: a run started, updated and read
// under the claim that owns it (DESIGN.md#claim-run).
type Runs interface {
	// CreateRun starts a run for a worker that uses the fine-grained
	// verbs: fenced on r.Token (the card r.Run.Card must be claimed by
	// exactly it), the run created owned by the token (Owner, Epoch) and
	// the card pointed at it (LastRunID, LastRunEpoch, Runs) in ONE write.
	// The card's recorded run it displaces, when that has no final verdict,
	// is closed in the same write (status cancelled, failure code
	// FailureRunSuperseded, as a fresh Start closes it), so no run is left
	// open with nothing pointing at it. A stale token is ErrClaimConflict
	// and writes nothing; a duplicate run id is ErrInvalidArgument.
	CreateRun(ctx context.Context, p CreateRunParams) (Run, error)
	// UpdateRun is fenced on u.Token, which is required: the run's card
	// must be claimed by exactly u.Token, and the run must be that claim's
	// — for a worker token, run.Owner and run.Epoch are the token's; for a
	// recovery (reaper:) token, the run is the card's recorded run and
	// run.Epoch is the claim it judges (Card.RecoveredEpoch). Anything
	// else is ErrClaimConflict and writes nothing. u.IfStatus adds a CAS
	// on the run's status.
	UpdateRun(ctx context.Context, p UpdateRunParams) (Run, error)
	GetRun(ctx context.Context, p GetRunParams) (Run, error)
}

// Recovery is the watchdog's verbs: the store's clock every expiry is
// judged by, the listings of expired and un-leased claims, the transfer
// and the fenced release of an abandoned claim (DESIGN.md#store-clock,
// DESIGN.md#transfer-first, DESIGN.md#recovery-sweep).
type Recovery interface {
	// Now is the store's clock: the time its own lease, claimed_at and
	// updated_at stamps are taken from, as a lower bound (the MongoDB twin
	// reads the server's clock and subtracts the round trip). Every
	// comparison against a store-stamped time — an expiry cutoff, a grace,
	// a horizon — must use it, never the caller's clock: two clocks that
	// disagree would otherwise judge a live lease expired.
	Now(ctx context.Context) (time.Time, error)
	// ListExpiredClaimCandidates lists one page of claimed cards whose lease
	// ended at or before q.Cutoff, lease ascending, at most q.Limit (applied
	// in the query), resuming after q.After.
	ListExpiredClaimCandidates(ctx context.Context, p ListExpiredClaimCandidatesParams) (ListExpiredClaimCandidatesResult, error)
	// ListUnleasedRunningClaims lists claims with no lease whose card sits
	// in the running column with a recorded run and was last updated at or
	// before cutoff, oldest update first, at most limit — the selection
	// filter lives in the query so conserved cards cannot starve the batch
	// (DESIGN.md#unleased-sweep). Only the fleet (MongoDB) twin can hold such claims: a
	// foreign writer may strip a lease there. The local twin returns none
	// (DESIGN.md#twin-unleased: nobody else writes its file).
	ListUnleasedRunningClaims(ctx context.Context, p ListUnleasedRunningClaimsParams) ([]Card, error)
	// ReclaimExpired transfers an expired claim to a recovery marker in one
	// CAS, bumping the epoch, and returns the new token and the card as the
	// transfer observed it (after the write). The card records which claim
	// the recovery claim judges (Card.RecoveredEpoch): the transferred
	// worker claim's epoch, or, from a recovery claim, the one it carried.
	ReclaimExpired(ctx context.Context, p ReclaimExpiredParams) (Card, error)
	// ReleaseExpired clears an abandoned claim in one CAS on its whole
	// precondition (see ReleaseExpiredParams). A free card is ErrClaimConflict:
	// the claim the caller judged is not there any more.
	ReleaseExpired(ctx context.Context, p ReleaseExpiredParams) error
}

// EventLog is the read of the event log every write appends to
// (DESIGN.md#effects, DESIGN.md#event-log).
type EventLog interface {
	// Events returns events with Seq > after, oldest first, at most limit,
	// and exactly limit while more than that follow: a shorter page is the
	// end of the log as the call saw it (agent.Effects.SeekHead relies on it).
	Events(ctx context.Context, p EventsParams) ([]Event, error)
}
