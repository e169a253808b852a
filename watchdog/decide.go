package watchdog

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// Action is what the watchdog does with a stuck card.
type Action string

const (
	// ActionKeep leaves the card and its claim alone (conserve).
	ActionKeep Action = "keep"
	// ActionGiveUp files the card to the failed column under machine
	// provenance with a gave_up stamp naming the gone run: a person decides.
	ActionGiveUp Action = "give_up"
	// ActionRelease drops the claim and nothing else: the card is simply
	// eligible again.
	ActionRelease Action = "release"
	// ActionComplete files the card to the completion state with the run's
	// own verdict (run_finished), so the downstream chain fires.
	ActionComplete Action = "complete"
	// ActionFail files the card to the failed column with the run's own
	// verdict (run_failed).
	ActionFail Action = "fail"
	// ActionRepark returns the card to the dispatch pool.
	ActionRepark Action = "repark"
)

// Rule names the row of the decision table that matched, for logs, the
// pass report and tests.
type Rule string

const (
	RuleRunReadError      Rule = "run_read_error"      // row 1
	RuleRunPointerGone    Rule = "run_pointer_gone"    // row 2
	RuleStampWindowOpen   Rule = "stamp_window_open"   // row 3
	RuleNoRun             Rule = "no_run"              // row 4
	RuleRunLive           Rule = "run_live"            // row 5
	RuleRunPaused         Rule = "run_paused"          // row 6
	RuleRunCancelled      Rule = "run_cancelled"       // row 7
	RuleContinuation      Rule = "continuation_armed"  // row 8
	RuleRunFinished       Rule = "run_finished"        // row 9
	RuleRunFailed         Rule = "run_failed"          // row 10
	RuleRunRetry          Rule = "run_retry"           // row 10, a retryable failure: repark
	RuleAttemptsSpent     Rule = "attempts_spent"      // rows 10 and 11: the retry policy's limit
	RuleRunResumable      Rule = "run_resumable"       // row 11, repark
	RuleParkedOutsidePool Rule = "parked_outside_pool" // row 11, keep
	RuleUnknownStatus     Rule = "unknown_status"      // row 12

	// RuleRecoveryHold and RuleRecoveryHoldSpent are not rows of the table:
	// they are what AfterTransfer makes of a keep decided after a transfer.
	RuleRecoveryHold      Rule = "recovery_hold"
	RuleRecoveryHoldSpent Rule = "recovery_hold_spent"
	// RuleRecoveryConserve is a keep after a spent hold that still
	// conserves: a run that cannot be read, a live run, or a card that a
	// release would leave free in a column nothing picks up.
	RuleRecoveryConserve Rule = "recovery_conserve"
	// RuleClockUnsteady is not a row of the table either: a pass that does
	// not yet trust the store's clock keeps every card but those whose
	// owner is provably dead by its pid (DESIGN.md#clock-steps).
	RuleClockUnsteady Rule = "clock_unsteady"
)

// Decision is the verdict on one stuck card.
type Decision struct {
	Action Action `json:"action"`
	// Row is the row of the table that matched (1..12). The recovery-hold
	// rules applied after a transfer keep the row of the keep they judged.
	Row  int  `json:"row,omitempty"`
	Rule Rule `json:"rule"`
	// Reason explains the verdict to a person reading a log line.
	Reason string `json:"reason"`
	// Target is the state a filing writes (complete, fail, give_up); empty
	// otherwise. A repark's target depends on the twin and is chosen by the
	// reaper, not by the table.
	Target string `json:"target,omitempty"`
	// StateReason is the provenance the filing carries: the run's own
	// descriptive verdict for complete / fail (so the downstream chain fires
	// as it would have for the living owner), machine provenance for
	// everything the watchdog decides on its own (DESIGN.md#verdict-provenance).
	StateReason board.Reason `json:"state_reason,omitempty"`
	// Retry marks a repark that is a retry under the card's retry policy
	// (DESIGN.md#retries): a fresh attempt, the card passed over by the
	// pool until the backoff the store stamps has passed.
	Retry bool `json:"retry,omitempty"`
	// Attempts and MaxAttempts are the card's runs and its policy's limit,
	// for the rows the retry policy routes (9–11).
	Attempts    int `json:"attempts,omitempty"`
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Stamp is the gave_up stamp a filing leaves once the card's attempts
	// are spent (rule attempts_spent); zero otherwise. A value, so a
	// Decision stays comparable.
	Stamp board.GaveUp `json:"gave_up,omitzero"`
}

