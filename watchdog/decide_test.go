package watchdog

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

var (
	t0    = time.Date(2026, 9, 2, 12, 0, 0, 0, time.UTC)
	lease = 30 * time.Second
)

// verdict is the part of a Decision a test pins; Reason is prose and is only
// checked for being present.
type verdict struct {
	Action      Action
	Row         int
	Rule        Rule
	Target      string
	StateReason board.Reason
}

func verdictOf(d Decision) verdict {
	return verdict{Action: d.Action, Row: d.Row, Rule: d.Rule, Target: d.Target, StateReason: d.StateReason}
}

func run(status board.RunStatus) *board.Run {
	return &board.Run{ID: "r1", Card: "c1", Status: status, Continuation: board.ContinuationNone}
}

func withContinuation(r *board.Run, c board.Continuation) *board.Run {
	r.Continuation = c
	return r
}

// stuck builds a StuckCard for card c1 in state, claimed age ago, whose
// claim recorded runPointer, on the fleet board (in_progress is not a pool
// state there).
func stuck(state, runPointer string, age time.Duration) StuckCard {
	return StuckCard{
		Card: board.Card{
			ID: "c1", State: state, LastRunID: runPointer, LastRunEpoch: 7,
			Claim: "host-a-4242", ClaimEpoch: 7,
			ClaimedAt:       t0.Add(-age),
			ClaimLeaseUntil: t0.Add(-time.Second),
		},
		RecordedRunID: runPointer,
		Board:         board.DefaultBoard(false),
		Now:           t0,
		Lease:         lease,
	}
}

// failedWith is a failed run with failure code, marked retryable by its
// worker or not.
func failedWith(code string, retryable bool) *board.Run {
	r := run(board.RunFailed)
	r.FailureCode, r.RetryableFailure = code, retryable
	return r
}

// attempts sets the runs the card has started (DESIGN.md#retries).
func (in StuckCard) attempts(n int) StuckCard {
	in.Card.Attempts = n
	return in
}

// fleet judges the card as the fleet's reaper does: no resume.
func (in StuckCard) fleet() StuckCard {
	in.Fleet = true
	return in
}

// policy sets the card's own retry policy and the board's.
func (in StuckCard) policy(card *board.RetryPolicy, brd board.RetryPolicy) StuckCard {
	in.Card.Retry = card
	in.Board.Retry = brd
	return in
}

func (in StuckCard) with(r *board.Run, err error) StuckCard {
	in.Run, in.RunErr = r, err
	return in
}

var errRead = errors.New("connection reset by peer")

