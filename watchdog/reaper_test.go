package watchdog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

func TestReaperFinishedRunFilesTheCard(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	prev, _ := e.launch("c1", board.RunFinished, board.Run{})
	e.expire()
	seq := e.lastSeq()

	cr := e.pass("c1")
	wantOutcome(t, cr, OutcomeFiled)
	if cr.Token.Marker != e.r.RecoveryMarker() || cr.Token.Epoch != prev.Epoch+1 {
		t.Errorf("recovery token = %+v, want %s at epoch %d", cr.Token, e.r.RecoveryMarker(), prev.Epoch+1)
	}
	c := e.wantState("c1", board.StateDone)
	e.wantFree("c1")
	if c.ClaimEpoch != prev.Epoch+1 {
		t.Errorf("epoch after release = %d, want %d (the fence never goes down)", c.ClaimEpoch, prev.Epoch+1)
	}
	evs := e.stateEvents(seq, "c1")
	if len(evs) != 1 {
		t.Fatalf("state events = %+v, want exactly one filing", evs)
	}
	// The run's own verdict: the downstream chain fires as for a living owner.
	if evs[0].Reason != board.ReasonRunFinished || !evs[0].FiresEffects() {
		t.Errorf("filing reason = %q (fires %v), want run_finished firing effects", evs[0].Reason, evs[0].FiresEffects())
	}
}

func TestReaperFailedRunFilesTheCardAsFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	e.launch("c1", board.RunFailed, board.Run{})
	e.expire()
	seq := e.lastSeq()

	wantOutcome(t, e.pass("c1"), OutcomeFiled)
	e.wantState("c1", board.StateFailed)
	e.wantFree("c1")
	evs := e.stateEvents(seq, "c1")
	if len(evs) != 1 || evs[0].Reason != board.ReasonRunFailed {
		t.Errorf("state events = %+v, want one filing with reason run_failed", evs)
	}
}

func TestReaperPausedRunIsKept(t *testing.T) {
	t.Parallel()
	for _, status := range []board.RunStatus{board.RunPausedWaitingHuman, board.RunPausedOperator, board.RunCancelled, board.RunRunning} {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.probe.Spawn(workerPID, 0) // the worker host is not ours anyway
			e.card("c1", board.StateReady)
			prev, _ := e.launch("c1", status, board.Run{})
			e.expire()
			seq := e.lastSeq()

			cr := e.pass("c1")
			wantOutcome(t, cr, OutcomeKept)
			e.wantClaim("c1", prev)
			e.wantState("c1", board.StateInProgress)
			if evs := e.eventsSince(seq); len(evs) != 0 {
				t.Errorf("a kept card wrote events %+v", evs)
			}
		})
	}
}

func TestReaperResumableRunReturnsTheCard(t *testing.T) {
	t.Parallel()
	t.Run("local: release only, the re-claim resumes the run", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.card("c1", board.StateReady)
		e.launch("c1", board.RunFailedResumable, board.Run{Checkpoint: "step-3"})
		e.expire()
		seq := e.lastSeq()

		wantOutcome(t, e.pass("c1"), OutcomeReleased)
		e.wantState("c1", board.StateInProgress)
		e.wantFree("c1")
		if evs := e.stateEvents(seq, "c1"); len(evs) != 0 {
			t.Errorf("a local repark moved the card: %+v", evs)
		}
		// And the pool can reach it: in_progress is a pool state locally.
		got, err := e.store.ClaimNext(e.ctx, board.ClaimNextParams{Marker: "workerhost-5000", Lease: lease})
		if err != nil || got.ID != "c1" {
			t.Errorf("ClaimNext = %s, %v; want c1 back in the pool", got.ID, err)
		}
	})
	t.Run("fleet: back to the first pool state under machine provenance", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fleet)
		e.card("c1", board.StateReady)
		e.launch("c1", board.RunFailedResumable, board.Run{Checkpoint: "step-3"})
		e.expire()
		seq := e.lastSeq()

		cr := e.pass("c1")
		wantOutcome(t, cr, OutcomeFiled)
		e.wantState("c1", board.StateReady)
		e.wantFree("c1")
		evs := e.stateEvents(seq, "c1")
		if len(evs) != 1 || evs[0].Reason != board.ReasonWatchdog || evs[0].FiresEffects() {
			t.Errorf("state events = %+v, want one repark stamped watchdog that fires nothing", evs)
		}
	})
}