// StuckCard is the input of the decision table: the judged claim's run (or
// the error reading it) and the card itself.
type StuckCard struct {
	// Run is the run the judged claim started, nil when there is none to
	// load. A run an earlier claim recorded is never this claim's run.
	Run *board.Run
	// RunErr is the error reading the run. ErrNotFound is not a read error:
	// it is the answer "no such run" and counts as a nil Run.
	RunErr error
	// Card is the card as judged. Its State is the column.
	Card board.Card
	// RecordedRunID is the run pointer the judged claim stamped (see
	// ClaimRun); empty when the claim stamped none, even if the card still
	// points at a run an earlier claim recorded.
	RecordedRunID string
	Board         board.Board
	Now           time.Time
	// Lease is the configured claim lease; the stamp window closes two
	// leases after the claim began.
	Lease time.Duration
	// Fleet is the twin's: a Start never resumes a recorded run there, so
	// every return to the pool is a fresh attempt under the retry policy
	// (DESIGN.md#retries). False on the local twin, where a resumed run
	// is the same attempt.
	Fleet bool
	// ClaimStart is when the claim being judged began. Zero means
	// Card.ClaimedAt. The reaper sets it to the listed claim's claimed_at
	// when it re-decides after a transfer, because the transfer re-stamps
	// claimed_at and would otherwise re-open the window it just closed.
	ClaimStart time.Time
}

// StampWindow is how many leases after the claim began the absence of a run
// stamp is still credible (DESIGN.md#row-3: the real window is seconds; past two
// leases "the stamp is late" stops being believable).
const StampWindow = 2

// stampWindowOpen reports whether the claim is younger than StampWindow
// leases. An unknown claim start (zero) counts as closed: the lease already
// expired, which is positive evidence the holder stopped, and an unbounded
// keep is the stuck card this watchdog exists to clear.
func (in StuckCard) stampWindowOpen() bool {
	start := in.ClaimStart
	if start.IsZero() {
		start = in.Card.ClaimedAt
	}
	if start.IsZero() {
		return false
	}
	return in.Now.Sub(start) < StampWindow*in.Lease
}

// DecideStuckCard is the one decision table (DESIGN.md#decision-table). It is pure and
// shared by every caller — the gated reap, its pre-check, and the ungated
// un-leased sweep — so two authorities never classify the same situation
// differently. Rows are tried in order; the first that matches wins.
func DecideStuckCard(in StuckCard) Decision {
	return decide(in, in.Card.State)
}

// PreCheck is the table as the reaper consults it BEFORE the transfer, on the
// listing's copy of the card: the card's column is blanked, so the parked row
// cannot keep (a parked card is transferred and re-judged on the state the
// transfer observes, where its keep is granted once). The stamp-window keep
// is re-applied on the real column only when no run pointer is recorded —
// with a pointer, the pointer is the stamp and the window is irrelevant.
func PreCheck(in StuckCard) Decision {
	if runMissing(in) && in.RecordedRunID == "" && in.Board.IsRunning(in.Card.State) && in.stampWindowOpen() {
		return rowStampWindow(in)
	}
	return decide(in, "")
}

// runMissing reports "no run loaded, and no error reading it".
func runMissing(in StuckCard) bool {
	return in.Run == nil && (in.RunErr == nil || errors.Is(in.RunErr, board.ErrNotFound))
}

func rowStampWindow(in StuckCard) Decision {
	return Decision{Action: ActionKeep, Row: 3, Rule: RuleStampWindowOpen,
		Reason: fmt.Sprintf("no run recorded yet and the claim is younger than %d leases: the run stamp lands after the launch and may still come", StampWindow)}
}

