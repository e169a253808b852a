package watchdog

// Regression tests for holes an adversarial review of the watchdog found:
// a promotion from a stale listing, a release that stranded a card moved
// in between, the run ceiling applied with the gate off, and the grace
// skipped for a resumed run.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// hookStore runs a hook once, right after the first expired listing: what
// other agents did between this reaper's listing and its work on a card.
type hookStore struct {
	Store
	once      sync.Once
	afterList func()
}

func (h *hookStore) ListExpiredClaimCandidates(ctx context.Context, q board.ListExpiredClaimCandidatesParams) (board.ListExpiredClaimCandidatesResult, error) {
	p, err := h.Store.ListExpiredClaimCandidates(ctx, q)
	h.once.Do(func() {
		if h.afterList != nil {
			h.afterList()
		}
	})
	return p, err
}

func (e *env) reaperOn(s Store, marker string) *Reaper {
	e.t.Helper()
	r, err := New(Config{
		Store: s, Marker: marker, Prober: e.probe,
		Lease:       func() time.Duration { return lease },
		OrphanGrace: func() time.Duration { return lease / 3 },
		Enabled:     func() bool { return true },
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// The oracle must not promote on the listing's copy of the card: it may be
// stale. Here Agent B's reaper wins the card
// first (promotes the orphaned run to failed_resumable, reparks: locally a
// release), and worker W2 re-claims the card and resumes the recorded run
// (status running again, pointer re-stamped under W2's epoch). Agent A's
// reaper, still working from its own earlier listing (claim W@e1, lease long
// past), would "prove" the run orphaned — by W's lease, or W's dead pid —
// and promote W2's live run, had it written the promotion before its
// transfer (which then conflicts). The promotion is made only after the
// transfer has landed.
func TestNoPromotionFromAStaleListing(t *testing.T) {
	e := newEnv(t)
	e.card("c1", board.StateReady)
	_, run := e.launch("c1", board.RunRunning, board.Run{Checkpoint: "step-1"})
	e.clock.Advance(lease + lease/3 + time.Second) // past the orphan grace

	w2 := "workerhost-777"
	var tok2 board.ClaimToken
	hs := &hookStore{Store: e.store}
	hs.afterList = func() {
		// Agent B's reaper runs a whole pass first.
		b := e.reaperOn(e.store, "otheragent-55")
		res, err := b.RunOnce(e.ctx, false)
		if err != nil {
			t.Fatalf("B's pass: %v", err)
		}
		// The run's owner died with it: a retry, backed off
		// (DESIGN.md#retries).
		if cr, _ := res.Card("c1"); cr.Outcome != OutcomeFiled || cr.Decision.Rule != RuleRunRetry {
			t.Fatalf("B's pass on c1: %s (%s), want filed (%s)", cr.Outcome, cr.Decision.Rule, RuleRunRetry)
		}
		// Once the backoff is over, W2 re-claims and resumes the recorded
		// run.
		e.clock.Advance(board.DefaultBackoff)
		tok2 = e.resume("c1", w2, run.ID)
	}
	a := e.reaperOn(hs, agentMarker)
	res, err := a.RunOnce(e.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	cr, _ := res.Card("c1")
	t.Logf("A on c1: outcome %s rule %s", cr.Outcome, cr.Decision.Rule)
	e.wantClaim("c1", tok2) // W2 holds a live, fresh claim
	if got := e.getRun(run.ID); got.Status != board.RunRunning {
		t.Errorf("W2's live run (claim %s@%d, lease not expired) was promoted to %s/%s by A's reaper from its stale listing",
			tok2.Marker, tok2.Epoch, got.Status, got.FailureCode)
	}
}

// Gate off: the recovery sweep decides "strands or not" on the listing's
// state, so its release carries that state in its compare-and-set: an
// operator moving the card into the running column in between (the fleet's,
// not a pool state) must not leave it free there.
func TestRecoverySweepReleaseHoldsTheJudgedState(t *testing.T) {
	e := newEnv(t, fleet)
	e.gate.Store(false)
	e.card("c1", board.StateReady)
	e.launch("c1", board.RunFinished, board.Run{})
	// The operator parks it in backlog; worker dies; another reaper takes it
	// over and dies.
	if err := e.store.SetState(e.ctx, board.MoveParams{Card: "c1", To: board.StateBacklog, Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	e.expire()
	e.abandon("c1", time.Second)
	e.clock.Advance(2 * time.Second)
	e.faults.afterListCards = func() {
		if err := e.store.SetState(e.ctx, board.MoveParams{Card: "c1", To: board.StateInProgress, Actor: "cli"}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.r.RunOnce(e.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sweeps: %+v", res.Sweeps)
	c := e.get("c1")
	if !c.Claimed() && Strands(loadBoard(t, e.store), c.State) {
		t.Errorf("card left free in %q (a running column that is not a pool state) by the recovery sweep's release", c.State)
	}
}

// Gate off: the fleet's run ceiling files a merely resumable run's card to
// a sink on the watchdog's own judgement — a decision, which the gate
// stops. The repair sweep keeps such a card.
func TestGateOffSweepNeverAppliesTheRunCeiling(t *testing.T) {
	e := newEnv(t, fleet)
	e.gate.Store(false)
	e.card("c1", board.StateReady)
	tok := e.claim("c1", workerMarker)
	for i := range board.DefaultMaxAttempts - 1 {
		if err := e.store.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: fmt.Sprintf("old-%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.ReleaseOwned(e.ctx, board.OwnedParams{Card: "c1", Token: tok}); err != nil {
		t.Fatal(err)
	}
	e.launch("c1", board.RunFailedResumable, board.Run{})
	e.expire()
	e.abandon("c1", time.Second)
	e.clock.Advance(2 * time.Second)

	res, err := e.r.RunOnce(e.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sweeps: %+v", res.Sweeps)
	if c := e.get("c1"); c.State == board.StateBlocked {
		t.Errorf("gate off, yet the sweep filed c1 (%d runs) to %s: the run ceiling is a decision", len(c.Runs), c.State)
	}
}

// A later claim that resumes a run (Start) takes it over and re-stamps the
// pointer, so it is the judged claim's run, and the grace runs from that claim's own lease — not from a bound
// derived from the first owner's — so the promotion waits out the grace
// after the live driver's lease ends.
func TestResumedRunKeepsTheGrace(t *testing.T) {
	e := newEnv(t)
	e.card("c1", board.StateReady)
	tok1, run := e.launch("c1", board.RunFailedResumable, board.Run{Checkpoint: "step-1"})
	if err := e.store.ReleaseOwned(e.ctx, board.OwnedParams{Card: "c1", Token: tok1}); err != nil {
		t.Fatal(err)
	}
	w2 := "workerhost-777"
	tok2 := e.resume("c1", w2, run.ID)
	// W2 heartbeats for 5 leases, then its last lease ends 1 s ago.
	for range 5 {
		e.clock.Advance(lease / 3)
		if _, err := e.store.RenewClaims(e.ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "c1", Token: tok2}}, Lease: lease}); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Advance(lease + time.Second) // 1 s past W2's lease: well inside the grace
	cr := e.pass("c1")
	if got := e.getRun(run.ID); got.Status != board.RunRunning {
		t.Errorf("run promoted to %s 1s after its live driver's lease ended (grace %s); outcome %s rule %s",
			got.Status, lease/3, cr.Outcome, cr.Decision.Rule)
	}
}

// resume is a worker's Start that takes over the card's recorded run.
func (e *env) resume(id, marker, runID string) board.ClaimToken {
	e.t.Helper()
	st, err := e.store.Start(e.ctx, board.StartParams{Card: id, Marker: marker, Lease: lease, Run: board.Run{ID: runID + "-unused"}})
	if err != nil {
		e.t.Fatalf("Start %s by %s: %v", id, marker, err)
	}
	if !st.Resumed || st.Run.ID != runID {
		e.t.Fatalf("Start %s by %s = resumed %v run %q, want %s resumed", id, marker, st.Resumed, st.Run.ID, runID)
	}
	return st.Token
}
