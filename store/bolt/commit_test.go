package boltstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
)

// batchGate holds the committer before its first batch so that a test can
// pile writes into the second batch deterministically, then records the
// size of every batch.
type batchGate struct {
	mu      sync.Mutex
	sizes   []int
	held    chan struct{} // closed when the first batch is held
	release chan struct{}
	queued  chan int
}

func holdFirstBatch(s *Store) *batchGate {
	g := &batchGate{held: make(chan struct{}), release: make(chan struct{}), queued: make(chan int, 1024)}
	s.c.beforeCommit = func(n int) {
		g.mu.Lock()
		g.sizes = append(g.sizes, n)
		first := len(g.sizes) == 1
		g.mu.Unlock()
		if first {
			close(g.held)
			<-g.release
		}
	}
	s.c.enqueued = func(n int) { g.queued <- n }
	return g
}

// waitHeld blocks until the first batch is held, then forgets the queue
// lengths reported before it (the held write's own enqueue).
func (g *batchGate) waitHeld() {
	<-g.held
	for {
		select {
		case <-g.queued:
		default:
			return
		}
	}
}

// waitQueued blocks until the queue holds n writes.
func (g *batchGate) waitQueued(t *testing.T, n int) {
	t.Helper()
	for got := range g.queued {
		if got == n {
			return
		}
	}
}

func (g *batchGate) batchSizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.sizes)
}

func TestGroupCommitBatchesQueuedWritesIntoOneTransaction(t *testing.T) {
	s, _, _ := openTest(t)
	ctx := t.Context()
	for _, id := range []string{"first", "x", "y", "p1", "p2"} {
		mustCreate(t, s, board.CreateCardParams{ID: id, State: board.StateBacklog})
	}
	for _, id := range []string{"p1", "p2"} {
		if err := s.SetState(ctx, board.MoveParams{Card: id, To: board.StateReady}); err != nil {
			t.Fatal(err)
		}
	}
	g := holdFirstBatch(s)
	seq0 := lastSeq(t, s)

	// Batch 1: one write, held before it commits.
	firstDone := make(chan error, 1)
	go func() { firstDone <- s.SetState(ctx, board.MoveParams{Card: "first", To: board.StateAwaitingInput}) }()
	g.waitHeld()

	// Batch 2, queued while batch 1 is in flight: four claimants race for
	// x (each must see the winner's claim, written earlier in the same
	// transaction), three label writers add to y (each must see the others'
	// labels), two ClaimNext calls must get different cards, and two
	// broken writes — one whose flush fails, one that panics — must fail
	// alone without taking the batch down.
	markers := []string{"h-11", "h-12", "h-13", "h-14"}
	labels := []string{"l1", "l2", "l3"}
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		claimErrs  []error
		winners    []board.ClaimToken
		nextCards  []string
		labelErrs  []error
		brokenErrs []error
	)
	record := func(dst *[]error, err error) { mu.Lock(); *dst = append(*dst, err); mu.Unlock() }
	for _, m := range markers {
		wg.Go(func() {
			card, err := s.Claim(ctx, board.ClaimParams{Card: "x", Marker: m, Lease: lease})
			tok := card.Token()
			if err == nil {
				mu.Lock()
				winners = append(winners, tok)
				mu.Unlock()
				return
			}
			record(&claimErrs, err)
		})
	}
	for _, l := range labels {
		wg.Go(func() {
			_, err := s.AdjustLabels(ctx, board.AdjustLabelsParams{Card: "y", Add: []string{l}})
			record(&labelErrs, err)
		})
	}
	for i := range 2 {
		wg.Go(func() {
			c, err := s.ClaimNext(ctx, board.ClaimNextParams{Marker: fmt.Sprintf("n-%d", 20+i), Lease: lease})
			if err != nil {
				record(&labelErrs, fmt.Errorf("ClaimNext: %w", err))
				return
			}
			mu.Lock()
			nextCards = append(nextCards, c.ID)
			mu.Unlock()
		})
	}
	wg.Go(func() {
		record(&brokenErrs, s.write(ctx, func(w *wtx) error {
			w.put(bucketCards, []byte(strings.Repeat("k", 40000)), []byte("v")) // over bbolt's key limit
			return nil
		}))
	})
	wg.Go(func() {
		record(&brokenErrs, s.write(ctx, func(w *wtx) error {
			w.put(bucketCards, []byte("ghost"), []byte("{}"))
			panic("broken write")
		}))
	})
	const second = 4 + 3 + 2 + 2
	g.waitQueued(t, second)
	close(g.release)
	wg.Wait()
	if err := <-firstDone; err != nil {
		t.Fatalf("first write: %v", err)
	}

	if got, want := g.batchSizes(), []int{1, second}; !slices.Equal(got, want) {
		t.Errorf("batch sizes = %v, want %v (every queued write in one batch)", got, want)
	}
	if len(winners) != 1 {
		t.Fatalf("claim winners = %v, want exactly one", winners)
	}
	if got, want := winners[0].Epoch, int64(1); got != want {
		t.Errorf("winner epoch = %d, want %d", got, want)
	}
	for _, err := range claimErrs {
		ce, ok := board.AsClaimConflict(err)
		if !ok || ce.Holder != winners[0].Marker || ce.Epoch != winners[0].Epoch {
			t.Errorf("losing claim error = %v, want a conflict naming %s@%d", err, winners[0].Marker, winners[0].Epoch)
		}
	}
	for _, err := range labelErrs {
		if err != nil {
			t.Errorf("write in the batch failed: %v", err)
		}
	}
	slices.Sort(nextCards)
	if got, want := nextCards, []string{"p1", "p2"}; !slices.Equal(got, want) {
		t.Errorf("ClaimNext cards = %v, want %v", got, want)
	}
	if len(brokenErrs) != 2 || brokenErrs[0] == nil || brokenErrs[1] == nil {
		t.Errorf("broken writes returned %v, want two errors", brokenErrs)
	}
	y, err := s.GetCard(ctx, board.GetCardParams{ID: "y"})
	if err != nil {
		t.Fatal(err)
	}
	gotLabels := slices.Sorted(slices.Values(y.Labels))
	if !slices.Equal(gotLabels, labels) {
		t.Errorf("labels of y = %v, want %v (no write lost in the batch)", y.Labels, labels)
	}
	if _, err := s.GetCard(ctx, board.GetCardParams{ID: "ghost"}); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("the panicking write left a card behind: %v", err)
	}

	// Events: one state (batch 1), one claim of x, three label events, two
	// claims by ClaimNext — nothing from the losers or the broken writes.
	evs, err := s.Events(ctx, board.EventsParams{After: seq0, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	count := map[board.EventType]int{}
	for i, ev := range evs {
		count[ev.Type]++
		if i > 0 && ev.Seq != evs[i-1].Seq+1 {
			t.Errorf("event seq %d follows %d, want consecutive", ev.Seq, evs[i-1].Seq)
		}
	}
	want := map[board.EventType]int{board.EventState: 1, board.EventClaimed: 3, board.EventLabels: 3}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("events by type = %v, want %v", count, want)
	}
	checkIndexes(t, s)
}

