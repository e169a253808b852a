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

// TestAReadPausedAcrossACheckpointIsNotTorn: a reader takes the layers and
// then begins its transaction. If a later memtable — one holding changes
// made after the reader's layers — reaches the file in between (a second
// checkpoint, or Close), the reader's older layer shadows keys the file
// already holds newer values for, while the file shows the other keys of
// the same newer writes: one write seen half. Here a renewal moves a
// lease from one index key to another in one write, and the listing shows
// the card under both, the new key with the old lease (DESIGN.md#wal).
func TestAReadPausedAcrossACheckpointIsNotTorn(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := t.Context()
	mustCreate(t, s, board.NewCard{ID: "a"})
	settled(t, s)
	_, tok, err := s.Claim(ctx, board.ClaimRequest{Card: "a", Marker: "host-101", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}

	took := make(chan struct{})
	resume := make(chan struct{})
	var once sync.Once
	s.viewTook = func() {
		once.Do(func() {
			close(took)
			<-resume
		})
	}
	type result struct {
		page board.ExpiredPage
		err  error
	}
	got := make(chan result, 1)
	go func() {
		p, err := s.ListExpiredClaimCandidates(ctx, board.ExpiredQuery{Cutoff: clock.Now().Add(24 * time.Hour)})
		got <- result{p, err}
	}()
	<-took // the reader holds layers with the claim's lease index key

	rs, err := s.RenewClaims(ctx, []board.Hold{{Card: "a", Token: tok}}, 2*time.Hour)
	if err != nil || rs[0].Err != nil {
		t.Fatalf("renew: %v %+v", err, rs)
	}
	settled(t, s) // the memtable with the claim and the renewal reaches the file
	close(resume)

	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.page.Cards) != 1 {
		var seen []string
		for _, c := range r.page.Cards {
			seen = append(seen, c.ID+" until "+c.ClaimLeaseUntil.Format(time.TimeOnly))
		}
		t.Fatalf("the listing shows %d entries for one claimed card: %v", len(r.page.Cards), seen)
	}
}
