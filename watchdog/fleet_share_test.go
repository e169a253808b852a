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
	var all []string
	for i := range 12 {
		id := fmt.Sprintf("unsteady-%02d", i)
		f.launch(f.s, id, board.StateInProgress, 3000+i, board.RunFinished)
		all = append(all, id)
	}
	f.expireAndAge(all)
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
