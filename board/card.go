package board

import (
	"slices"
	"time"
)

// ClaimToken is the fence a holder presents with every owner write: the
// marker that holds the claim and the epoch of the acquisition that granted
// it. The epoch only ever goes up (DESIGN.md#epoch-monotone).
type ClaimToken struct {
	Marker string `json:"marker"`
	Epoch  int64  `json:"epoch"`
}

// IsZero reports whether the token is empty (never a valid fence).
func (t ClaimToken) IsZero() bool { return t.Marker == "" && t.Epoch == 0 }

// Validate refuses a zero or malformed token.
func (t ClaimToken) Validate() error {
	if t.Marker == "" || t.Epoch <= 0 {
		return Invalid("zero or incomplete claim token %+v", t)
	}
	return ValidateMarker(t.Marker)
}

// Hold names one claim a holder keeps: the card and the token it holds it by.
type Hold struct {
	Card  string     `json:"card"`
	Token ClaimToken `json:"token"`
}

// GaveUp is the stamp left on a card the watchdog filed for a person to
// decide (DESIGN.md#row-2: a pruned run pointer is a give-up).
type GaveUp struct {
	RunID    string    `json:"run_id,omitempty"`
	State    string    `json:"state,omitempty"`
	Attempts int       `json:"attempts,omitempty"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

// Card is one work item on the board.
type Card struct {
	ID        string   `json:"id"`
	Title     string   `json:"title,omitempty"`
	State     string   `json:"state"`
	Labels    []string `json:"labels"`
	DependsOn []string `json:"depends_on"`
	LastRunID string   `json:"last_run_id,omitempty"`
	// LastRunEpoch is the claim epoch the run pointer was stamped under
	// (SetLastRunOwned). The watchdog judges a claim only by a pointer
	// its own claim stamped; zero for a pointer stamped before the field
	// existed, where the run's own epoch tells instead.
	LastRunEpoch  int64     `json:"last_run_epoch,omitempty"`
	Runs          []string  `json:"runs"`
	AwaitingInput bool      `json:"awaiting_input"`
	GaveUp        *GaveUp   `json:"gave_up,omitempty"`
	StateReason   Reason    `json:"state_reason,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	// PromotedBy is set on a dependent that left waiting_deps because its
	// last blocker completed (reason unblocked): the id of that blocker. It
	// is a record for people and tools reading the card; no rule reads
	// it — Reopen refuses while any dependent of the blocker is outside
	// waiting_deps, whichever blocker promoted it (Board.ReopenBlockedBy).
	PromotedBy string `json:"promoted_by,omitempty"`
	// Attempts counts the runs started for the card since it was created,
	// reopened or moved into a pool state by a person; a resumed run is
	// not a new one (DESIGN.md#retries). A counter, not len(Runs): the run
	// list is history, and may be pruned.
	Attempts int `json:"attempts,omitempty"`
	// RetryAt, when later than the store's clock, is when the pool takes
	// the card again after a retryable failure: ClaimNext and a Start of
	// the next card pass it over until then, and a claim by id is refused
	// (RetryRefusal). Stamped by the store's clock; a Reopen clears it.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Retry is the card's own retry policy, over the board's
	// (Board.RetryFor); nil: the board's.
	Retry *RetryPolicy `json:"retry,omitempty"`

	// The claim family. Ordinary writes never touch it.
	Claim           string    `json:"claim"`
	ClaimEpoch      int64     `json:"claim_epoch"`
	ClaimedAt       time.Time `json:"claimed_at,omitzero"`
	ClaimLeaseUntil time.Time `json:"claim_lease_until,omitzero"`
	// RecoveredEpoch is set while a recovery (reaper:) claim holds the
	// card: the epoch of the worker claim the watchdog took over, kept
	// across a recovery claim's own transfers. It is how the watchdog tells
	// the run that claim started from a run an earlier claim recorded
	// (JudgedEpoch). Zero otherwise; a release clears it.
	RecoveredEpoch int64 `json:"recovered_epoch,omitempty"`
	// DisownedEpoch is the epoch of a claim its holder's agent stopped
	// vouching for while the lease runs on (DisownClaimOwned): the claim
	// is disowned while it equals ClaimEpoch (Disowned). Every later claim
	// has a higher epoch, so nothing needs to clear it.
	DisownedEpoch int64 `json:"disowned_epoch,omitempty"`
}

