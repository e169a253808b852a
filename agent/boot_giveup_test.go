package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// The client's deadline comes from the last watch ping, which may predate
// the last renewal (pings and renewals both run every lease/3, unrelated):
// a holder can give its claim up as much as lease/3 before the stored lease
// less a margin. A claim in that window is over, and the boot sweep must
// not adopt it.
func TestBootSweepDoesNotAdoptAClaimItsHolderMayHaveGivenUp(t *testing.T) {
	ctx := context.Background()
	host, _ := pidprobe.Hostname()
	t0 := time.Now()
	clock := boardtest.NewManualClock(t0)
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const lease = 30 * time.Second
	pid := livePID(t)
	marker := board.WorkerMarker(host, pid)
	start, _ := pidprobe.New().Identify(ctx, pid)
	loop, err := heartbeat.New(heartbeat.Config{Store: store, Clock: clock, Lease: func() time.Duration { return lease },
		Prober: pidprobe.New(), Mode: func() heartbeat.Mode { return heartbeat.ModePID }})
	if err != nil {
		t.Fatal(err)
	}
	store.CreateCard(ctx, board.NewCard{ID: "c"})
	_, tok, err := store.Claim(ctx, board.ClaimRequest{Card: "c", Marker: marker, Lease: lease})
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
