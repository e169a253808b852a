package agent

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// The client's deadline comes from the last watch ping, which may predate
// the last renewal (pings and renewals both run every lease/3, unrelated):
// a holder can give its claim up as much as lease/3 before the stored lease
// less a margin. A claim in that window is over, and the boot sweep must
// not adopt it.
func TestBootSweepDoesNotAdoptAClaimItsHolderMayHaveGivenUp(t *testing.T) {
	ctx := context.Background()
	host, clock, store := sweepStore(t)
	t0 := clock.Now()
	const lease = 30 * time.Second
	pid := livePID(t)
	marker := board.WorkerMarker(host, pid)
	start, _ := pidprobe.New().Identify(ctx, pid)
	loop, err := heartbeat.New(heartbeat.Config{Store: store, Clock: clock, Lease: func() time.Duration { return lease },
		Prober: pidprobe.New(), Mode: func() heartbeat.Mode { return heartbeat.ModePID }})
	if err != nil {
		t.Fatal(err)
	}
	store.CreateCard(ctx, board.CreateCardParams{ID: "c"})
	card, err := store.Claim(ctx, board.ClaimParams{Card: "c", Marker: marker, Lease: lease})
	tok := card.Token()
	if err != nil {
		t.Fatal(err)
	}
	loop.Add(board.Hold{Card: "c", Token: tok}, heartbeat.Owner{PID: pid, Start: start, KeepaliveID: marker}, t0, lease)
	clock.Advance(10 * time.Second)
	loop.RunOnce(ctx) // renewal at t0+10
	clock.Advance(time.Second)
	// watch ping at t0+11: what the client is told (trustedAt)
	h, _ := loop.Lookup("c")
	clientDeadline := clock.Now().Add(h.TrustedUntil.Sub(clock.Now()))
	clock.Advance(9 * time.Second)
	loop.RunOnce(ctx)               // renewal at t0+20; the agent dies before its next ping (t0+21)
	clock.Advance(20 * time.Second) // new agent boots at t0+40
	if !clock.Now().After(clientDeadline) {
		t.Fatalf("setup: client deadline %v not passed", clientDeadline.Sub(t0))
	}
	items, adopted, err := BootSweep(ctx, SweepConfig{Store: store, Prober: pidprobe.New(), Clock: clock, Host: host, SelfPID: os.Getpid(), Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		t.Logf("%s: %s %s", it.Card, it.Action, it.Why)
	}
	if len(adopted) > 0 {
		t.Errorf("claim adopted at t0+40 although its holder gave it up at t0+%v (client deadline from the last ping); the agent will renew it for as long as pid %d lives", clientDeadline.Sub(t0), pid)
	}
}

// The boot sweep must never let the watchdog act before a live holder has
// to stop. A holder may trust its claim until the stored lease less a
// margin (counting from the last renewal it heard of), and the oracle
// proves a live pid's run orphaned only once the stored lease is older than
// the orphan grace. A sweep that disowns a claim which may be over must
// leave the lease where it is: moved back to now, the grace would run out
// while the holder may still be working, and a reaper pass would file its
// run PROCESS_ORPHANED and hand the card on under it.
func TestBootSweepLeavesAHolderItsLease(t *testing.T) {
	ctx := context.Background()
	host, clock, store := sweepStore(t)
	const lease = 30 * time.Second
	margin := heartbeat.DefaultMargin(lease)
	grace := lease / 3
	pid := livePID(t)
	id, err := pidprobe.New().Identify(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	marker := board.WorkerMarker(host, pid)
	if _, err := store.CreateCard(ctx, board.CreateCardParams{ID: "c", State: board.StateReady}); err != nil {
		t.Fatal(err)
	}
	started, err := store.Start(ctx, board.StartParams{Card: "c", Marker: marker, Lease: lease, Run: board.Run{
		ID: "run-1", Host: host, PID: pid, PIDStartTicks: id.StartTicks, BootID: id.BootID, PIDStart: id.StartMillis}})
	if err != nil {
		t.Fatal(err)
	}
	storedLease := started.Card.ClaimLeaseUntil
	// The agent comes back when the claim has a little less than one
	// renewal interval and two margins left: its holder may have given it
	// up (counting from the renewal before the last), or may trust it
	// until storedLease - margin (counting from the last).
	sweptAt := clock.Advance(lease - lease/3 - 2*margin + margin/4)
	items, adopted, err := BootSweep(ctx, SweepConfig{Store: store, Prober: pidprobe.New(), Clock: clock, Host: host, SelfPID: os.Getpid(), Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if len(adopted) != 0 || len(items) != 1 || items[0].Action != SweepDisowned {
		t.Fatalf("sweep: items %+v, adopted %+v; want the claim disowned, not adopted", items, adopted)
	}
	c, err := store.GetCard(ctx, board.GetCardParams{ID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ClaimLeaseUntil.Before(storedLease) {
		t.Fatalf("boot sweep moved a live holder's lease back from %v to %v (now %v)", storedLease, c.ClaimLeaseUntil, clock.Now())
	}

	reaper, err := watchdog.New(watchdog.Config{
		Store: store, Marker: board.WorkerMarker(host, os.Getpid()), Prober: pidprobe.New(),
		Lease:       func() time.Duration { return lease },
		OrphanGrace: func() time.Duration { return grace },
		Enabled:     func() bool { return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	// The latest moment the holder may still be working: no pass up to
	// then may take the card or touch its run.
	for _, at := range []time.Time{sweptAt.Add(grace + margin/4), storedLease.Add(-margin)} {
		clock.Set(at)
		pass, err := reaper.RunOnce(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		c, err := store.GetCard(ctx, board.GetCardParams{ID: "c"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := store.GetRun(ctx, board.GetRunParams{ID: "run-1"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Token() != started.Token || r.Status != board.RunRunning {
			t.Fatalf("pass at lease%+v (holder trusts until lease-%v): card %s@%d, run %s %s; want the holder's claim and its running run untouched (pass %+v)",
				at.Sub(storedLease), margin, c.Claim, c.ClaimEpoch, r.Status, r.FailureCode, pass.Cards)
		}
	}
	// Past the stored lease and the grace the oracle may prove the run
	// orphaned: the reaper does act, so the passes above could have.
	clock.Set(storedLease.Add(grace + time.Second))
	if _, err := reaper.RunOnce(ctx, false); err != nil {
		t.Fatal(err)
	}
	if r, err := store.GetRun(ctx, board.GetRunParams{ID: "run-1"}); err != nil || r.FailureCode != board.FailureProcessOrphaned {
		t.Errorf("run past the lease and the grace: %+v, %v; want it promoted PROCESS_ORPHANED", r, err)
	}
}