// decide evaluates the rows with column as the card's column ("" when
// blanked by the pre-check).
func decide(in StuckCard, column string) Decision {
	c := in.Card
	switch {
	// Row 1: conserve on doubt.
	case in.RunErr != nil && !errors.Is(in.RunErr, board.ErrNotFound):
		return Decision{Action: ActionKeep, Row: 1, Rule: RuleRunReadError,
			Reason: fmt.Sprintf("reading run %q failed, conserving: %v", c.LastRunID, in.RunErr)}

	// Row 2: the card records a run that is gone. A run happened and nobody
	// can tell whether its work was delivered; releasing it bare would let
	// the launch path read the absence as a fresh start (DESIGN.md#row-2). The pointer is the stamp, so the window is irrelevant.
	case in.Run == nil && in.RecordedRunID != "":
		return Decision{Action: ActionGiveUp, Row: 2, Rule: RuleRunPointerGone,
			Target: board.StateFailed, StateReason: board.ReasonWatchdog,
			Reason: fmt.Sprintf("the claim recorded run %q but the run is gone (pruned or deleted): a person decides", in.RecordedRunID)}

	// Row 3: no stamp yet, but the stamp is best-effort and lands after the
	// launch; freeing the card could double-launch a live worker. Bounded
	// by the claim's age.
	case in.Run == nil && in.Board.IsRunning(column) && in.stampWindowOpen():
		return rowStampWindow(in)

	// Row 4: the claimant died before launching anything.
	case in.Run == nil:
		return Decision{Action: ActionRelease, Row: 4, Rule: RuleNoRun,
			Reason: "no run recorded under this claim: the claimant stopped before launching, the card is simply eligible again"}
	}

	r := in.Run
	switch {
	// Row 5: never steal from a live run.
	case r.Status == board.RunRunning || r.Status == board.RunQueued:
		return Decision{Action: ActionKeep, Row: 5, Rule: RuleRunLive,
			Reason: fmt.Sprintf("run %q is %s: never steal from a live run", r.ID, r.Status)}

	// Row 6: a paused run is parked; its retained claim is load-bearing
	// (DESIGN.md#row-6 parking brake).
	case r.Status == board.RunPausedWaitingHuman || r.Status == board.RunPausedOperator:
		return Decision{Action: ActionKeep, Row: 6, Rule: RuleRunPaused,
			Reason: fmt.Sprintf("run %q is %s: the parking brake holds", r.ID, r.Status)}

	// Row 7: an operator's stop is never auto-routed.
	case r.Status == board.RunCancelled:
		return Decision{Action: ActionKeep, Row: 7, Rule: RuleRunCancelled,
			Reason: fmt.Sprintf("run %q was cancelled: an operator's stop is never auto-routed", r.ID)}

	// Row 8: a platform continuation owns the run's future.
	case r.Continuation.Armed():
		return Decision{Action: ActionKeep, Row: 8, Rule: RuleContinuation,
			Reason: fmt.Sprintf("run %q has %s armed: the continuation owns its future", r.ID, r.Continuation)}

	// Rows 9–11: where the run's end sends the card is the retry policy's
	// routing, the one the lifecycle's Finish uses too (DESIGN.md#retries).
	case r.Status == board.RunFinished || r.Status == board.RunFailed || r.Status == board.RunFailedResumable:
		return routeRun(in, column, r)
	}

	// Row 12: never guess.
	return Decision{Action: ActionKeep, Row: 12, Rule: RuleUnknownStatus,
		Reason: fmt.Sprintf("run %q has status %q and continuation %q: never guess", r.ID, r.Status, r.Continuation)}
}

// parkedOutsidePool reports a card in a known column that is neither a pool
// state nor the running column. A blanked column ("") is never parked: that
// is how the pre-check stops this row from keeping.
func parkedOutsidePool(b board.Board, column string) bool {
	return column != "" && !b.IsPool(column) && !b.IsRunning(column)
}

// AfterTransfer applies the recovery-hold rule to a decision taken on the
// card the transfer observed (DESIGN.md#observed-card). A keep there was not a keep on the
// listing's copy, so the card is held under the recovery claim until the
// next lease, once: the recovery marker left on the claim is the record of
// that grant. When prevMarker — the marker the transfer replaced — is
// already a recovery marker, the keep was granted before and the claim is
// released now, so a parked card is never held for ever.
//
// Two keeps outlive a spent hold, because releasing would not be a return
// to a safe state: a run that cannot be read or is live (rows 1 and 5:
// conserve on doubt, never steal from a live run), and any keep on a card
// that a release would leave free in a column nothing picks up (strands:
// the running column where it is not a pool state). Those stay held under
// the recovery claim and are judged again once its lease ends.
func AfterTransfer(d Decision, prevMarker string, strands bool) Decision {
	if d.Action != ActionKeep {
		return d
	}
	if !board.IsRecoveryMarker(prevMarker) {
		return Decision{Action: ActionKeep, Row: d.Row, Rule: RuleRecoveryHold,
			Reason: fmt.Sprintf("%s; holding under the recovery claim until the next lease, once", d.Reason)}
	}
	if d.Row == 1 || d.Row == 5 || strands {
		return Decision{Action: ActionKeep, Row: d.Row, Rule: RuleRecoveryConserve,
			Reason: fmt.Sprintf("%s; the recovery hold was granted before (previous claim %s), but a release would not be safe: conserving", d.Reason, prevMarker)}
	}
	return Decision{Action: ActionRelease, Row: d.Row, Rule: RuleRecoveryHoldSpent,
		Reason: fmt.Sprintf("%s; the recovery hold was already granted once (previous claim %s), releasing", d.Reason, prevMarker)}
}

// Strands reports whether a free card in state would sit where nothing
// picks it up: the running column, where it is not also a pool state (the
// fleet's board). Pool states are claimed by ClaimNext, terminal states
// are settled, and every other column is one a person parks cards in on
// purpose. No watchdog path may leave a card free in a stranding column.
func Strands(b board.Board, state string) bool { return b.Strands(state) }

