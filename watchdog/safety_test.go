package watchdog

// Regression tests of the watchdog's safety rules, each written against a
// shape that once broke them: a card judged by a run an earlier claim
// recorded, abandoned recovery claims released without a decision or from
// under an owner that re-took them, kept claims starving the capped
// listing, cards left free in a column nothing picks up, and a dry run that
// showed nothing while the gate was off.

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// finishAndFile is a worker that ran the card to completion: run finished,
// card filed to done, claim released.
func (e *env) finishAndFile(id string) board.Run {
	e.t.Helper()
	tok, r := e.launch(id, board.RunFinished, board.Run{})
	if _, err := e.store.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: id, Token: tok, To: board.StateDone, Reason: board.ReasonRunFinished}); err != nil {
		e.t.Fatalf("file %s to done: %v", id, err)
	}
	if err := e.store.ReleaseOwned(e.ctx, board.OwnedParams{Card: id, Token: tok}); err != nil {
		e.t.Fatalf("release %s: %v", id, err)
	}
	return r
}

// reopenAndClaim reopens a done card into ready and has a new worker claim
// it and move it into the running column without recording a run.
func (e *env) reopenAndClaim(id, marker string) board.ClaimToken {
	e.t.Helper()
	if err := e.store.Reopen(e.ctx, board.MoveParams{Card: id, To: board.StateReady, Actor: "cli"}); err != nil {
		e.t.Fatalf("Reopen %s: %v", id, err)
	}
	tok := e.claim(id, marker)
	if _, err := e.store.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: id, Token: tok, To: board.StateInProgress}); err != nil {
		e.t.Fatalf("move %s to in_progress: %v", id, err)
	}
	return tok
}

func (e *env) wantNoFilingFrom(seq int64, id string, reasons ...board.Reason) {
	e.t.Helper()
	for _, ev := range e.stateEvents(seq, id) {
		for _, r := range reasons {
			if ev.Reason == r {
				e.t.Errorf("card %s filed %s → %s with %s: %+v", id, ev.Data.From, ev.Data.To, r, ev)
			}
		}
	}
}

// Only a run the judged claim recorded is that claim's run. A reopened
// card whose new holder died before recording one must not be filed by the
// earlier claim's finished run (its chain would fire again), nor given up
// when that earlier run was pruned: the new claim launched nothing.
func TestJudgedOnlyByTheClaimsOwnRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		opts      []envOpt
		prune     bool
		wantState string
		want      Outcome
	}{
		{"local: released, the earlier run ignored", nil, false, board.StateInProgress, OutcomeReleased},
		{"local, earlier run pruned: released, not given up", nil, true, board.StateInProgress, OutcomeReleased},
		{"fleet: back to the pool, the earlier run ignored", []envOpt{fleet}, false, board.StateReady, OutcomeFiled},
		{"fleet, earlier run pruned: back to the pool, not given up", []envOpt{fleet}, true, board.StateReady, OutcomeFiled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tc.opts...)
			e.card("c1", board.StateReady)
			r1 := e.finishAndFile("c1")
			e.reopenAndClaim("c1", "workerhost-5151")
			if tc.prune {
				e.faults.prune(r1.ID)
			}
			e.pastStampWindow()
			seq := e.lastSeq()

			cr := e.pass("c1")
			wantOutcome(t, cr, tc.want)
			if cr.Decision.Rule != RuleNoRun || cr.Run != "" {
				t.Errorf("decision %s on run %q, want %s on no run (the card still points at %s)", cr.Decision.Rule, cr.Run, RuleNoRun, r1.ID)
			}
			c := e.wantState("c1", tc.wantState)
			e.wantFree("c1")
			if c.GaveUp != nil {
				t.Errorf("gave_up = %+v on a card whose claim launched nothing", c.GaveUp)
			}
			e.wantNoFilingFrom(seq, "c1", board.ReasonRunFinished, board.ReasonRunFailed)
		})
	}

	t.Run("a recovery claim is judged by the worker claim it took over", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.card("c1", board.StateReady)
		e.finishAndFile("c1")
		if err := e.store.Reopen(e.ctx, board.MoveParams{Card: "c1", To: board.StateReady, Actor: "cli"}); err != nil {
			t.Fatal(err)
		}
		_, r2 := e.launch("c1", board.RunFinished, board.Run{ID: "second"})
		e.expire()
		// Another agent's reaper transferred the claim and died before
		// filing: its recovery claim is all that is left.
		e.abandon("c1", time.Second)
		e.clock.Advance(2 * time.Second)

		cr := e.pass("c1")
		wantOutcome(t, cr, OutcomeFiled)
		if cr.Run != r2.ID || cr.Decision.Rule != RuleRunFinished {
			t.Errorf("decision %s on run %q, want %s on %s", cr.Decision.Rule, cr.Run, RuleRunFinished, r2.ID)
		}
		e.wantState("c1", board.StateDone)
		e.wantFree("c1")
	})

	t.Run("a recovery claim over a claim that recorded no run ignores the earlier run", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.card("c1", board.StateReady)
		e.finishAndFile("c1")
		e.reopenAndClaim("c1", "workerhost-5151")
		e.pastStampWindow()
		e.abandon("c1", time.Second)
		e.clock.Advance(2 * time.Second)
		seq := e.lastSeq()

		cr := e.pass("c1")
		if cr.Run != "" || cr.Decision.Action == ActionComplete {
			t.Errorf("decision %s on run %q: the recovery claim took over a claim that recorded no run", cr.Decision.Rule, cr.Run)
		}
		e.wantNoFilingFrom(seq, "c1", board.ReasonRunFinished)
		e.wantState("c1", board.StateInProgress)
	})
}

