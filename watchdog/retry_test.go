package watchdog

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// The retry policy in the reaper (DESIGN.md#retries): rows 10 and 11 route
// a run's end by board.Board.RouteRun, the same routing Finish uses.

// retryCard creates a card in the first pool state with its own retry
// policy (nil: the board's).
func (e *env) retryCard(id string, p *board.RetryPolicy) {
	e.t.Helper()
	if _, err := e.store.CreateCard(e.ctx, board.CreateCardParams{ID: id, Retry: p, Actor: "cli"}); err != nil {
		e.t.Fatalf("CreateCard %s: %v", id, err)
	}
}

// orphan launches a run on c1 that nobody finishes and moves the clock past
// its lease and the orphan grace, so the oracle promotes it to
// PROCESS_ORPHANED (failed: it has no checkpoint) by the lease proof.
func (e *env) orphan(id string) board.Run {
	e.t.Helper()
	_, run := e.launch(id, board.RunRunning, board.Run{})
	e.clock.Advance(lease + lease/3 + time.Second)
	return run
}

func TestReaperOrphanedRunIsRetriedUntilAttemptsAreSpent(t *testing.T) {
	t.Parallel()
	b := board.DefaultBoard(true)
	b.Retry = board.RetryPolicy{MaxAttempts: 2, Backoff: 10 * time.Second, BackoffMax: time.Minute}
	e := newEnv(t, withBoard(b))
	e.retryCard("c1", nil)

	// Attempt 1 is orphaned: the card returns to the pool, its attempt
	// counted, backing off by the store's clock.
	run1 := e.orphan("c1")
	seq := e.lastSeq()
	cr := e.pass("c1")
	wantOutcome(t, cr, OutcomeFiled)
	if got := e.getRun(run1.ID); got.Status != board.RunFailed || got.FailureCode != board.FailureProcessOrphaned {
		t.Fatalf("run = %s/%s, want failed/PROCESS_ORPHANED", got.Status, got.FailureCode)
	}
	if cr.Decision.Rule != RuleRunRetry || cr.Decision.Row != 10 {
		t.Errorf("decision = row %d %s, want row 10 %s", cr.Decision.Row, cr.Decision.Rule, RuleRunRetry)
	}
	c := e.wantState("c1", board.StateReady)
	e.wantFree("c1")
	if c.Attempts != 1 || c.GaveUp != nil {
		t.Errorf("c1 attempts %d, gave_up %+v; want 1 attempt counted and no stamp", c.Attempts, c.GaveUp)
	}
	if want := e.clock.Now().Add(10 * time.Second); !c.RetryAt.Equal(want) {
		t.Errorf("c1 retry_at = %s, want %s (the store's clock plus the first backoff)", c.RetryAt, want)
	}
	evs := e.stateEvents(seq, "c1")
	if len(evs) != 1 || evs[0].Reason != board.ReasonRetry || evs[0].FiresEffects() {
		t.Errorf("state events = %+v, want one retry filing that fires nothing", evs)
	}

	// Backing off: the pool passes it over and a claim by id is refused,
	// naming the time.
	if _, err := e.store.ClaimNext(e.ctx, board.ClaimNextParams{Marker: workerMarker, Lease: lease}); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("ClaimNext while c1 backs off: %v, want not found", err)
	}
	_, err := e.store.Claim(e.ctx, board.ClaimParams{Card: "c1", Marker: workerMarker, Lease: lease})
	if !errors.Is(err, board.ErrTransitionRejected) || !strings.Contains(err.Error(), "backing off") {
		t.Errorf("Claim c1 while it backs off: %v, want a refusal saying it backs off", err)
	}

	// Attempt 2, once the backoff has passed, is orphaned too: the
	// attempts are spent and the card is filed failed saying so.
	e.clock.Advance(10 * time.Second)
	run2 := e.orphan("c1")
	if run2.ID == run1.ID {
		t.Fatalf("attempt 2 resumed run %s: a failed run is not resumed", run1.ID)
	}
	seq = e.lastSeq()
	cr = e.pass("c1")
	wantOutcome(t, cr, OutcomeFiled)
	if cr.Decision.Rule != RuleAttemptsSpent || cr.Decision.Action != ActionFail {
		t.Errorf("decision = %s/%s, want fail/%s", cr.Decision.Action, cr.Decision.Rule, RuleAttemptsSpent)
	}
	c = e.wantState("c1", board.StateFailed)
	e.wantFree("c1")
	if c.Attempts != 2 || c.GaveUp == nil || !strings.Contains(c.GaveUp.Reason, "attempts spent (2 of 2)") || c.GaveUp.Attempts != 2 || c.GaveUp.RunID != run2.ID {
		t.Errorf("c1 attempts %d, gave_up %+v; want a stamp naming run %s and its attempts spent (2 of 2)", c.Attempts, c.GaveUp, run2.ID)
	}
	evs = e.stateEvents(seq, "c1")
	if len(evs) != 1 || evs[0].Reason != board.ReasonRunFailed {
		t.Errorf("state events = %+v, want one filing with the run's own verdict", evs)
	}

	// A Reopen gives the card a fresh set of attempts.
	if err := e.store.Reopen(e.ctx, board.MoveParams{Card: "c1", To: board.StateReady, Actor: "cli"}); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	if c := e.get("c1"); c.Attempts != 0 || !c.RetryAt.IsZero() {
		t.Errorf("reopened c1: attempts %d, retry_at %s; want 0 and none", c.Attempts, c.RetryAt)
	}
}