func TestReaperNoRunReleasesOnly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		state string
		opts  []envOpt
	}{
		{"claimed in a pool column", board.StateReady, []envOpt{fleet}},
		// Where the running column is not a pool state, a bare release
		// would strand the card: TestNoPathStrandsACard.
		{"claimed in the running column (a pool state locally), past the stamp window", board.StateInProgress, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tc.opts...)
			e.card("c1", tc.state)
			e.claim("c1", workerMarker)
			e.clock.Advance(StampWindow*lease + time.Second)
			seq := e.lastSeq()

			cr := e.pass("c1")
			wantOutcome(t, cr, OutcomeReleased)
			if cr.Decision.Rule != RuleNoRun {
				t.Errorf("decision = %s, want %s", cr.Decision.Rule, RuleNoRun)
			}
			// A release-only card is never filed (not as failed, not at all).
			e.wantState("c1", tc.state)
			e.wantFree("c1")
			if evs := e.stateEvents(seq, "c1"); len(evs) != 0 {
				t.Errorf("a release-only card was filed: %+v", evs)
			}
		})
	}
}

func TestReaperNoRunConservationIsBoundedByTheStampWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateInProgress)
	prev := e.claim("c1", workerMarker)

	e.expire() // expired, but younger than two leases: the stamp may land
	cr := e.pass("c1")
	wantOutcome(t, cr, OutcomeKept)
	if cr.Decision.Rule != RuleStampWindowOpen {
		t.Errorf("decision = %s, want %s", cr.Decision.Rule, RuleStampWindowOpen)
	}
	e.wantClaim("c1", prev)

	e.clock.Set(t0.Add(StampWindow * lease)) // exactly two leases: the window is closed
	cr = e.pass("c1")
	wantOutcome(t, cr, OutcomeReleased)
	e.wantFree("c1")
	e.wantState("c1", board.StateInProgress)
}

func TestReaperHonoursAnOperatorMoveBetweenListingAndTransfer(t *testing.T) {
	t.Parallel()
	t.Run("resumable card parked by the operator is held once, then released where they put it", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fleet)
		e.card("c1", board.StateReady)
		e.launch("c1", board.RunFailedResumable, board.Run{Checkpoint: "step-3"})
		e.expire()
		e.r.beforeTransfer = func(c board.Card) {
			if err := e.store.SetState(e.ctx, board.MoveParams{Card: c.ID, To: board.StateBacklog, Actor: "uid:0"}); err != nil {
				t.Errorf("operator move: %v", err)
			}
		}

		cr := e.pass("c1")
		// The listing's copy said repark; the card the transfer observed is
		// parked, and that decision is the one that counts.
		if cr.PreCheck.Action != ActionRepark {
			t.Errorf("pre-check = %s, want repark", cr.PreCheck.Action)
		}
		if cr.Decision.Action != ActionKeep || cr.Decision.Rule != RuleRecoveryHold {
			t.Errorf("decision = %s/%s, want keep/%s", cr.Decision.Action, cr.Decision.Rule, RuleRecoveryHold)
		}
		wantOutcome(t, cr, OutcomeTransferred)
		e.wantState("c1", board.StateBacklog)
		e.wantClaim("c1", cr.Token)

		e.r.beforeTransfer = nil
		e.expire()
		cr = e.pass("c1")
		wantOutcome(t, cr, OutcomeReleased)
		if cr.Decision.Rule != RuleRecoveryHoldSpent {
			t.Errorf("decision = %s, want %s", cr.Decision.Rule, RuleRecoveryHoldSpent)
		}
		e.wantState("c1", board.StateBacklog)
		e.wantFree("c1")
	})
	t.Run("finished run on a card the operator cancelled is not refiled out of the sink", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.card("c1", board.StateReady)
		e.launch("c1", board.RunFinished, board.Run{})
		e.expire()
		e.r.beforeTransfer = func(c board.Card) {
			if err := e.store.SetState(e.ctx, board.MoveParams{Card: c.ID, To: board.StateCancelled, Actor: "uid:0"}); err != nil {
				t.Errorf("operator move: %v", err)
			}
		}
		seq := e.lastSeq()

		cr := e.pass("c1")
		wantOutcome(t, cr, OutcomeReleased)
		e.wantState("c1", board.StateCancelled)
		e.wantFree("c1")
		for _, ev := range e.stateEvents(seq, "c1") {
			if ev.Actor != "uid:0" {
				t.Errorf("the watchdog wrote a state event %+v over the operator's move", ev)
			}
		}
	})
	t.Run("an operator force-release between listing and transfer is a clean skip", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.card("c1", board.StateReady)
		e.launch("c1", board.RunFinished, board.Run{})
		e.expire()
		e.r.beforeTransfer = func(c board.Card) {
			if err := e.store.Release(e.ctx, board.ReleaseParams{Card: c.ID, Marker: c.Claim, Actor: "uid:0"}); err != nil {
				t.Errorf("operator release: %v", err)
			}
		}

		wantOutcome(t, e.pass("c1"), OutcomeSkippedConflict)
		e.wantState("c1", board.StateInProgress)
		e.wantFree("c1")
	})
}