func TestDecideStuckCard(t *testing.T) {
	t.Parallel()
	old := 10 * lease
	young := lease / 2
	keep := func(row int, rule Rule) verdict { return verdict{Action: ActionKeep, Row: row, Rule: rule} }
	tests := []struct {
		name string
		in   StuckCard
		want verdict
	}{
		{"row 1: run read error → keep",
			stuck(board.StateInProgress, "r1", old).with(nil, errRead), keep(1, RuleRunReadError)},
		{"row 1: a read error wins over a recorded pointer and a loaded run",
			stuck(board.StateInProgress, "r1", old).with(run(board.RunFinished), errRead), keep(1, RuleRunReadError)},
		{"row 2: no run but the card records a run pointer → give_up",
			stuck(board.StateInProgress, "r1", old).with(nil, nil),
			verdict{Action: ActionGiveUp, Row: 2, Rule: RuleRunPointerGone, Target: board.StateFailed, StateReason: board.ReasonWatchdog}},
		{"row 2: a not-found run is the answer no run, not a read error → give_up",
			stuck(board.StateInProgress, "r1", old).with(nil, fmt.Errorf("run %q: %w", "r1", board.ErrNotFound)),
			verdict{Action: ActionGiveUp, Row: 2, Rule: RuleRunPointerGone, Target: board.StateFailed, StateReason: board.ReasonWatchdog}},
		{"row 2: the stamp window is irrelevant when the pointer is the stamp → give_up",
			stuck(board.StateInProgress, "r1", young).with(nil, nil),
			verdict{Action: ActionGiveUp, Row: 2, Rule: RuleRunPointerGone, Target: board.StateFailed, StateReason: board.ReasonWatchdog}},
		{"row 3: no run, running column, claim younger than two leases → keep",
			stuck(board.StateInProgress, "", young).with(nil, nil), keep(3, RuleStampWindowOpen)},
		{"row 3: no run, running column, claim one nanosecond short of two leases → keep",
			stuck(board.StateInProgress, "", 2*lease-time.Nanosecond).with(nil, nil), keep(3, RuleStampWindowOpen)},
		{"row 4: no run, running column, claim exactly two leases old → release",
			stuck(board.StateInProgress, "", 2*lease).with(nil, nil),
			verdict{Action: ActionRelease, Row: 4, Rule: RuleNoRun}},
		{"row 4: no run, running column, claim start unknown → release",
			func() StuckCard {
				in := stuck(board.StateInProgress, "", 0)
				in.Card.ClaimedAt = time.Time{}
				return in
			}(),
			verdict{Action: ActionRelease, Row: 4, Rule: RuleNoRun}},
		{"row 4: no run, pool column, young claim → release (the window is a running-column rule)",
			stuck(board.StateReady, "", young).with(nil, nil),
			verdict{Action: ActionRelease, Row: 4, Rule: RuleNoRun}},
		{"row 4: no run, parked column, young claim → release",
			stuck(board.StateBacklog, "", young).with(nil, nil),
			verdict{Action: ActionRelease, Row: 4, Rule: RuleNoRun}},
		{"row 4: ClaimStart, not the re-stamped claimed_at, measures the window → release",
			func() StuckCard {
				in := stuck(board.StateInProgress, "", 0) // transfer re-stamped claimed_at = now
				in.ClaimStart = t0.Add(-old)
				return in
			}(),
			verdict{Action: ActionRelease, Row: 4, Rule: RuleNoRun}},
		{"row 5: running → keep",
			stuck(board.StateInProgress, "r1", old).with(run(board.RunRunning), nil), keep(5, RuleRunLive)},
		{"row 5: queued → keep",
			stuck(board.StateInProgress, "r1", old).with(run(board.RunQueued), nil), keep(5, RuleRunLive)},
		{"row 5: a live run wins over an armed continuation",
			stuck(board.StateInProgress, "r1", old).with(withContinuation(run(board.RunRunning), board.ContinuationRetryArmed), nil), keep(5, RuleRunLive)},
		{"row 6: paused waiting for a human → keep",
			stuck(board.StateInProgress, "r1", old).with(run(board.RunPausedWaitingHuman), nil), keep(6, RuleRunPaused)},
		{"row 6: paused by an operator → keep",
			stuck(board.StateAwaitingInput, "r1", old).with(run(board.RunPausedOperator), nil), keep(6, RuleRunPaused)},
		{"row 7: cancelled → keep",
			stuck(board.StateInProgress, "r1", old).with(run(board.RunCancelled), nil), keep(7, RuleRunCancelled)},
		{"row 8: failed with a retry armed → keep",
			stuck(board.StateInProgress, "r1", old).with(withContinuation(run(board.RunFailed), board.ContinuationRetryArmed), nil), keep(8, RuleContinuation)},
		{"row 8: finished with a redelivery pending → keep",
			stuck(board.StateInProgress, "r1", old).with(withContinuation(run(board.RunFinished), board.ContinuationRedeliveryPending), nil), keep(8, RuleContinuation)},
		{"row 8: resumable with a retry armed → keep",
			stuck(board.StateInProgress, "r1", old).with(withContinuation(run(board.RunFailedResumable), board.ContinuationRetryArmed), nil), keep(8, RuleContinuation)},
		{"row 9: finished → complete with the run's own verdict",
			stuck(board.StateInProgress, "r1", old).with(run(board.RunFinished), nil),
			verdict{Action: ActionComplete, Row: 9, Rule: RuleRunFinished, Target: board.StateDone, StateReason: board.ReasonRunFinished}},
		{"row 9: the target is the board's completion state",
			func() StuckCard {
				in := stuck("doing", "r1", old).with(run(board.RunFinished), nil)
				in.Board = board.Board{States: []board.State{
					{Name: "todo", Pool: true, Launch: true}, {Name: "doing", Running: true},
					{Name: "shipped", Terminal: true, Completion: true}, {Name: board.StateFailed, Terminal: true},
				}}
				return in
			}(),
			verdict{Action: ActionComplete, Row: 9, Rule: RuleRunFinished, Target: "shipped", StateReason: board.ReasonRunFinished}},
		{"row 10: failed → fail with the run's own verdict",
			stuck(board.StateInProgress, "r1", old).with(run(board.RunFailed), nil),
			verdict{Action: ActionFail, Row: 10, Rule: RuleRunFailed, Target: board.StateFailed, StateReason: board.ReasonRunFailed}},
		{"row 11: resumable in the running column → repark",
			stuck(board.StateInProgress, "r1", old).with(run(board.RunFailedResumable), nil),
			verdict{Action: ActionRepark, Row: 11, Rule: RuleRunResumable, StateReason: board.ReasonWatchdog}},
		{"row 11: resumable in a pool column → repark",
			stuck(board.StateReady, "r1", old).with(run(board.RunFailedResumable), nil),
			verdict{Action: ActionRepark, Row: 11, Rule: RuleRunResumable, StateReason: board.ReasonWatchdog}},
		{"row 11: resumable but parked in backlog, outside the pool → keep",
			stuck(board.StateBacklog, "r1", old).with(run(board.RunFailedResumable), nil), keep(11, RuleParkedOutsidePool)},
		{"row 11: resumable but parked in awaiting_input → keep",
			stuck(board.StateAwaitingInput, "r1", old).with(run(board.RunFailedResumable), nil), keep(11, RuleParkedOutsidePool)},
		{"row 11: resumable but the card sits in a terminal state → keep",
			stuck(board.StateBlocked, "r1", old).with(run(board.RunFailedResumable), nil), keep(11, RuleParkedOutsidePool)},
		{"row 11: local board, resumable in in_progress (running and pool) → repark",
			func() StuckCard {
				in := stuck(board.StateInProgress, "r1", old).with(run(board.RunFailedResumable), nil)
				in.Board = board.DefaultBoard(true)
				return in
			}(),
			verdict{Action: ActionRepark, Row: 11, Rule: RuleRunResumable, StateReason: board.ReasonWatchdog}},
		// DESIGN.md#retries: rows 10 and 11 under the retry policy.
		{"row 10: orphaned (PROCESS_ORPHANED), attempts left → repark as a retry, machine provenance",
			stuck(board.StateInProgress, "r1", old).with(failedWith(board.FailureProcessOrphaned, false), nil).attempts(1),
			verdict{Action: ActionRepark, Row: 10, Rule: RuleRunRetry, StateReason: board.ReasonRetry}},
		{"row 10: a failure its worker marked retryable, attempts left → repark as a retry",
			stuck(board.StateInProgress, "r1", old).with(failedWith("SIGNAL_9", true), nil).attempts(19),
			verdict{Action: ActionRepark, Row: 10, Rule: RuleRunRetry, StateReason: board.ReasonRetry}},
		{"row 10: orphaned, attempts spent (20 of 20, the board's default) → fail, naming the attempts",
			stuck(board.StateInProgress, "r1", old).with(failedWith(board.FailureProcessOrphaned, false), nil).attempts(20),
			verdict{Action: ActionFail, Row: 10, Rule: RuleAttemptsSpent, Target: board.StateFailed, StateReason: board.ReasonRunFailed}},
		{"row 10: the card's own max_attempts beats the board's: 2 of 2 spent → fail",
			stuck(board.StateInProgress, "r1", old).with(failedWith(board.FailureProcessOrphaned, false), nil).attempts(2).
				policy(&board.RetryPolicy{MaxAttempts: 2}, board.RetryPolicy{MaxAttempts: 5}),
			verdict{Action: ActionFail, Row: 10, Rule: RuleAttemptsSpent, Target: board.StateFailed, StateReason: board.ReasonRunFailed}},
		{"row 10: the board's max_attempts beats the default: 3 of 3 spent → fail",
			stuck(board.StateInProgress, "r1", old).with(failedWith(board.FailureProcessOrphaned, false), nil).attempts(3).
				policy(nil, board.RetryPolicy{MaxAttempts: 3}),
			verdict{Action: ActionFail, Row: 10, Rule: RuleAttemptsSpent, Target: board.StateFailed, StateReason: board.ReasonRunFailed}},
		{"row 10: an exit status is the command's own verdict → fail, never retried",
			stuck(board.StateInProgress, "r1", old).with(failedWith("EXIT_1", false), nil).attempts(1),
			verdict{Action: ActionFail, Row: 10, Rule: RuleRunFailed, Target: board.StateFailed, StateReason: board.ReasonRunFailed}},
		{"row 10: retryable but parked in awaiting_input → keep",
			stuck(board.StateAwaitingInput, "r1", old).with(failedWith(board.FailureProcessOrphaned, false), nil).attempts(1),
			keep(10, RuleParkedOutsidePool)},
		{"row 11: fleet, resumable, attempts left → repark (a fresh attempt)",
			stuck(board.StateInProgress, "r1", old).with(run(board.RunFailedResumable), nil).attempts(19).fleet(),
			verdict{Action: ActionRepark, Row: 11, Rule: RuleRunResumable, StateReason: board.ReasonWatchdog}},
		{"row 11: fleet, resumable, attempts spent → give up to blocked (the run ceiling), machine provenance",
			stuck(board.StateInProgress, "r1", old).with(run(board.RunFailedResumable), nil).attempts(20).fleet(),
			verdict{Action: ActionGiveUp, Row: 11, Rule: RuleAttemptsSpent, Target: board.StateBlocked, StateReason: board.ReasonWatchdog}},
		{"row 11: fleet, the card's own max_attempts is the ceiling",
			stuck(board.StateInProgress, "r1", old).with(run(board.RunFailedResumable), nil).attempts(3).fleet().
				policy(&board.RetryPolicy{MaxAttempts: 3}, board.RetryPolicy{}),
			verdict{Action: ActionGiveUp, Row: 11, Rule: RuleAttemptsSpent, Target: board.StateBlocked, StateReason: board.ReasonWatchdog}},
		{"row 11: fleet, a board without blocked → the ceiling files to failed",
			func() StuckCard {
				in := stuck(board.StateInProgress, "r1", old).with(run(board.RunFailedResumable), nil).attempts(20).fleet()
				in.Board = board.Board{States: []board.State{
					{Name: board.StateReady, Pool: true}, {Name: board.StateInProgress, Running: true},
					{Name: board.StateDone, Terminal: true, Completion: true}, {Name: board.StateFailed, Terminal: true},
				}}
				return in
			}(),
			verdict{Action: ActionGiveUp, Row: 11, Rule: RuleAttemptsSpent, Target: board.StateFailed, StateReason: board.ReasonWatchdog}},
		{"row 11: local, resumable past max_attempts → repark: a resume adds no attempt",
			func() StuckCard {
				in := stuck(board.StateInProgress, "r1", old).with(run(board.RunFailedResumable), nil).attempts(25)
				in.Board = board.DefaultBoard(true)
				return in
			}(),
			verdict{Action: ActionRepark, Row: 11, Rule: RuleRunResumable, StateReason: board.ReasonWatchdog}},
		{"row 12: an unknown status → keep",
			stuck(board.StateInProgress, "r1", old).with(run("exploded"), nil), keep(12, RuleUnknownStatus)},
		{"row 12: an empty status → keep",
			stuck(board.StateInProgress, "r1", old).with(run(""), nil), keep(12, RuleUnknownStatus)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := DecideStuckCard(tc.in)
			if got := verdictOf(d); got != tc.want {
				t.Errorf("DecideStuckCard = %+v, want %+v", got, tc.want)
			}
			if d.Reason == "" {
				t.Errorf("decision %s carries no human-readable reason", d.Rule)
			}
			// A card whose attempts are spent says so, naming them.
			if d.Rule == RuleAttemptsSpent {
				want := fmt.Sprintf("attempts spent (%d of %d)", tc.in.Card.Attempts, d.MaxAttempts)
				if !strings.Contains(d.Stamp.Reason, want) || !strings.Contains(d.Reason, want) || d.Stamp.Attempts != tc.in.Card.Attempts {
					t.Errorf("stamp %+v, reason %q: want both to name %q", d.Stamp, d.Reason, want)
				}
			}
			if d.Retry != (d.Rule == RuleRunRetry) {
				t.Errorf("decision %s: Retry = %v", d.Rule, d.Retry)
			}
			if again := DecideStuckCard(tc.in); again != d {
				t.Errorf("second call = %+v, first %+v: the table must be pure", again, d)
			}
		})
	}
}