// NeedsFiling reports whether filing card into target writes anything. The
// watchdog never files into the running column (it is where a launch puts a
// card, not a verdict), never into the state the card is already in, and
// never out of a terminal state: a sink already holds a settled verdict, and
// terminal → terminal is an operator's refiling, not the machine's
// (DESIGN.md#sinks). A card it does not file is only released.
func NeedsFiling(b board.Board, card board.Card, target string) bool {
	return target != "" && target != card.State && !b.IsRunning(target) && !b.IsTerminal(card.State)
}

// GiveUpStamp is the gave_up stamp of row 2: it names the gone run and why,
// for the Needs-attention lane a person reads.
func GiveUpStamp(card board.Card, runID string, now time.Time) *board.GaveUp {
	return &board.GaveUp{
		RunID:    runID,
		State:    card.State,
		Attempts: len(card.Runs),
		Reason: fmt.Sprintf("run %s is gone (pruned or deleted) and nobody can tell whether its work was delivered: reopen or re-queue to run it again, close to acknowledge",
			runID),
		At: now,
	}
}

// routeRun is rows 9–11: the watchdog writes down what the run's end
// means for the card, by board.Board.RouteRun, as the living owner's
// Finish would have (DESIGN.md#retries).
//
//   - Row 9: finished → complete, the run's own verdict.
//   - Row 10: failed → fail, the run's own verdict; a retryable failure
//     (PROCESS_ORPHANED, or marked retryable) is reparked as a fresh
//     attempt while attempts remain, and filed failed with an
//     attempts-spent stamp once they are spent.
//   - Row 11: resumable → back to the pool; on the fleet, where the
//     return is a fresh attempt, the ceiling state once attempts are
//     spent.
//
// A return to the pool (a repark) of a card somebody parked outside the
// pool keeps it instead: returning it only means something if the pool
// can reach it, and releasing would lift a brake somebody set.
func routeRun(in StuckCard, column string, r *board.Run) Decision {
	route := in.Board.RouteRun(in.Card, *r, !in.Fleet)
	d := Decision{Attempts: route.Attempts, MaxAttempts: route.MaxAttempts}
	row := 11
	if r.Status == board.RunFailed {
		row = 10
	}
	switch route.Kind {
	case board.RouteComplete:
		d.Action, d.Row, d.Rule, d.Target, d.StateReason = ActionComplete, 9, RuleRunFinished, route.To, route.Reason
		d.Reason = fmt.Sprintf("run %q finished: file the card as the living owner would have", r.ID)
	case board.RouteFail:
		d.Action, d.Row, d.Rule, d.Target, d.StateReason = ActionFail, 10, RuleRunFailed, route.To, route.Reason
		d.Reason = fmt.Sprintf("run %q failed: file the card as the living owner would have", r.ID)
	case board.RouteSpent:
		d.Row, d.Rule, d.Target, d.StateReason = row, RuleAttemptsSpent, route.To, route.Reason
		d.Stamp = *board.SpentStamp(*r, route, in.Now)
		if row == 10 {
			// The run's own verdict, filed as the living owner would have.
			d.Action = ActionFail
			d.Reason = fmt.Sprintf("run %q failed (%s), retryable, but the card's %s: file it failed", r.ID, r.FailureCode, route.Why())
		} else {
			// The watchdog's own judgement: machine provenance.
			d.Action = ActionGiveUp
			d.Reason = fmt.Sprintf("run %q is resumable, but the card's %s: file it to %s", r.ID, route.Why(), route.To)
		}
	case board.RouteRetry, board.RouteReturn:
		if parkedOutsidePool(in.Board, column) {
			return Decision{Action: ActionKeep, Row: row, Rule: RuleParkedOutsidePool, Attempts: d.Attempts, MaxAttempts: d.MaxAttempts,
				Reason: fmt.Sprintf("run %q would return to the pool but the card is parked in %q, outside the pool: the brake stays", r.ID, column)}
		}
		d.Action, d.Row, d.StateReason = ActionRepark, row, board.ReasonWatchdog
		if route.Kind == board.RouteRetry {
			d.Rule, d.Retry, d.StateReason = RuleRunRetry, true, route.Reason
			d.Reason = fmt.Sprintf("run %q failed (%s), retryable: return the card to the pool for attempt %d of %d, after a backoff of %s",
				r.ID, r.FailureCode, route.Attempts+1, route.MaxAttempts, route.Delay)
		} else {
			d.Rule = RuleRunResumable
			d.Reason = fmt.Sprintf("run %q is resumable: return the card to the pool", r.ID)
		}
	default:
		return Decision{Action: ActionKeep, Row: 12, Rule: RuleUnknownStatus,
			Reason: fmt.Sprintf("run %q has status %q: never guess", r.ID, r.Status)}
	}
	return d
}