func TestReaperParkedCardIsNotHeldForever(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	e.launch("c1", board.RunFailedResumable, board.Run{Checkpoint: "step-3"})
	// Parked before the owner died: an operator moved it out of the pool.
	if err := e.store.SetState(e.ctx, board.MoveParams{Card: "c1", To: board.StateAwaitingInput, Actor: "uid:0"}); err != nil {
		t.Fatalf("SetState: %v", err)
	}
	e.expire()

	cr := e.pass("c1")
	wantOutcome(t, cr, OutcomeTransferred)
	hold := cr.Token

	// Before the hold's lease ends the card is not even listed.
	res, err := e.r.RunOnce(e.ctx, false)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if _, listed := res.Card("c1"); listed {
		t.Error("a card under a live recovery hold was listed")
	}
	e.wantClaim("c1", hold)

	e.expire()
	cr = e.pass("c1")
	wantOutcome(t, cr, OutcomeReleased)
	if cr.Prev != hold {
		t.Errorf("second pass transferred %+v, want the hold %+v", cr.Prev, hold)
	}
	e.wantFree("c1")
	e.wantState("c1", board.StateAwaitingInput)
}

func TestReaperRenewedClaimIsSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	prev, _ := e.launch("c1", board.RunFinished, board.Run{})
	e.expire()
	e.r.beforeTransfer = func(c board.Card) {
		res, err := e.store.RenewClaims(e.ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: c.ID, Token: c.Token()}}, Lease: lease})
		if err != nil || res[0].Err != nil {
			t.Errorf("RenewClaims: %v %+v", err, res)
		}
	}

	wantOutcome(t, e.pass("c1"), OutcomeSkippedConflict)
	e.wantClaim("c1", prev)
	e.wantState("c1", board.StateInProgress)
}

func TestReaperNeverStealsAFreshClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	prev, _ := e.launch("c1", board.RunFinished, board.Run{})
	e.clock.Advance(lease - time.Millisecond)
	seq := e.lastSeq()

	res, err := e.r.RunOnce(e.ctx, false)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if len(res.Cards) != 0 {
		t.Errorf("pass decided %+v on a live lease", res.Cards)
	}
	e.wantClaim("c1", prev)
	if evs := e.eventsSince(seq); len(evs) != 0 {
		t.Errorf("events %+v on a live lease", evs)
	}
}

func TestReaperPrunedRunIsAGiveUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	tok := e.claim("c1", workerMarker)
	if _, err := e.store.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, To: board.StateInProgress}); err != nil {
		t.Fatalf("SetStateOwned: %v", err)
	}
	// The pointer names a run the store does not have: pruned.
	if err := e.store.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "run-pruned"}); err != nil {
		t.Fatalf("SetLastRunOwned: %v", err)
	}
	e.expire() // well inside the stamp window: the pointer is the stamp
	seq := e.lastSeq()

	cr := e.pass("c1")
	wantOutcome(t, cr, OutcomeFiled)
	c := e.wantState("c1", board.StateFailed)
	e.wantFree("c1")
	if c.GaveUp == nil || c.GaveUp.RunID != "run-pruned" || c.GaveUp.State != board.StateInProgress || c.GaveUp.Reason == "" {
		t.Errorf("gave_up = %+v, want a stamp naming run-pruned, the in_progress column and why", c.GaveUp)
	}
	evs := e.stateEvents(seq, "c1")
	if len(evs) != 1 || evs[0].Reason != board.ReasonWatchdog || evs[0].FiresEffects() {
		t.Errorf("state events = %+v, want one machine filing that fires nothing", evs)
	}
}