// With the gate on, an abandoned recovery claim is decided like any
// expired claim. Behind a full batch of kept claims, it must never be
// released bare: on this twin the card would sit free in in_progress, a
// pool state, and the next claim-next would hand a delivered card out
// again.
func TestGatedPassDecidesAbandonedRecoveryClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *envOpts) { o.cfg.Batch = 2 })
	for i := range 2 {
		id := fmt.Sprintf("paused-%d", i)
		e.card(id, board.StateReady)
		e.launch(id, board.RunPausedOperator, board.Run{})
	}
	e.clock.Advance(time.Second)
	e.card("delivered", board.StateReady)
	e.launch("delivered", board.RunFinished, board.Run{})
	e.card("parked", board.StateReady)
	e.launch("parked", board.RunPausedWaitingHuman, board.Run{})
	e.expire()
	recovery := e.abandon("delivered", time.Second)
	held := e.abandon("parked", time.Second)
	e.clock.Advance(2 * time.Second)

	filed := false
	for pass := 1; pass <= 4 && !filed; pass++ {
		res, err := e.r.RunOnce(e.ctx, false)
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		if len(res.Sweeps) != 0 {
			t.Errorf("pass %d: gate on, yet sweeps ran: %+v", pass, res.Sweeps)
		}
		if c, err := e.store.ClaimNext(e.ctx, board.ClaimNextParams{Marker: "workerhost-777", Lease: lease}); !errors.Is(err, board.ErrNotFound) {
			t.Fatalf("pass %d: ClaimNext handed out %s (%v): delivered work dispatched again", pass, c.ID, err)
		}
		c := e.get("delivered")
		switch {
		case c.State == board.StateDone && !c.Claimed():
			filed = true
		case c.Token() != recovery:
			t.Fatalf("pass %d: delivered is %s under %+v, want it filed or still under the abandoned claim", pass, c.State, c.Token())
		}
	}
	if !filed {
		t.Fatal("the abandoned recovery claim over a finished run was never decided")
	}
	// A kept recovery claim stays: nothing released it without a decision.
	e.wantClaim("parked", held)
	e.wantState("parked", board.StateInProgress)
}