func TestPreCheck(t *testing.T) {
	t.Parallel()
	old := 10 * lease
	young := lease / 2
	tests := []struct {
		name string
		in   StuckCard
		want verdict
	}{
		{"parked card: the blanked column means the parked row cannot keep → repark",
			stuck(board.StateBacklog, "r1", old).with(run(board.RunFailedResumable), nil),
			verdict{Action: ActionRepark, Row: 11, Rule: RuleRunResumable, StateReason: board.ReasonWatchdog}},
		{"terminal card: the blanked column means the parked row cannot keep → repark",
			stuck(board.StateCancelled, "r1", old).with(run(board.RunFailedResumable), nil),
			verdict{Action: ActionRepark, Row: 11, Rule: RuleRunResumable, StateReason: board.ReasonWatchdog}},
		{"no pointer, running column, young claim: the stamp window is re-applied → keep",
			stuck(board.StateInProgress, "", young).with(nil, nil),
			verdict{Action: ActionKeep, Row: 3, Rule: RuleStampWindowOpen}},
		{"no pointer, running column, claim past two leases → release",
			stuck(board.StateInProgress, "", 2*lease).with(nil, nil),
			verdict{Action: ActionRelease, Row: 4, Rule: RuleNoRun}},
		{"no pointer, pool column, young claim → release",
			stuck(board.StateReady, "", young).with(nil, nil),
			verdict{Action: ActionRelease, Row: 4, Rule: RuleNoRun}},
		{"pointer recorded, running column, young claim: the window is not re-applied → give_up",
			stuck(board.StateInProgress, "r1", young).with(nil, nil),
			verdict{Action: ActionGiveUp, Row: 2, Rule: RuleRunPointerGone, Target: board.StateFailed, StateReason: board.ReasonWatchdog}},
		{"read error, no pointer, young claim in the running column: row 1 still conserves",
			stuck(board.StateInProgress, "", young).with(nil, errRead),
			verdict{Action: ActionKeep, Row: 1, Rule: RuleRunReadError}},
		{"run rows are unchanged: running → keep",
			stuck(board.StateBacklog, "r1", old).with(run(board.RunRunning), nil),
			verdict{Action: ActionKeep, Row: 5, Rule: RuleRunLive}},
		{"run rows are unchanged: finished → complete",
			stuck(board.StateBacklog, "r1", old).with(run(board.RunFinished), nil),
			verdict{Action: ActionComplete, Row: 9, Rule: RuleRunFinished, Target: board.StateDone, StateReason: board.ReasonRunFinished}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := verdictOf(PreCheck(tc.in)); got != tc.want {
				t.Errorf("PreCheck = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestAfterTransfer(t *testing.T) {
	t.Parallel()
	parked := DecideStuckCard(stuck(board.StateBacklog, "r1", time.Hour).with(run(board.RunFailedResumable), nil))
	paused := DecideStuckCard(stuck(board.StateInProgress, "r1", time.Hour).with(run(board.RunPausedOperator), nil))
	live := DecideStuckCard(stuck(board.StateInProgress, "r1", time.Hour).with(run(board.RunRunning), nil))
	unread := DecideStuckCard(stuck(board.StateInProgress, "r1", time.Hour).with(nil, errors.New("store down")))
	complete := DecideStuckCard(stuck(board.StateInProgress, "r1", time.Hour).with(run(board.RunFinished), nil))
	spent := board.RecoveryMarker("host-b-99")
	tests := []struct {
		name       string
		d          Decision
		prevMarker string
		strands    bool
		want       verdict
	}{
		{"keep after transferring a worker's claim → hold under the recovery claim, once",
			parked, "host-a-4242", false, verdict{Action: ActionKeep, Row: 11, Rule: RuleRecoveryHold}},
		{"keep after transferring a recovery claim → the hold was granted before, release",
			parked, spent, false, verdict{Action: ActionRelease, Row: 11, Rule: RuleRecoveryHoldSpent}},
		{"a spent hold on a live run still conserves",
			live, spent, false, verdict{Action: ActionKeep, Row: 5, Rule: RuleRecoveryConserve}},
		{"a spent hold on a run that cannot be read still conserves",
			unread, spent, false, verdict{Action: ActionKeep, Row: 1, Rule: RuleRecoveryConserve}},
		{"a spent hold that a release would strand in the running column conserves",
			paused, spent, true, verdict{Action: ActionKeep, Row: 6, Rule: RuleRecoveryConserve}},
		{"a spent hold on a paused run where the column is a pool state: release",
			paused, spent, false, verdict{Action: ActionRelease, Row: 6, Rule: RuleRecoveryHoldSpent}},
		{"a filing after transferring a recovery claim stays a filing (a retried filing)",
			complete, spent, true, verdictOf(complete)},
		{"a filing after transferring a worker's claim stays a filing",
			complete, "host-a-4242", false, verdictOf(complete)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := AfterTransfer(tc.d, tc.prevMarker, tc.strands)
			if got := verdictOf(d); got != tc.want {
				t.Errorf("AfterTransfer = %+v, want %+v", got, tc.want)
			}
			if d.Reason == "" {
				t.Error("decision carries no reason")
			}
		})
	}
}

func TestStrands(t *testing.T) {
	t.Parallel()
	local, fleetBoard := board.DefaultBoard(true), board.DefaultBoard(false)
	tests := []struct {
		name  string
		b     board.Board
		state string
		want  bool
	}{
		{"fleet running column: nothing picks a free card up", fleetBoard, board.StateInProgress, true},
		{"local running column is a pool state", local, board.StateInProgress, false},
		{"a pool state", fleetBoard, board.StateReady, false},
		{"a parking column a person watches", fleetBoard, board.StateBacklog, false},
		{"a sink", fleetBoard, board.StateDone, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Strands(tc.b, tc.state); got != tc.want {
				t.Errorf("Strands(%s) = %v, want %v", tc.state, got, tc.want)
			}
		})
	}
}

func TestNeedsFiling(t *testing.T) {
	t.Parallel()
	b := board.DefaultBoard(false)
	tests := []struct {
		name   string
		state  string
		target string
		want   bool
	}{
		{"running column to the completion state → file", board.StateInProgress, board.StateDone, true},
		{"running column to failed → file", board.StateInProgress, board.StateFailed, true},
		{"a parked column to the first pool state → file", board.StateBacklog, board.StateReady, true},
		{"never into the running column", board.StateReady, board.StateInProgress, false},
		{"never into the state the card is already in", board.StateFailed, board.StateFailed, false},
		{"never into the state the card is already in (pool)", board.StateReady, board.StateReady, false},
		{"never out of a terminal state (terminal → terminal is an operator's refiling)", board.StateCancelled, board.StateDone, false},
		{"no target, nothing to file", board.StateInProgress, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			card := board.Card{ID: "c1", State: tc.state}
			if got := NeedsFiling(b, card, tc.target); got != tc.want {
				t.Errorf("NeedsFiling(%s → %q) = %v, want %v", tc.state, tc.target, got, tc.want)
			}
		})
	}
}

// TestProvenanceSplit pins DESIGN.md#verdict-provenance: terminal verdicts carry the
// run's descriptive reason (outside the machine set, so the chain fires);
// everything the watchdog decides on its own is machine provenance.
func TestProvenanceSplit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		in          StuckCard
		wantMachine bool
	}{
		{"complete fires the chain", stuck(board.StateInProgress, "r1", time.Hour).with(run(board.RunFinished), nil), false},
		{"fail fires the chain", stuck(board.StateInProgress, "r1", time.Hour).with(run(board.RunFailed), nil), false},
		{"give_up is machine", stuck(board.StateInProgress, "r1", time.Hour).with(nil, nil), true},
		{"repark is machine", stuck(board.StateInProgress, "r1", time.Hour).with(run(board.RunFailedResumable), nil), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := DecideStuckCard(tc.in)
			if got := board.IsMachineReason(d.StateReason); got != tc.wantMachine {
				t.Errorf("IsMachineReason(%q) for %s = %v, want %v", d.StateReason, d.Action, got, tc.wantMachine)
			}
		})
	}
}

func TestGiveUpStamp(t *testing.T) {
	t.Parallel()
	card := board.Card{ID: "c1", State: board.StateInProgress, LastRunID: "r9", Runs: []string{"r7", "r8", "r9"}}
	g := GiveUpStamp(card, card.LastRunID, t0)
	if g.RunID != "r9" || g.State != board.StateInProgress || g.Attempts != 3 || !g.At.Equal(t0) {
		t.Errorf("GiveUpStamp = %+v, want run r9, state in_progress, 3 attempts, at %v", g, t0)
	}
	if g.Reason == "" {
		t.Error("the stamp must say why")
	}
}