func TestReaperRunCeiling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		priorRuns int // runs before the last one
		want      string
	}{
		{"a healthy card is reparked", 2, board.StateReady},
		{"one run short of the ceiling is reparked", board.DefaultMaxAttempts - 2, board.StateReady},
		{"twenty lifetime runs files the card to blocked", board.DefaultMaxAttempts - 1, board.StateBlocked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fleet)
			e.card("c1", board.StateReady)
			e.priorRuns("c1", tc.priorRuns)
			e.launch("c1", board.RunFailedResumable, board.Run{Checkpoint: "step-3"})
			if got := len(e.get("c1").Runs); got != tc.priorRuns+1 {
				t.Fatalf("card has %d runs, want %d", got, tc.priorRuns+1)
			}
			e.expire()
			seq := e.lastSeq()

			wantOutcome(t, e.pass("c1"), OutcomeFiled)
			e.wantState("c1", tc.want)
			e.wantFree("c1")
			evs := e.stateEvents(seq, "c1")
			if len(evs) != 1 || evs[0].Reason != board.ReasonWatchdog {
				t.Errorf("state events = %+v, want one filing under machine provenance", evs)
			}
		})
	}
	t.Run("the ceiling is fleet-only: locally a repark is a release", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.card("c1", board.StateReady)
		e.priorRuns("c1", board.DefaultMaxAttempts)
		e.launch("c1", board.RunFailedResumable, board.Run{Checkpoint: "step-3"})
		e.expire()
		wantOutcome(t, e.pass("c1"), OutcomeReleased)
		e.wantState("c1", board.StateInProgress)
	})
}

func TestReaperFailedFilingKeepsTheRecoveryClaimAndRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	e.launch("c1", board.RunFinished, board.Run{})
	e.expire()
	e.faults.mu.Lock()
	e.faults.failSetState = 1
	e.faults.mu.Unlock()

	cr := e.pass("c1")
	wantOutcome(t, cr, OutcomeError)
	if !errors.Is(cr.Err, errInjected) {
		t.Errorf("err = %v, want the injected fault", cr.Err)
	}
	e.wantClaim("c1", cr.Token)
	e.wantState("c1", board.StateInProgress)

	// The recovery sweep must not drop a claim whose lease is still running.
	res, err := e.r.RunOnce(e.ctx, false)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if len(res.Sweeps) != 0 {
		t.Errorf("sweeps %+v touched a live recovery claim", res.Sweeps)
	}

	e.expire()
	cr = e.pass("c1")
	wantOutcome(t, cr, OutcomeFiled)
	e.wantState("c1", board.StateDone)
	e.wantFree("c1")
}