// Kept claims write nothing and stay expired, so a listing that always
// started from the oldest lease would offer them first for ever. The
// reaper pages on instead: a finished card behind a full batch of kept
// ones is filed within a few passes, and the kept ones stay unrouted.
func TestKeptClaimsDoNotStarveTheListing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *envOpts) { o.cfg.Batch = 3 })
	kept := map[string]board.ClaimToken{}
	for _, k := range []struct {
		id  string
		run board.Run
	}{
		{"paused", board.Run{Status: board.RunPausedOperator}},
		{"cancelled", board.Run{Status: board.RunCancelled}},
		{"retry-armed", board.Run{Status: board.RunFailed, Continuation: board.ContinuationRetryArmed}},
	} {
		e.card(k.id, board.StateReady)
		tok, _ := e.launch(k.id, k.run.Status, k.run)
		kept[k.id] = tok
	}
	e.clock.Advance(time.Second)
	e.card("finished", board.StateReady)
	e.launch("finished", board.RunFinished, board.Run{})
	e.expire()

	reported := map[string]int{}
	passes := 0
	for ; passes < 3 && e.get("finished").State != board.StateDone; passes++ {
		res, err := e.r.RunOnce(e.ctx, false)
		if err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
		for _, cr := range res.Cards {
			if _, ok := kept[cr.Card]; ok {
				reported[cr.Card]++
				if cr.Outcome != OutcomeKept || cr.Decision.Rule == "" {
					t.Errorf("%s: %s (%s), want kept with its rule", cr.Card, cr.Outcome, cr.Decision.Rule)
				}
			}
		}
	}
	e.wantState("finished", board.StateDone)
	e.wantFree("finished")
	for id, tok := range kept {
		e.wantClaim(id, tok)
		e.wantState(id, board.StateInProgress)
		if reported[id] == 0 {
			t.Errorf("%s was never reported as kept", id)
		}
	}
}

// The gate-off release of an abandoned recovery claim carries its whole
// precondition: an owner that re-took the card in between (a new epoch,
// a fresh lease) keeps it.
func TestRecoverySweepReleaseIsFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gate.Store(false)
	e.card("c1", board.StateReady)
	e.launch("c1", board.RunFinished, board.Run{})
	e.expire()
	first := e.abandon("c1", time.Second)
	e.clock.Advance(2 * time.Second)
	var retaken board.ClaimToken
	e.faults.mu.Lock()
	e.faults.afterListCards = func() {
		card, err := e.store.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: first, RecoveryMarker: otherReaper, Cutoff: e.clock.Now(), Lease: lease})
		tok := card.Token()
		if err != nil {
			t.Errorf("the owner's re-take: %v", err)
		}
		retaken = tok
	}
	e.faults.mu.Unlock()

	res, err := e.r.RunOnce(e.ctx, false)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if len(res.Sweeps) != 1 || res.Sweeps[0].Outcome != OutcomeSkippedConflict {
		t.Errorf("sweeps = %+v, want the stale release skipped as a conflict", res.Sweeps)
	}
	if retaken.Epoch <= first.Epoch {
		t.Fatalf("re-take epoch %d, want above %d", retaken.Epoch, first.Epoch)
	}
	e.wantClaim("c1", retaken)
}

// Where the running column is not a pool state (the fleet's board), a free
// card there is stranded: nothing would ever claim or file it. The
// gate-off recovery sweep therefore reconciles such a card — a settled
// disposition is carried out, anything else kept — and the gated pass
// returns a card whose claimant launched nothing to the pool.
func TestNoPathStrandsACard(t *testing.T) {
	t.Parallel()
	t.Run("gate off: an abandoned recovery claim over a finished run is filed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fleet)
		e.gate.Store(false)
		e.card("c1", board.StateReady)
		e.launch("c1", board.RunFinished, board.Run{})
		e.card("c2", board.StateReady)
		e.launch("c2", board.RunPausedOperator, board.Run{})
		e.expire()
		e.abandon("c1", time.Second)
		paused := e.abandon("c2", time.Second)
		e.clock.Advance(2 * time.Second)

		res, err := e.r.RunOnce(e.ctx, false)
		if err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
		got := map[string]SweepResult{}
		for _, sw := range res.Sweeps {
			got[sw.Card] = sw
		}
		if sw := got["c1"]; sw.Outcome != OutcomeFiled || sw.FiledTo != board.StateDone {
			t.Errorf("c1: %s to %q, want filed to done", sw.Outcome, sw.FiledTo)
		}
		e.wantState("c1", board.StateDone)
		e.wantFree("c1")
		if sw := got["c2"]; sw.Outcome != OutcomeKept {
			t.Errorf("c2: %s, want kept (a paused run is not a settled disposition)", sw.Outcome)
		}
		e.wantClaim("c2", paused)
	})
	t.Run("gate on: a claimant that launched nothing goes back to the pool", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fleet)
		e.card("c1", board.StateReady)
		tok := e.claim("c1", workerMarker)
		if _, err := e.store.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, To: board.StateInProgress}); err != nil {
			t.Fatal(err)
		}
		e.pastStampWindow()
		seq := e.lastSeq()
		cr := e.pass("c1")
		wantOutcome(t, cr, OutcomeFiled)
		e.wantState("c1", board.StateReady)
		e.wantFree("c1")
		if evs := e.stateEvents(seq, "c1"); len(evs) != 1 || evs[0].Reason != board.ReasonWatchdog || evs[0].FiresEffects() {
			t.Errorf("state events %+v, want one move back to ready under machine provenance", evs)
		}
	})
}

