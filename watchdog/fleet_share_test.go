package watchdog_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// TestFleetAnUnsteadyReaperHoldsNoShare: DESIGN.md#reaper-shares and
// DESIGN.md#clock-steps. A reaper that does not trust the store's clock
// yet (it has just started, or the clock stepped) keeps every card whose
// holder it cannot prove dead by pid; if it still took a share, that
// share would be examined by nobody who can decide it for as long as it
// stays unsteady — for ever, for a reaper whose clock never settles. The
// steady reaper beside it must reach every expired card.
func TestFleetAnUnsteadyReaperHoldsNoShare(t *testing.T) {
	t.Parallel()
	f := newMongoFleet(t)
	gate := func() bool { return true }
	// The unsteady reaper's monotonic clock never moves while the store's
	// does: it never sees the two advance together.
	frozen := time.Now()
	unsteady, err := watchdog.New(watchdog.Config{
		Store: f.open(), Marker: "agent0-6000", Fleet: true, Workers: 2,
		Lease: func() time.Duration { return fleetLease }, Enabled: gate,
		Steady: func() time.Time { return frozen },
	})
	if err != nil {
		t.Fatal(err)
	}
	steady := f.reaper(f.open(), "agent1-6001", gate)
	for _, r := range []*watchdog.Reaper{unsteady, steady} {
		if _, err := r.RunOnce(f.ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	all := f.deadFinishedRuns("unsteady", 12, 3000)
	for round := range 3 {
		f.clock.Set(f.serverNow().Add(time.Duration(round+1) * time.Second))
		res, err := unsteady.RunOnce(f.ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if res.ClockWait == 0 {
			t.Fatalf("round %d: the reaper whose monotonic clock is frozen trusts the store's clock", round)
		}
		if _, err := steady.RunOnce(f.ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range all {
		if c := f.get(id); c.State != board.StateDone || c.Claim != "" {
			t.Errorf("card %s is %s held by %q after three passes of the steady reaper, want done and free (key share %d of 2)",
				id, c.State, c.Claim, board.ShareKey(id)%2)
		}
	}
}

// TestFleetReapersShareAPass: DESIGN.md#reaper-shares. Three agents'
// reapers, each on its own client, all recorded as live: one pass each
// examines every expired card exactly once between them, each reaper its
// share, and every card is filed by its run's verdict. Without the split
// every reaper would list, pre-check and try to transfer every card.
func TestFleetReapersShareAPass(t *testing.T) {
	t.Parallel()
	f := newMongoFleet(t)
	gate := func() bool { return true }
	reapers := make([]*watchdog.Reaper, 3)
	for i := range reapers {
		reapers[i] = f.reaper(f.open(), fmt.Sprintf("agent%d-%d", i, 6000+i), gate)
	}
	// A pass over nothing records each reaper.
	for _, r := range reapers {
		if _, err := r.RunOnce(f.ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	all := f.deadFinishedRuns("share", 24, 2000)
	f.clock.Set(f.serverNow().Add(time.Second))

	examined := map[string][]int{}
	for i, r := range reapers {
		res, err := r.RunOnce(f.ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if res.Reapers != len(reapers) {
			t.Errorf("reaper %d's pass says %d reapers shared it, want %d", i, res.Reapers, len(reapers))
		}
		if len(res.Cards) == 0 {
			t.Errorf("reaper %d's share of %d expired cards was empty", i, len(all))
		}
		for _, cr := range res.Cards {
			examined[cr.Card] = append(examined[cr.Card], i)
			if cr.Outcome != watchdog.OutcomeFiled {
				t.Errorf("card %s: outcome %s (decision %s, err %v), want %s", cr.Card, cr.Outcome, cr.Decision.Rule, cr.Err, watchdog.OutcomeFiled)
			}
		}
	}
	for _, id := range all {
		if by := examined[id]; len(by) != 1 {
			t.Errorf("card %s was examined by reapers %v in one pass each, want exactly one", id, by)
		}
		if c := f.get(id); c.State != board.StateDone || c.Claim != "" {
			t.Errorf("card %s is %s held by %q, want done and free", id, c.State, c.Claim)
		}
	}
}

// deadFinishedRuns launches n cards prefix-00… whose workers on deadHost
// (pids from pid0) finished their runs and died before filing them, with
// the leases ended: each card's run's own verdict files it.
func (f *mongoFleet) deadFinishedRuns(prefix string, n, pid0 int) []string {
	f.t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%02d", prefix, i)
		f.launch(f.s, id, board.StateInProgress, pid0+i, board.RunFinished)
		ids = append(ids, id)
	}
	f.expireAndAge(ids)
	return ids
}