func TestReaperLivenessOracleInThePass(t *testing.T) {
	t.Parallel()
	t.Run("same host, owner pid dead: promoted and returned to the pool", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.card("c1", board.StateReady)
		_, run := e.launch("c1", board.RunRunning, board.Run{Host: agentHost, PID: 777, PIDStart: 1_000, Checkpoint: "step-1"})
		e.expire() // the lease proof is not yet there: only the pid proof

		cr := e.pass("c1")
		// Its owner died with it: a retry, backed off, that the next
		// claim resumes (DESIGN.md#retries).
		wantOutcome(t, cr, OutcomeFiled)
		if cr.Decision.Rule != RuleRunRetry {
			t.Errorf("rule = %s, want %s", cr.Decision.Rule, RuleRunRetry)
		}
		got := e.getRun(run.ID)
		if got.Status != board.RunFailedResumable || got.FailureCode != board.FailureProcessOrphaned {
			t.Errorf("run = %s/%s, want failed_resumable/PROCESS_ORPHANED", got.Status, got.FailureCode)
		}
		e.wantFree("c1")
	})
	t.Run("same host, owner pid alive: kept", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.probe.Spawn(777, 1_000)
		e.card("c1", board.StateReady)
		prev, run := e.launch("c1", board.RunRunning, board.Run{Host: agentHost, PID: 777, PIDStart: 1_000})
		e.expire()

		wantOutcome(t, e.pass("c1"), OutcomeKept)
		if got := e.getRun(run.ID); got.Status != board.RunRunning {
			t.Errorf("run status = %s, want running", got.Status)
		}
		e.wantClaim("c1", prev)
	})
	t.Run("other host, lease past the grace: promoted to failed and retried", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.card("c1", board.StateReady)
		_, run := e.launch("c1", board.RunRunning, board.Run{})
		e.clock.Advance(lease + lease/3 + time.Second)

		cr := e.pass("c1")
		wantOutcome(t, cr, OutcomeFiled)
		if got := e.getRun(run.ID); got.Status != board.RunFailed || got.FailureCode != board.FailureProcessOrphaned {
			t.Errorf("run = %s/%s, want failed/PROCESS_ORPHANED", got.Status, got.FailureCode)
		}
		// PROCESS_ORPHANED is retryable (DESIGN.md#retries): a fresh
		// attempt, not a failed card.
		e.wantState("c1", board.StateReady)
		if cr.Decision.Rule != RuleRunRetry {
			t.Errorf("rule = %s, want %s", cr.Decision.Rule, RuleRunRetry)
		}
	})
	t.Run("other host, lease expired within the grace: kept", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.card("c1", board.StateReady)
		prev, run := e.launch("c1", board.RunRunning, board.Run{})
		e.clock.Advance(lease + lease/3) // exactly the grace: not longer ago than it

		wantOutcome(t, e.pass("c1"), OutcomeKept)
		if got := e.getRun(run.ID); got.Status != board.RunRunning {
			t.Errorf("run status = %s, want running", got.Status)
		}
		e.wantClaim("c1", prev)
	})
}

func TestReaperGateOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gate.Store(false)
	// A card the gated reap would file...
	e.card("c1", board.StateReady)
	prev, _ := e.launch("c1", board.RunFinished, board.Run{})
	// ...and an abandoned recovery claim another agent's reaper left behind.
	e.card("c2", board.StateReady)
	e.launch("c2", board.RunFinished, board.Run{})
	e.expire()
	c2 := e.get("c2")
	card, err := e.store.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c2", Prev: c2.Token(), RecoveryMarker: otherReaper, Cutoff: e.clock.Now(), Lease: lease})
	held := card.Token()
	if err != nil {
		t.Fatalf("ReclaimExpired: %v", err)
	}
	e.expire()

	res, err := e.r.RunOnce(e.ctx, false)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if res.Enabled || len(res.Cards) != 0 {
		t.Errorf("gate off: enabled=%v, decided %+v; want nothing decided", res.Enabled, res.Cards)
	}
	e.wantClaim("c1", prev)
	e.wantState("c1", board.StateInProgress)

	if len(res.Sweeps) != 1 || res.Sweeps[0].Card != "c2" || res.Sweeps[0].Sweep != SweepRecovery || res.Sweeps[0].Outcome != OutcomeReleased {
		t.Fatalf("sweeps = %+v, want c2's recovery claim released", res.Sweeps)
	}
	c := e.wantFree("c2")
	if c.State != board.StateInProgress || c.ClaimEpoch != held.Epoch {
		t.Errorf("c2 = %s at epoch %d, want in_progress at %d: a sweep releases and does nothing else", c.State, c.ClaimEpoch, held.Epoch)
	}
}

func TestReaperDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fleet)
	e.card("c1", board.StateReady)
	e.launch("c1", board.RunFinished, board.Run{})
	e.card("c2", board.StateReady)
	_, orphan := e.launch("c2", board.RunRunning, board.Run{Host: agentHost, PID: 777})
	e.card("c3", board.StateReady)
	e.launch("c3", board.RunPausedOperator, board.Run{})
	e.expire()
	seq := e.lastSeq()

	res, err := e.r.RunOnce(e.ctx, true)
	if err != nil {
		t.Fatalf("RunOnce(dry): %v", err)
	}
	// c2's orphaned run is retryable: a repark (DESIGN.md#retries).
	want := map[string]Action{"c1": ActionComplete, "c2": ActionRepark, "c3": ActionKeep}
	for id, action := range want {
		cr, ok := res.Card(id)
		if !ok {
			t.Errorf("dry run did not decide %s", id)
			continue
		}
		if cr.Outcome != OutcomeDecided || cr.Decision.Action != action {
			t.Errorf("%s: %s/%s, want decided/%s", id, cr.Outcome, cr.Decision.Action, action)
		}
	}
	if evs := e.eventsSince(seq); len(evs) != 0 {
		t.Errorf("a dry run wrote %+v", evs)
	}
	if got := e.getRun(orphan.ID); got.Status != board.RunRunning {
		t.Errorf("a dry run promoted the orphan to %s", got.Status)
	}
}