// A dry run previews what the gate would decide, gate on or off, and
// writes nothing: it is how an operator checks before turning it on.
func TestDryRunDecidesWithTheGateOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *envOpts) { o.cfg.Batch = 1 })
	e.gate.Store(false)
	want := map[string]Action{"finished": ActionComplete, "failed": ActionFail, "paused": ActionKeep}
	for id, status := range map[string]board.RunStatus{"finished": board.RunFinished, "failed": board.RunFailed, "paused": board.RunPausedOperator} {
		e.card(id, board.StateReady)
		e.launch(id, status, board.Run{})
	}
	e.expire()
	seq := e.lastSeq()

	res, err := e.r.RunOnce(e.ctx, true)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if res.Enabled {
		t.Fatal("the gate reads on")
	}
	// Batch 1: a dry run still walks every expired claim.
	if len(res.Cards) != len(want) {
		t.Errorf("dry run decided %d cards, want %d", len(res.Cards), len(want))
	}
	for id, action := range want {
		cr, ok := res.Card(id)
		if !ok || cr.Outcome != OutcomeDecided || cr.Decision.Action != action {
			t.Errorf("%s: %+v, want decided %s", id, cr, action)
		}
	}
	if evs := e.eventsSince(seq); len(evs) != 0 {
		t.Errorf("a dry run wrote %+v", evs)
	}
}

func TestClaimRun(t *testing.T) {
	t.Parallel()
	rec := board.RecoveryMarker("agent-9")
	tests := []struct {
		name      string
		card      board.Card
		want      string
		wantCheck bool
	}{
		{"no pointer", board.Card{Claim: "h-2", ClaimEpoch: 3}, "", false},
		{"stamped under this claim", board.Card{Claim: "h-2", ClaimEpoch: 3, LastRunID: "r", LastRunEpoch: 3}, "r", false},
		{"stamped by an earlier claim", board.Card{Claim: "h-2", ClaimEpoch: 3, LastRunID: "r", LastRunEpoch: 1}, "", false},
		{"recovery claim: judged by the claim it took over", board.Card{Claim: rec, ClaimEpoch: 4, RecoveredEpoch: 3, LastRunID: "r", LastRunEpoch: 3}, "r", false},
		{"recovery claim over a claim that stamped nothing", board.Card{Claim: rec, ClaimEpoch: 4, RecoveredEpoch: 3, LastRunID: "r", LastRunEpoch: 1}, "", false},
		{"pointer stamped before its epoch was kept: the run's epoch tells", board.Card{Claim: "h-2", ClaimEpoch: 3, LastRunID: "r"}, "r", true},
		{"recovery claim of unknown origin: the pointer, unchecked", board.Card{Claim: rec, ClaimEpoch: 4, LastRunID: "r", LastRunEpoch: 3}, "r", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, check := ClaimRun(tc.card)
			if got != tc.want || check != tc.wantCheck {
				t.Errorf("ClaimRun = %q, %v; want %q, %v", got, check, tc.want, tc.wantCheck)
			}
		})
	}
}
