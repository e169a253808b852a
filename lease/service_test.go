package lease_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/lease"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// A Start whose first answer was lost is retried with the same run id and
// answered from what the first attempt wrote. The agent counts the claim
// from the retry's attempt, so the store's lease must reach at least as
// far: the agent never vouches for a claim past the lease the store holds.
func TestRetriedStartIsNotTrustedPastTheStoredLease(t *testing.T) {
	ctx := context.Background()
	clk := boardtest.NewManualClock(time.Date(2031, 9, 2, 12, 0, 0, 0, time.UTC))
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const term = 30 * time.Second
	hb, err := heartbeat.New(heartbeat.Config{Store: s, Clock: clk, Lease: func() time.Duration { return term }})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := lease.New(lease.Config{Store: s, Claims: hb, Clock: clk, Lease: func() time.Duration { return term }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateCard(ctx, board.NewCard{ID: "c1", State: board.StateReady}); err != nil {
		t.Fatal(err)
	}
	w := lease.Worker{Marker: "hosta-4242", Owner: heartbeat.Owner{PID: 4242, KeepaliveID: "hosta-4242"}}
	// The first attempt lands in the store; its answer never reaches the
	// agent, which tracks nothing.
	if _, err := s.Start(ctx, board.StartRequest{Card: "c1", Marker: w.Marker, Lease: term, Run: board.Run{ID: "run-1"}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(25 * time.Second)
	if _, err := svc.Start(ctx, w, lease.StartRequest{Card: "c1", RunID: "run-1"}); err != nil {
		t.Fatalf("retried Start: %v", err)
	}
	card, err := s.GetCard(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	h, ok := hb.Lookup("c1")
	if !ok {
		t.Fatal("the retried Start's claim is not tracked")
	}
	if h.TrustedUntil.After(card.ClaimLeaseUntil) {
		t.Errorf("the agent trusts the claim until %s, %s past the lease the store holds (%s)",
			h.TrustedUntil.Format(time.TimeOnly), h.TrustedUntil.Sub(card.ClaimLeaseUntil), card.ClaimLeaseUntil.Format(time.TimeOnly))
	}
}