// TestReaperRetryPolicyOverrides: the card's own max_attempts beats the
// board's, as the run ceiling on the fleet (DESIGN.md#retries).
func TestReaperRetryPolicyOverrides(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		brd, card board.RetryPolicy
		priorRuns int
		want      string
	}{
		{"the board's max_attempts is the ceiling", board.RetryPolicy{MaxAttempts: 3}, board.RetryPolicy{}, 2, board.StateBlocked},
		{"below the board's max_attempts the card is reparked", board.RetryPolicy{MaxAttempts: 4}, board.RetryPolicy{}, 2, board.StateReady},
		{"the card's own max_attempts beats a higher board's", board.RetryPolicy{MaxAttempts: 10}, board.RetryPolicy{MaxAttempts: 3}, 2, board.StateBlocked},
		{"the card's own max_attempts beats a lower board's", board.RetryPolicy{MaxAttempts: 2}, board.RetryPolicy{MaxAttempts: 5}, 2, board.StateReady},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := board.DefaultBoard(false)
			b.Retry = tc.brd
			e := newEnv(t, fleet, withBoard(b))
			var own *board.RetryPolicy
			if !tc.card.IsZero() {
				own = &tc.card
			}
			e.retryCard("c1", own)
			e.priorRuns("c1", tc.priorRuns)
			e.launch("c1", board.RunFailedResumable, board.Run{Checkpoint: "step-3"})
			e.expire()

			wantOutcome(t, e.pass("c1"), OutcomeFiled)
			c := e.wantState("c1", tc.want)
			e.wantFree("c1")
			if tc.want == board.StateBlocked && (c.GaveUp == nil || !strings.Contains(c.GaveUp.Reason, "attempts spent (3 of 3)")) {
				t.Errorf("c1 gave_up = %+v, want a stamp naming its attempts spent (3 of 3)", c.GaveUp)
			}
		})
	}
}

// TestReaperRetryOfACardRunInThePoolBacksOff: a card claimed and run where
// it sat, in the first pool state (never moved into the running column),
// is not moved by the retry's filing; it still backs off
// (DESIGN.md#retries), or a crash loop would spend its attempts with no
// backoff at all.
func TestReaperRetryOfACardRunInThePoolBacksOff(t *testing.T) {
	t.Parallel()
	b := board.DefaultBoard(true)
	b.Retry = board.RetryPolicy{MaxAttempts: 3, Backoff: time.Minute}
	e := newEnv(t, withBoard(b))
	e.retryCard("c1", nil)
	tok := e.claim("c1", workerMarker)
	run, err := e.store.CreateRun(e.ctx, board.CreateRunParams{Token: tok, Run: board.Run{
		ID: "c1-run-1", Card: "c1", Status: board.RunRunning, Owner: tok.Marker, Epoch: tok.Epoch, Host: workerHost, PID: workerPID}})
	if err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	e.clock.Advance(lease + lease/3 + time.Second)

	cr := e.pass("c1")
	if cr.Decision.Rule != RuleRunRetry {
		t.Fatalf("decision = %s (%s), want %s", cr.Decision.Rule, cr.Decision.Reason, RuleRunRetry)
	}
	if got := e.getRun(run.ID); got.FailureCode != board.FailureProcessOrphaned {
		t.Fatalf("run = %s/%s, want PROCESS_ORPHANED", got.Status, got.FailureCode)
	}
	c := e.wantState("c1", board.StateReady)
	e.wantFree("c1")
	if want := e.clock.Now().Add(time.Minute); !c.RetryAt.Equal(want) {
		t.Errorf("c1 retry_at = %s, want %s: the retry's backoff was lost because its filing moved nothing", c.RetryAt, want)
	}
	if card, err := e.store.ClaimNext(e.ctx, board.ClaimNextParams{Marker: workerMarker, Lease: lease}); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("ClaimNext after a retry = %s, %v; want not found (c1 backs off)", card.ID, err)
	}
}

