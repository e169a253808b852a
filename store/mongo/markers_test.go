package mongostore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/leasekeeper/leasekeeper/board"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// markBarrier holds every prune's marking write (the update of the events
// collection) until n of them are in flight: n agents that all listed the
// log before any of them marked it.
type markBarrier struct {
	mu      sync.Mutex
	n       int
	arrived int
	all     chan struct{}
	// marks are the marking writes in flight, by request id; once all n
	// have landed, marked is closed and the prunes' deletes go on.
	marks  map[int64]bool
	landed int
	marked chan struct{}
}

func (b *markBarrier) done(id int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.marks[id] {
		delete(b.marks, id)
		b.landed++
		if b.landed == b.n {
			close(b.marked)
		}
	}
}

func (b *markBarrier) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "delete" {
			if v, err := e.Command.LookupErr("delete"); err == nil && v.StringValue() == "events" {
				// Every agent's delete waits for every agent's marker.
				select {
				case <-b.marked:
				case <-time.After(20 * time.Second):
				}
			}
			return
		}
		if e.CommandName != "update" {
			return
		}
		if v, err := e.Command.LookupErr("update"); err != nil || v.StringValue() != "events" {
			return
		}
		b.mu.Lock()
		b.marks[e.RequestID] = true
		b.arrived++
		if b.arrived == b.n {
			close(b.all)
		}
		b.mu.Unlock()
		select {
		case <-b.all:
		case <-time.After(20 * time.Second): // a bound, not a synchronisation: the test fails below
		}
	}, Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		b.done(e.RequestID)
	}, Failed: func(_ context.Context, e *event.CommandFailedEvent) {
		b.done(e.RequestID)
	}}
}

// Agents of a fleet prune side by side, each keeping the events its own
// effects layer has not applied (KeepFrom), so each stops at its own top
// and turns it into a marker (DESIGN.md#retention); when all listed before
// any marked, none deletes the others' markers, and they lie side by side
// at the log's start. A reader from 0 passes over markers: a page of
// Events is still full while more events follow, however many markers it
// passed — a short page is how a reader (the effects layer's seek to the
// head, DESIGN.md#effects) knows it reached the head.
func TestEventsPageIsFullPastMarkersSideBySide(t *testing.T) {
	t.Parallel()
	const agents = 10
	b := &markBarrier{n: agents, all: make(chan struct{}), marks: map[int64]bool{}, marked: make(chan struct{})}
	clients := openClients(t, agents, mongostore.Options{Monitor: b.monitor()})
	s := clients[0]
	ctx := t.Context()
	for i := range agents + 4 {
		if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: fmt.Sprintf("c%02d", i), Actor: "cli"}); err != nil {
			t.Fatal(err)
		}
	}
	future := time.Now().Add(time.Hour)
	// Publish the outboxes first (a dry run does).
	if _, err := s.Prune(ctx, board.PruneParams{Before: future, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, board.EventsParams{After: 0, Limit: 100})
	if err != nil || len(evs) != agents+4 {
		t.Fatalf("Events = %d, %v; want %d", len(evs), err, agents+4)
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			if _, err := c.Prune(ctx, board.PruneParams{Before: future, KeepFrom: evs[i+1].Seq}); err != nil {
				t.Errorf("agent %d's Prune: %v", i, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	kept := evs[agents:]
	got, err := s.Events(ctx, board.EventsParams{After: 0, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Seq != kept[0].Seq {
		t.Fatalf("Events(0, 2) past %d markers = %d events %v; want the first two kept, %d and %d", agents, len(got), got, kept[0].Seq, kept[1].Seq)
	}
}
