package boltstore

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestABatchDuringACheckpointSeesTheFrozenLayer: the committer's batch view
// pairs a bbolt read transaction with the memtable layers. A checkpoint
// that commits and unpublishes its frozen layer between the two must not
// leave the batch with a file from before the checkpoint and layers from
// after it: the batch would miss every change the checkpoint held — here a
// claim, which a second worker would then be granted as well (two holders,
// one epoch) (DESIGN.md#wal).
func TestABatchDuringACheckpointSeesTheFrozenLayer(t *testing.T) {
	s, _, _ := openTest(t)
	ctx := t.Context()
	mustCreate(t, s, board.NewCard{ID: "a"})
	settled(t, s) // the file holds the card; the memtable is empty

	// Hold bbolt's writer lock: the next checkpoint freezes its memtable
	// but cannot commit it until the test lets go.
	hold, err := s.db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { _ = hold.Rollback() }) }
	t.Cleanup(release)

	_, tok1, err := s.Claim(ctx, board.ClaimRequest{Card: "a", Marker: "host-101", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The timed checkpoint freezes the memtable holding the claim.
	waitFor(t, "the memtable with the claim to be frozen", func() bool { return s.layers.Load().frozen != nil })

	checkpointed := make(chan struct{})
	s.ck.after = func(uint64) { close(checkpointed) }
	var hookOnce sync.Once
	s.c.began = func() {
		// The next batch's transaction has begun on the file without the
		// claim; now the checkpoint commits it and unpublishes the layer.
		hookOnce.Do(func() {
			release()
			<-checkpointed
		})
	}
	_, tok2, err := s.Claim(ctx, board.ClaimRequest{Card: "a", Marker: "host-102", Lease: time.Hour})
	if err == nil {
		t.Fatalf("a second worker was granted card a (%+v) while %+v holds it", tok2, tok1)
	}
	if !errors.Is(err, board.ErrClaimConflict) {
		t.Fatalf("second claim: %v, want a conflict", err)
	}
	c, err := s.GetCard(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if c.Claim != "host-101" || c.ClaimEpoch != tok1.Epoch {
		t.Fatalf("card a is held by %q at epoch %d, want host-101 at %d", c.Claim, c.ClaimEpoch, tok1.Epoch)
	}
}
