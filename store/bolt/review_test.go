package boltstore

import (
	"errors"
	"fmt"
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
	mustCreate(t, s, board.CreateCardParams{ID: "a"})
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

	card, err := s.Claim(ctx, board.ClaimParams{Card: "a", Marker: "host-101", Lease: time.Hour})
	tok1 := card.Token()
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
	second, err := s.Claim(ctx, board.ClaimParams{Card: "a", Marker: "host-102", Lease: time.Hour})
	tok2 := second.Token()
	if err == nil {
		t.Fatalf("a second worker was granted card a (%+v) while %+v holds it", tok2, tok1)
	}
	if !errors.Is(err, board.ErrClaimConflict) {
		t.Fatalf("second claim: %v, want a conflict", err)
	}
	c, err := s.GetCard(ctx, board.GetCardParams{ID: "a"})
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
	mustCreate(t, s, board.CreateCardParams{ID: "a"})
	settled(t, s)
	card, err := s.Claim(ctx, board.ClaimParams{Card: "a", Marker: "host-101", Lease: time.Hour})
	tok := card.Token()
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
		page board.ListExpiredClaimCandidatesResult
		err  error
	}
	got := make(chan result, 1)
	go func() {
		p, err := s.ListExpiredClaimCandidates(ctx, board.ListExpiredClaimCandidatesParams{Cutoff: clock.Now().Add(24 * time.Hour)})
		got <- result{p, err}
	}()
	<-took // the reader holds layers with the claim's lease index key

	rs, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "a", Token: tok}}, Lease: 2 * time.Hour})
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

// TestASteadyStreamOfWritesStillCheckpoints: the committer freezes the
// active memtable between batches once it holds checkpointChanges changes.
// When every batch ends with the next one already queued — writers that
// never let the queue run dry — the memtable must still be frozen, or it
// and the log grow without bound and no checkpoint ever runs
// (DESIGN.md#wal-checkpoint).
func TestASteadyStreamOfWritesStillCheckpoints(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := t.Context()
	const cards = 400
	var wg sync.WaitGroup
	for i := range cards {
		wg.Go(func() {
			if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: fmt.Sprintf("c%03d", i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	holds := make([]board.Hold, 0, cards)
	var mu sync.Mutex
	for range cards {
		wg.Go(func() {
			c, err := s.ClaimNext(ctx, board.ClaimNextParams{Marker: "host-101", Lease: time.Hour})
			tok := c.Token()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			holds = append(holds, board.Hold{Card: c.ID, Token: tok})
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	settled(t, s) // an empty memtable; the stream starts from nothing

	// Each renewal of every card changes three keys per card. Before each
	// batch commits, the next renewal is queued, so the queue never runs
	// dry until the memtable is frozen or far more than checkpointChanges
	// changes have gone by.
	const maxRenewals = 4 * checkpointChanges / (3 * cards)
	queued := make(chan struct{}, 1)
	s.c.enqueued = func(int) {
		select {
		case queued <- struct{}{}:
		default:
		}
	}
	var (
		renewals int
		errs     = make(chan error, maxRenewals+1)
		maxSeen  int
	)
	renew := func() {
		renewals++
		clock.Advance(time.Second)
		wg.Go(func() {
			rs, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: holds, Lease: time.Hour})
			if err == nil {
				for _, r := range rs {
					if r.Err != nil {
						err = r.Err
						break
					}
				}
			}
			errs <- err
		})
		<-queued
	}
	// The committer's memtable only shrinks when it is frozen.
	var (
		prev  = s.work.changes
		froze bool
	)
	s.c.beforeCommit = func(int) {
		n := s.work.changes
		froze = froze || n < prev
		prev, maxSeen = n, max(maxSeen, n)
		if !froze && renewals < maxRenewals {
			renew()
		}
	}
	renew()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !froze {
		t.Fatalf("%d renewals of %d claims in a steady stream (a memtable of up to %d changes; the threshold is %d) and the memtable was never frozen for a checkpoint",
			renewals, cards, maxSeen, checkpointChanges)
	}
}