// Disowned reports whether the card's claim is one its holder's agent gave
// up on (a missed keepalive) while its lease runs on: a restarted agent
// does not adopt it (DESIGN.md#keepalive).
func (c Card) Disowned() bool {
	return c.Claim != "" && c.DisownedEpoch != 0 && c.DisownedEpoch == c.ClaimEpoch
}

// JudgedEpoch is the epoch of the claim the watchdog judges this card by:
// the worker claim a recovery claim took over, or the card's own claim.
// Only a run pointer stamped under that epoch is the claim's run; one an
// earlier claim left (a reopened card, a re-claim after a release) says
// nothing about what this claim did. Zero means unknown: a recovery claim
// taken by an agent that did not record RecoveredEpoch.
func (c Card) JudgedEpoch() int64 {
	if IsRecoveryMarker(c.Claim) {
		return c.RecoveredEpoch
	}
	return c.ClaimEpoch
}

// Token is the card's current claim token (zero Marker when free).
func (c Card) Token() ClaimToken { return ClaimToken{Marker: c.Claim, Epoch: c.ClaimEpoch} }

// Claimed reports whether someone holds the card.
func (c Card) Claimed() bool { return c.Claim != "" }

// Legacy reports a claim with no lease stamped (DESIGN.md#legacy-claims: never
// reaped by time, only by the same-host pid sweep).
func (c Card) Legacy() bool { return c.Claim != "" && c.ClaimLeaseUntil.IsZero() }

// LeaseExpired reports whether the claim's lease ended at or before now.
func (c Card) LeaseExpired(now time.Time) bool {
	return c.Claim != "" && !c.ClaimLeaseUntil.IsZero() && !c.ClaimLeaseUntil.After(now)
}

// CreateCardParams is the input of CreateCard.
type CreateCardParams struct {
	ID        string   `json:"id"`
	Title     string   `json:"title,omitempty"`
	State     string   `json:"state,omitempty"` // empty: first pool state, or waiting_deps when a blocker is not complete
	Labels    []string `json:"labels,omitempty"`
	DependsOn []string `json:"depends_on,omitempty"`
	// Retry, when set, is the card's own retry policy (DESIGN.md#retries).
	Retry *RetryPolicy `json:"retry,omitempty"`
	Actor string       `json:"actor,omitempty"`
}

// ListCardsParams selects cards for ListCards.
type ListCardsParams struct {
	State string `json:"state,omitempty"` // empty: every state
	Limit int    `json:"limit,omitempty"` // 0: no limit
	// ClaimedOnly lists only cards that carry a claim (the boot sweep's
	// population); backends serve it from an index, not a scan.
	ClaimedOnly bool `json:"claimed_only,omitempty"`
	// RecoveryOnly lists only cards held by a recovery claim (a marker
	// starting with RecoveryPrefix), with or without a lease: the recovery
	// sweep's population (DESIGN.md#recovery-sweep). It implies ClaimedOnly. Backends
	// serve it from an index, not a scan, so the sweep reads only recovery
	// claims however many worker claims the store holds.
	RecoveryOnly bool `json:"recovery_only,omitempty"`
	// ClaimHosts, when set, lists only cards whose claim marker (a
	// worker's, or a recovery claim's) names one of these hosts exactly:
	// an agent's boot sweep reads its own host's claims, not the fleet's.
	// It implies ClaimedOnly; a marker that does not parse is left out.
	ClaimHosts []string `json:"claim_hosts,omitempty"`
}

// ClaimHostMatches reports whether marker names one of hosts (a
// ListCardsParams.ClaimHosts filter; none means any).
func ClaimHostMatches(marker string, hosts []string) bool {
	if len(hosts) == 0 {
		return true
	}
	m, err := ParseMarker(marker)
	return err == nil && slices.Contains(hosts, m.Host)
}
