package watchdog

import (
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// What a pass reports: the outcome of each card it decided and of each
// repair its sweeps made (DESIGN.md#dry-run, DESIGN.md#pass-concurrency).

// Outcome is what a pass did with one card.
type Outcome string

const (
	// OutcomeDecided: a dry run decided and wrote nothing.
	OutcomeDecided Outcome = "decided"
	// OutcomeKept: the pre-check kept the card; nothing was transferred.
	OutcomeKept Outcome = "kept"
	// OutcomeSkippedConflict: the claim changed between the listing and the
	// transfer (a renewal, an operator, another agent's reaper) — a clean
	// skip.
	OutcomeSkippedConflict Outcome = "skipped-conflict"
	// OutcomeTransferred: the claim was transferred and the card is held
	// under the recovery claim until its lease ends (the one-time hold).
	OutcomeTransferred Outcome = "transferred"
	// OutcomeFiled: the card was filed and the recovery claim released.
	OutcomeFiled Outcome = "filed"
	// OutcomeReleased: the claim was released and nothing else written.
	OutcomeReleased Outcome = "released"
	// OutcomeError: a store call failed; a recovery claim already taken is
	// kept so the next pass retries.
	OutcomeError Outcome = "error"
)

// CardResult is the pass's record of one listed card.
type CardResult struct {
	Card string `json:"card"`
	// Prev is the claim the listing saw.
	Prev board.ClaimToken `json:"prev"`
	// Token is the recovery token the transfer minted (zero when there was
	// no transfer).
	Token    board.ClaimToken `json:"token,omitzero"`
	Run      string           `json:"run,omitempty"`
	PreCheck Decision         `json:"pre_check"`
	// Decision is the decision that counted: the one taken on the card the
	// transfer observed, or the pre-check when nothing was transferred.
	Decision Decision `json:"decision"`
	Outcome  Outcome  `json:"outcome"`
	// FiledTo is the state the card was filed into, if any.
	FiledTo string `json:"filed_to,omitempty"`
	Err     error  `json:"-"`
	Error   string `json:"error,omitempty"`
}

// Sweep names one of the ungated repair sweeps.
type Sweep string

const (
	SweepRecovery Sweep = "recovery"
	SweepUnleased Sweep = "unleased"
)

// SweepResult is the pass's record of one card a repair sweep considered.
type SweepResult struct {
	Sweep  Sweep  `json:"sweep"`
	Card   string `json:"card"`
	Marker string `json:"marker"`
	// Decision is the disposition a reconciling sweep judged the card by
	// (nil for a release-only repair).
	Decision *Decision `json:"decision,omitempty"`
	Outcome  Outcome   `json:"outcome"`
	// FiledTo is the state a reconciling sweep filed the card into.
	FiledTo string `json:"filed_to,omitempty"`
	Err     error  `json:"-"`
	Error   string `json:"error,omitempty"`
}

// PassResult is what one pass did.
type PassResult struct {
	// At is the store's time the pass judged by (Store.Now).
	At time.Time `json:"at"`
	// Took is how long the pass ran, on this agent's monotonic clock.
	Took time.Duration `json:"took"`
	// ClockWait, when not zero, is how much longer this reaper watches the
	// store's clock before it trusts it: the pass kept every card but
	// those whose owner is provably dead by its pid
	// (DESIGN.md#clock-steps). A dry run decides all the same.
	ClockWait time.Duration `json:"clock_wait,omitempty"`
	DryRun    bool          `json:"dry_run"`
	// Enabled is the gate as this pass read it; off, no card was decided.
	Enabled bool `json:"enabled"`
	// Cards and Sweeps are sorted by card (the cards of a pass are
	// worked on concurrently; the order says nothing about timing).
	Cards  []CardResult  `json:"cards"`
	Sweeps []SweepResult `json:"sweeps"`
	// Reapers, when above 1, is how many live reapers shared the expired
	// claims: the pass listed this reaper's share, the claims whose
	// board.ShareKey is ShareIndex modulo Reapers (DESIGN.md#reaper-shares).
	Reapers    int `json:"reapers,omitempty"`
	ShareIndex int `json:"share_index,omitempty"`
}

// Card returns the record of card id in the pass, if it was listed.
func (p PassResult) Card(id string) (CardResult, bool) {
	for _, c := range p.Cards {
		if c.Card == id {
			return c, true
		}
	}
	return CardResult{}, false
}
