package mongostore_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// Several agents prune one database side by side (DESIGN.md#retention):
// each through its own client, at once. Together they delete every old
// run and event once — the counts add up to what there was, not more —
// and every client then refuses a reader positioned below what went.
func TestConcurrentPrunesAcrossClients(t *testing.T) {
	t.Parallel()
	clients := openClients(t, 3, mongostore.Options{})
	s := clients[0]
	ctx := t.Context()
	for i := range 4 {
		id := fmt.Sprintf("c%d", i)
		if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: id, Actor: "cli"}); err != nil {
			t.Fatal(err)
		}
		st, err := s.Start(ctx, board.StartParams{Card: id, Marker: "host-42", Lease: time.Minute, Run: board.Run{ID: "run-" + id, Host: "host", PID: 42}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, board.FinishParams{Card: id, Token: st.Token, RunID: "run-" + id, Status: board.RunFinished}); err != nil {
			t.Fatal(err)
		}
	}
	// A cutoff past every write's second (an event's sequence number is
	// its server stamp's second): poll the server's clock, no sleep as
	// synchronisation.
	evs, err := s.Events(ctx, board.EventsParams{After: 0, Limit: 1000})
	if err != nil || len(evs) < 2 {
		t.Fatalf("Events = %d, %v", len(evs), err)
	}
	newest := evs[len(evs)-1].At
	var cut time.Time
	for deadline := time.Now().Add(10 * time.Second); ; {
		now, err := s.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sec := now.Truncate(time.Second); sec.After(newest.Add(time.Second)) {
			cut = sec
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server's clock did not move past the writes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Publish the outboxes first (a dry run does), so the prunes race on
	// deletes only.
	if _, err := s.Prune(ctx, board.PruneParams{Before: cut, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var runs, events int
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Prune(ctx, board.PruneParams{Before: cut, Limit: board.MaxPruneLimit})
			if err != nil {
				t.Errorf("Prune: %v", err)
				return
			}
			mu.Lock()
			runs += res.Runs
			events += res.Events
			mu.Unlock()
		}()
	}
	wg.Wait()
	if runs != 4 || events != len(evs) {
		t.Errorf("three agents pruning side by side deleted %d runs and %d events; want each once: 4 and %d", runs, events, len(evs))
	}
	for i := range 4 {
		if _, err := clients[i%3].GetRun(ctx, board.GetRunParams{ID: fmt.Sprintf("run-c%d", i)}); !errors.Is(err, board.ErrNotFound) {
			t.Errorf("run-c%d after the prunes: %v, want not found", i, err)
		}
	}
	for i, c := range clients {
		if _, err := c.Events(ctx, board.EventsParams{After: evs[0].Seq, Limit: 10}); !errors.Is(err, board.ErrEventsPruned) {
			t.Errorf("client %d: Events after a pruned position = %v, want ErrEventsPruned", i, err)
		}
		if got, err := c.Events(ctx, board.EventsParams{After: 0, Limit: 10}); err != nil || len(got) != 0 {
			t.Errorf("client %d: Events(0) after pruning everything = %v, %v; want none", i, got, err)
		}
	}
}

// A deleted card's epochs are not stored anywhere, so the card created
// again under its id starts from the server's clock (DESIGN.md#twin-epoch):
// the delete waits for the clock to pass the card's epoch, or the new
// card's first claim could repeat the deleted card's last token
// (DESIGN.md#epoch-monotone). The store's clock is held still here, as a
// stepped-back server clock would hold it.
func TestDeleteCardWaitsForTheClockToPassItsEpoch(t *testing.T) {
	t.Parallel()
	clock := boardtest.NewManualClock(time.Now())
	s := openStore(t, mongostore.Options{Clock: clock})
	ctx := t.Context()
	if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c", Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	card, err := s.Claim(ctx, board.ClaimParams{Card: "c", Marker: "host-42", Lease: time.Minute})
	tok := card.Token()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, board.ReleaseParams{Card: "c", Marker: "host-42", Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.DeleteCard(ctx, board.DeleteCardParams{ID: "c", Actor: "uid:0"})
	if !errors.Is(err, board.ErrTransitionRejected) {
		t.Fatalf("DeleteCard before the clock passed epoch %d = %v, want ErrTransitionRejected", tok.Epoch, err)
	}
	clock.Advance(time.Millisecond)
	if _, err := s.DeleteCard(ctx, board.DeleteCardParams{ID: "c", Actor: "uid:0"}); err != nil {
		t.Fatalf("DeleteCard once the clock passed the epoch: %v", err)
	}
	if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c", Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	againCard, err := s.Claim(ctx, board.ClaimParams{Card: "c", Marker: "host-42", Lease: time.Minute})
	again := againCard.Token()
	if err != nil {
		t.Fatal(err)
	}
	if again.Epoch <= tok.Epoch {
		t.Errorf("the re-created card's claim has epoch %d, not past the deleted card's %d", again.Epoch, tok.Epoch)
	}
}