func TestGroupCommitWithdrawsACancelledQueuedWrite(t *testing.T) {
	s, _, _ := openTest(t)
	mustCreate(t, s, board.CreateCardParams{ID: "a"})
	mustCreate(t, s, board.CreateCardParams{ID: "b"})
	g := holdFirstBatch(s)
	firstDone := make(chan error, 1)
	go func() { firstDone <- s.SetState(t.Context(), board.MoveParams{Card: "a", To: board.StateBacklog}) }()
	g.waitHeld()

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.SetState(ctx, board.MoveParams{Card: "b", To: board.StateBacklog}) }()
	g.waitQueued(t, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled queued write returned %v, want context.Canceled", err)
	}
	close(g.release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	b, err := s.GetCard(t.Context(), board.GetCardParams{ID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if b.State != board.StateReady {
		t.Errorf("withdrawn write landed: b is %s, want %s", b.State, board.StateReady)
	}
}

func TestCloseCommitsWritesAlreadyQueued(t *testing.T) {
	s, clock, path := openTest(t)
	mustCreate(t, s, board.CreateCardParams{ID: "a"})
	mustCreate(t, s, board.CreateCardParams{ID: "b"})
	g := holdFirstBatch(s)
	results := make(chan error, 2)
	go func() { results <- s.SetState(t.Context(), board.MoveParams{Card: "a", To: board.StateBacklog}) }()
	g.waitHeld()
	go func() { results <- s.SetState(t.Context(), board.MoveParams{Card: "b", To: board.StateBacklog}) }()
	g.waitQueued(t, 1)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	close(g.release)
	for range 2 {
		if err := <-results; err != nil {
			t.Errorf("queued write during Close: %v", err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for _, id := range []string{"a", "b"} {
		c, err := s2.GetCard(t.Context(), board.GetCardParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if c.State != board.StateBacklog {
			t.Errorf("%s is %s after reopen, want %s", id, c.State, board.StateBacklog)
		}
	}
}

func lastSeq(t *testing.T, s *Store) int64 {
	t.Helper()
	evs, err := s.Events(t.Context(), board.EventsParams{After: 0, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}
