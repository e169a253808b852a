package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// TestFleetAWokenPassJudgesEveryShare: DESIGN.md#owner-dead and
// DESIGN.md#reaper-shares. The heartbeat wakes its own agent's reaper when
// it has expired a dead owner's lease, so that the card is judged at once;
// on a fleet that card's share is as likely another reaper's as this one's.
// A woken pass that listed only its own share would leave the card to the
// other reaper's next periodic pass, up to an interval later. The split is
// an economy, never a safety rule: the woken pass lists every share.
func TestFleetAWokenPassJudgesEveryShare(t *testing.T) {
	t.Parallel()
	f := newMongoFleet(t)
	gate := func() bool { return true }
	other := f.reaper(f.open(), "agent1-6101", gate)
	if _, err := other.RunOnce(f.ctx, false); err != nil { // records it live
		t.Fatal(err)
	}
	passes := make(chan watchdog.PassResult, 16)
	wake := make(chan struct{}, 1)
	woken, err := watchdog.New(watchdog.Config{
		Store: f.open(), Marker: "agent0-6100", Fleet: true, Workers: 2,
		Lease: func() time.Duration { return fleetLease }, Enabled: gate,
		Interval: time.Hour, Wake: wake,
		OnPass: func(p watchdog.PassResult) { passes <- p },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	if err := woken.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer woken.Stop()
	select {
	case p := <-passes: // the startup pass, which records it live
		if p.Reapers != 2 {
			t.Fatalf("startup pass shared among %d reapers, want 2", p.Reapers)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no startup pass")
	}
	all := f.deadFinishedRuns("wake", 8, 4100)
	var theirs int
	for _, id := range all {
		if board.ShareKey(id)%2 == 1 { // "agent1-…" sorts second
			theirs++
		}
	}
	if theirs == 0 {
		t.Fatal("no card in the other reaper's share: pick other ids")
	}
	f.clock.Set(f.serverNow().Add(time.Second))
	wake <- struct{}{}
	select {
	case <-passes:
	case <-time.After(30 * time.Second):
		t.Fatal("no pass within 30s of the wake; the interval is an hour")
	}
	for _, id := range all {
		if c := f.get(id); c.State != board.StateDone || c.Claim != "" {
			t.Errorf("card %s is %s held by %q after the woken pass, want done and free (share %d of 2)",
				id, c.State, c.Claim, board.ShareKey(id)%2)
		}
	}
}
