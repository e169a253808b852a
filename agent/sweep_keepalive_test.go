package agent

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// TestBootSweepDoesNotAdoptAClaimLostToAMissedKeepalive: a claim the
// heartbeat reported lost for a missed keepalive keeps its stored lease
// (DESIGN.md#keepalive), up to two thirds of a lease. An agent restarted
// within that time must not take the claim back as a live worker's: it
// would renew, for a silent worker, a claim it told that worker it lost,
// and hand the lost token back to the same worker's next claim of the
// card (DESIGN.md#shutdown-keeps-fences).
func TestBootSweepDoesNotAdoptAClaimLostToAMissedKeepalive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	host, clock, store := sweepStore(t)
	const lease = 30 * time.Second
	marker := board.WorkerMarker(host+"~pidns", 4242)
	if _, err := store.CreateCard(ctx, board.CreateCardParams{ID: "silent"}); err != nil {
		t.Fatal(err)
	}
	attempt := clock.Now()
	c, err := store.Claim(ctx, board.ClaimParams{Card: "silent", Marker: marker, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	var lost []heartbeat.Lost
	hb, err := heartbeat.New(heartbeat.Config{
		Store: store, Clock: clock, Lease: func() time.Duration { return lease },
		Mode:   func() heartbeat.Mode { return heartbeat.ModeKeepalive },
		OnLost: func(l heartbeat.Lost) { lost = append(lost, l) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := hb.Add(board.Hold{Card: "silent", Token: c.Token()}, heartbeat.Owner{KeepaliveID: marker}, attempt, lease); err != nil {
		t.Fatal(err)
	}
	// The worker never pings: ticks every lease/3 renew it while the
	// window (two ticks) lasts, then report it lost.
	for hb.RunOnce(ctx); len(lost) == 0; hb.RunOnce(ctx) {
		if clock.Now().Sub(attempt) > 2*lease {
			t.Fatal("the silent claim was never reported lost")
		}
		clock.Advance(lease / 3)
	}
	if lost[0].Reason != heartbeat.LostKeepaliveMissed {
		t.Fatalf("lost %+v, want keepalive_missed", lost)
	}
	lost1, err := store.GetCard(ctx, board.GetCardParams{ID: "silent"})
	if err != nil {
		t.Fatal(err)
	}
	leaseAtLoss := lost1.ClaimLeaseUntil
	// The agent dies now and is back a second later.
	clock.Advance(time.Second)
	items, adopted, err := BootSweep(ctx, SweepConfig{
		Store: store, Prober: pidprobe.New(), Clock: clock, Host: host, SelfPID: os.Getpid(), Lease: lease, Keepalive: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(adopted) != 0 {
		t.Errorf("the restarted agent adopted %+v (items %+v): a claim it reported lost is renewed for its silent worker", adopted, items)
	}
	// Disowned as lost to the missed keepalive, so the agent hands it to
	// the heartbeat's Disown and the worker's next claim of the card is a
	// fresh acquisition; the lease is left as the heartbeat left it.
	if len(items) != 1 || items[0].Action != SweepDisowned || items[0].Lost != heartbeat.LostKeepaliveMissed || items[0].Epoch != c.ClaimEpoch {
		t.Errorf("sweep items %+v, want the one claim disowned, lost to the missed keepalive", items)
	}
	if got, err := store.GetCard(ctx, board.GetCardParams{ID: "silent"}); err != nil || !got.ClaimLeaseUntil.Equal(leaseAtLoss) {
		t.Errorf("lease after the sweep %v (err %v), want it untouched at %v", got.ClaimLeaseUntil, err, leaseAtLoss)
	}
}