func TestReaperUnleasedSweep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status board.RunStatus // "" for a pruned pointer
		gate   bool
		want   Outcome
	}{
		// The settled dispositions (finished, failed, resumable) are filed
		// by the sweep after a transfer, which needs a store that can hold
		// an un-leased claim: TestFleetUnleasedSweep, on the MongoDB twin.
		{"paused run: the brake is load-bearing, kept", board.RunPausedWaitingHuman, false, OutcomeKept},
		{"cancelled run: kept", board.RunCancelled, false, OutcomeKept},
		{"running run: kept, and not promoted", board.RunRunning, false, OutcomeKept},
		{"pruned pointer: a give-up is a decision, kept", "", false, OutcomeKept},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fleet)
			e.gate.Store(tc.gate)
			e.card("c1", board.StateReady)
			var prev board.ClaimToken
			if tc.status == "" {
				prev = e.claim("c1", workerMarker)
				if _, err := e.store.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: prev, To: board.StateInProgress}); err != nil {
					t.Fatal(err)
				}
				if err := e.store.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: prev, RunID: "run-pruned"}); err != nil {
					t.Fatal(err)
				}
			} else {
				prev, _ = e.launch("c1", tc.status, board.Run{Host: agentHost, PID: 777})
			}
			e.faults.mu.Lock()
			e.faults.unleased = []string{"c1"}
			e.faults.mu.Unlock()
			seq := e.lastSeq()

			res, err := e.r.RunOnce(e.ctx, false)
			if err != nil {
				t.Fatalf("RunOnce: %v", err)
			}
			if len(res.Sweeps) != 1 || res.Sweeps[0].Sweep != SweepUnleased {
				t.Fatalf("sweeps = %+v, want one un-leased record", res.Sweeps)
			}
			if got := res.Sweeps[0].Outcome; got != tc.want {
				t.Errorf("outcome = %s, want %s (decision %+v)", got, tc.want, res.Sweeps[0].Decision)
			}
			if tc.want == OutcomeReleased {
				e.wantFree("c1")
			} else {
				e.wantClaim("c1", prev)
			}
			// Release-only: never a filing, never a run write.
			e.wantState("c1", board.StateInProgress)
			for _, ev := range e.eventsSince(seq) {
				if ev.Type != board.EventReleased {
					t.Errorf("the un-leased sweep wrote %s: %+v", ev.Type, ev)
				}
			}
		})
	}
	t.Run("local twin: no un-leased sweep", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.card("c1", board.StateReady)
		e.launch("c1", board.RunFinished, board.Run{})
		e.faults.mu.Lock()
		e.faults.unleased = []string{"c1"}
		e.faults.mu.Unlock()
		res, err := e.r.RunOnce(e.ctx, false)
		if err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
		if len(res.Sweeps) != 0 {
			t.Errorf("sweeps = %+v on the local twin", res.Sweeps)
		}
	})
}

func TestReaperStartStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	passes := make(chan PassResult, 16)
	e.r.cfg.OnPass = func(p PassResult) { passes <- p }
	e.card("c1", board.StateReady)
	e.launch("c1", board.RunFinished, board.Run{})
	e.expire()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := e.r.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := e.r.Start(ctx); !errors.Is(err, ErrAlreadyStarted) {
		t.Errorf("second Start = %v, want ErrAlreadyStarted", err)
	}
	// Start runs the startup pass at once: no waiting for the interval.
	select {
	case p := <-passes:
		if cr, ok := p.Card("c1"); !ok || cr.Outcome != OutcomeFiled {
			t.Errorf("startup pass = %+v, want c1 filed", p.Cards)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no startup pass within 10s")
	}
	e.r.Stop()
	e.r.Stop() // idempotent
	if err := e.r.Start(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	e.r.Stop()
}

// TestReaperWakeRunsAPassBeforeTheInterval: a signal on Config.Wake runs
// a pass at once, not at the next interval (an hour here), so a card whose
// dead owner's lease the heartbeat just expired is judged now
// (DESIGN.md#owner-dead).
func TestReaperWakeRunsAPassBeforeTheInterval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	passes := make(chan PassResult, 16)
	wake := make(chan struct{}, 1)
	e.r.cfg.OnPass = func(p PassResult) { passes <- p }
	e.r.cfg.Interval = time.Hour
	e.r.cfg.Wake = wake
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := e.r.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer e.r.Stop()
	select {
	case <-passes: // the startup pass, on a board with nothing expired
	case <-time.After(10 * time.Second):
		t.Fatal("no startup pass within 10s")
	}
	e.card("c1", board.StateReady)
	e.launch("c1", board.RunFinished, board.Run{})
	e.expire()
	wake <- struct{}{}
	select {
	case p := <-passes:
		if cr, ok := p.Card("c1"); !ok || cr.Outcome != OutcomeFiled {
			t.Errorf("woken pass = %+v, want c1 filed", p.Cards)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no pass within 10s of the wake; the interval is an hour")
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no store", Config{Marker: agentMarker}},
		{"bad marker", Config{Store: e.store, Marker: "nohyphen"}},
		{"a recovery marker as the agent's own", Config{Store: e.store, Marker: board.RecoveryMarker(agentMarker)}},
		{"un-leased horizon below one lease", Config{Store: e.store, Marker: agentMarker, UnleasedHorizon: time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := New(tc.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("New = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestParseGate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in       string
		want     bool
		wantWarn bool
	}{
		{"1", true, false}, {"true", true, false}, {"ON", true, false}, {" yes ", true, false}, {"t", true, false}, {"Y", true, false},
		{"0", false, false}, {"false", false, false}, {"off", false, false}, {"No", false, false}, {"", false, false}, {"F", false, false}, {"n", false, false},
		{"enable", false, true}, {"2", false, true}, {"tru", false, true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.in), func(t *testing.T) {
			t.Parallel()
			got, warn := ParseGate(tc.in)
			if got != tc.want || (warn != "") != tc.wantWarn {
				t.Errorf("ParseGate(%q) = %v, %q; want %v, warning %v", tc.in, got, warn, tc.want, tc.wantWarn)
			}
		})
	}
}

// TestReaperLaunchColumnTargetNeverFires pins DESIGN.md#verdict-provenance on a board
// whose failed column is a launch column: a run's failure filed there would
// otherwise carry run_failed, which fires effects, and re-arm a spend on a
// card nobody moved. The reaper blanks the reason and the store stamps the
// recovery marker's write as watchdog.
func TestReaperLaunchColumnTargetNeverFires(t *testing.T) {
	t.Parallel()
	b := board.Board{States: []board.State{
		{Name: board.StateReady, Pool: true, Launch: true},
		{Name: board.StateInProgress, Running: true},
		{Name: board.StateDone, Terminal: true, Completion: true},
		{Name: board.StateFailed, Launch: true}, // a retry lane: entering it launches
	}}
	e := newEnv(t, withBoard(b))
	e.card("c1", board.StateReady)
	e.launch("c1", board.RunFailed, board.Run{})
	e.expire()
	seq := e.lastSeq()

	wantOutcome(t, e.pass("c1"), OutcomeFiled)
	e.wantState("c1", board.StateFailed)
	evs := e.stateEvents(seq, "c1")
	if len(evs) != 1 || evs[0].Reason != board.ReasonWatchdog || evs[0].FiresEffects() {
		t.Errorf("state events = %+v, want one filing stamped watchdog that fires nothing", evs)
	}
}

// TestReaperStartStopRace starts and stops the loop while operator passes
// run beside it: passes never overlap (the race detector watches the shared
// state) and Stop always returns.
func TestReaperStartStopRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	e.launch("c1", board.RunPausedOperator, board.Run{})
	e.expire()
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			if _, err := e.r.RunOnce(ctx, false); err != nil {
				t.Errorf("RunOnce: %v", err)
				return
			}
		}
	}()
	for range 20 {
		if err := e.r.Start(ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
		e.r.Stop()
	}
	<-done
}

func TestPassResultMarshals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	e.launch("c1", board.RunFinished, board.Run{})
	e.expire()
	res, err := e.r.RunOnce(e.ctx, true)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	out, err := json.Marshal(res)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	var back struct {
		Cards []struct {
			Card     string `json:"card"`
			Outcome  string `json:"outcome"`
			Decision struct {
				Action string `json:"action"`
				Rule   string `json:"rule"`
				Target string `json:"target"`
			} `json:"decision"`
		} `json:"cards"`
	}
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if len(back.Cards) != 1 || back.Cards[0].Decision.Action != "complete" || back.Cards[0].Decision.Target != board.StateDone || back.Cards[0].Outcome != "decided" {
		t.Errorf("marshalled pass = %s", out)
	}
}

// TestPassReadsTheBoardItDecidesBy: a pass decides by the board
// Config.Board returns, read once per pass under the pass's context; a
// board without a failed column fails the pass before anything is
// decided, and a board that cannot be read fails it too.
func TestPassReadsTheBoardItDecidesBy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	noFailed := board.Board{}
	for _, s := range board.DefaultBoard(true).States {
		if s.Name != board.StateFailed {
			noFailed.States = append(noFailed.States, s)
		}
	}
	readErr := errors.New("store down")
	var reads int
	for _, tc := range []struct {
		name string
		read func(context.Context) (board.Board, error)
		want error
	}{
		{"no failed column", func(context.Context) (board.Board, error) { reads++; return noFailed, nil }, ErrInvalidConfig},
		{"unreadable", func(context.Context) (board.Board, error) { reads++; return board.Board{}, readErr }, readErr},
	} {
		r, err := New(Config{Store: e.store, Marker: agentMarker, Board: tc.read})
		if err != nil {
			t.Fatalf("%s: New: %v", tc.name, err)
		}
		before := reads
		if _, err := r.RunOnce(e.ctx, true); !errors.Is(err, tc.want) {
			t.Errorf("%s: RunOnce = %v, want %v", tc.name, err, tc.want)
		}
		if reads != before+1 {
			t.Errorf("%s: the pass read the board %d times, want once", tc.name, reads-before)
		}
	}
}