// TestReaperRetryOnAStoreBeforeRetriesIsNotStranded: a store that cannot
// carry a retry's move (a plugin from before the retry policy: the agent's
// guard refuses the move, nothing sent) must not strand an orphaned run's
// card under the recovery claim pass after pass (DESIGN.md#never-stranded):
// the failure is filed as it was before the policy, failed with the run's
// own verdict, where a person reaches it.
func TestReaperRetryOnAStoreBeforeRetriesIsNotStranded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.faults.beforeRetries = true
	e.retryCard("c1", nil)
	e.orphan("c1")
	for pass := 1; pass <= 3; pass++ {
		cr := e.pass("c1")
		if cr.Outcome == OutcomeFiled {
			break
		}
		if pass == 3 {
			c := e.get("c1")
			t.Fatalf("after %d passes c1 = %s: still %s (%v), held under %q: stranded", pass, fmtCardW(c), cr.Outcome, cr.Err, c.Claim)
		}
		// The recovery claim's lease ends: the next pass lists it again.
		e.clock.Advance(2 * lease)
	}
	c := e.wantState("c1", board.StateFailed)
	e.wantFree("c1")
	if c.StateReason != board.ReasonRunFailed {
		t.Errorf("c1 filed with reason %q, want %q (the run's own verdict)", c.StateReason, board.ReasonRunFailed)
	}
}

func fmtCardW(c board.Card) string {
	return c.ID + " in " + c.State + " claim " + c.Claim
}

// TestReaperOrphanedCheckpointedRunSpendsAttempts: a run with a checkpoint
// whose owner dies is promoted to failed_resumable (PROCESS_ORPHANED), and
// the local twin resumes it on the next claim rather than starting a new
// run. Its owner's death still costs an attempt, with a backoff, so a job
// that keeps killing its owner ends in the ceiling state saying so instead
// of being resumed for ever (DESIGN.md#retries).
func TestReaperOrphanedCheckpointedRunSpendsAttempts(t *testing.T) {
	t.Parallel()
	b := board.DefaultBoard(true)
	b.Retry = board.RetryPolicy{MaxAttempts: 2, Backoff: 10 * time.Second, BackoffMax: time.Minute}
	e := newEnv(t, withBoard(b))
	e.retryCard("c1", nil)
	start := func() board.StartResult {
		t.Helper()
		st, err := e.store.Start(e.ctx, board.StartParams{Card: "c1", Marker: workerMarker, Lease: lease,
			Run: board.Run{ID: fmt.Sprintf("c1-start-%d", len(e.get("c1").Runs)+1), Host: workerHost, PID: workerPID, Checkpoint: "step-3"}})
		if err != nil {
			t.Fatalf("Start c1: %v", err)
		}
		e.clock.Advance(lease + lease/3 + time.Second)
		return st
	}

	first := start()
	cr := e.pass("c1")
	wantOutcome(t, cr, OutcomeFiled)
	if got := e.getRun(first.Run.ID); got.Status != board.RunFailedResumable || got.FailureCode != board.FailureProcessOrphaned {
		t.Fatalf("run = %s/%s, want failed_resumable/PROCESS_ORPHANED", got.Status, got.FailureCode)
	}
	c := e.get("c1")
	if cr.Decision.Rule != RuleRunRetry || c.RetryAt.IsZero() || c.Attempts != 1 {
		t.Fatalf("after the first orphaning: rule %s, attempts %d, retry_at %s; want a retry with a backoff and 1 attempt",
			cr.Decision.Rule, c.Attempts, c.RetryAt)
	}

	e.clock.Advance(10 * time.Second)
	second := start()
	if !second.Resumed || second.Run.ID != first.Run.ID {
		t.Fatalf("the second Start ran %s (resumed %v), want it to resume %s", second.Run.ID, second.Resumed, first.Run.ID)
	}
	if c := e.get("c1"); c.Attempts != 2 {
		t.Errorf("attempts after resuming an orphaned run = %d, want 2", c.Attempts)
	}
	cr = e.pass("c1")
	wantOutcome(t, cr, OutcomeFiled)
	if cr.Decision.Rule != RuleAttemptsSpent {
		t.Errorf("after the second orphaning: rule %s, want %s", cr.Decision.Rule, RuleAttemptsSpent)
	}
	c = e.wantState("c1", board.StateBlocked)
	e.wantFree("c1")
	if c.GaveUp == nil || !strings.Contains(c.GaveUp.Reason, "attempts spent (2 of 2)") {
		t.Errorf("c1 gave_up %+v, want a stamp saying its attempts are spent (2 of 2)", c.GaveUp)
	}
}