// A run retention pruned can still be pointed at: a card finished, its run
// pruned (DESIGN.md#retention), the card reopened, and a worker that
// claims it re-stamps the run it remembers, as one resuming it would. The
// claim then records a run the store no longer has: row 2, a give-up a
// person decides, never a release that would launch the card as new
// (DESIGN.md#row-2).
func TestReaperGivesUpOnARunRetentionPruned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	st, err := e.store.Start(e.ctx, board.StartParams{Card: "c1", Marker: workerMarker, Lease: lease,
		Run: board.Run{ID: "run-old", Host: workerHost, PID: workerPID}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if _, err := e.store.Finish(e.ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "run-old", Status: board.RunFinished}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	e.clock.Advance(31 * 24 * time.Hour)
	res, err := e.store.Prune(e.ctx, board.PruneParams{Before: e.clock.Now().Add(-720 * time.Hour)})
	if err != nil || res.Runs != 1 {
		t.Fatalf("Prune = %+v, %v; want run-old pruned", res, err)
	}
	if err := e.store.Reopen(e.ctx, board.MoveParams{Card: "c1", To: board.StateReady, Actor: "uid:0"}); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	tok := e.claim("c1", workerMarker)
	if _, err := e.store.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, To: board.StateInProgress}); err != nil {
		t.Fatalf("SetStateOwned: %v", err)
	}
	if err := e.store.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "run-old"}); err != nil {
		t.Fatalf("SetLastRunOwned of the pruned run: %v", err)
	}
	e.expire()

	wantOutcome(t, e.pass("c1"), OutcomeFiled)
	c := e.wantState("c1", board.StateFailed)
	e.wantFree("c1")
	if c.GaveUp == nil || c.GaveUp.RunID != "run-old" {
		t.Errorf("gave_up = %+v, want a give-up naming the pruned run-old", c.GaveUp)
	}
}
