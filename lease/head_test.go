package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/lease"
)

// eventsSpy records where each read of the event log starts.
type eventsSpy struct {
	board.Store
	afters []int64
}

func (s *eventsSpy) Events(ctx context.Context, p board.EventsParams) ([]board.Event, error) {
	after := p.After
	s.afters = append(s.afters, after)
	return s.Store.Events(ctx, p)
}

// TestEventsHeadSeeksFromWhereItKnowsTheLogIs: the head is the last
// event's number; the seek starts at the hint (the effects layer's
// cursor) and then at the last head answered, never at the log's start
// again (DESIGN.md#waiting).
func TestEventsHeadSeeksFromWhereItKnowsTheLogIs(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, heartbeat.ModePID)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := r.s.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateReady}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := r.s.Events(ctx, board.EventsParams{After: 0, Limit: 100})
	if err != nil || len(evs) != 3 {
		t.Fatalf("events = %v, %v; want three", evs, err)
	}
	spy := &eventsSpy{Store: r.s}
	svc, err := lease.New(lease.Config{Store: spy, Claims: r.hb, Clock: r.clk, Lease: func() time.Duration { return term },
		HeadHint: func() int64 { return evs[1].Seq }})
	if err != nil {
		t.Fatal(err)
	}
	head, err := svc.EventsHead(ctx)
	if err != nil || head != evs[2].Seq {
		t.Fatalf("EventsHead = %d, %v; want %d", head, err, evs[2].Seq)
	}
	if len(spy.afters) != 1 || spy.afters[0] != evs[1].Seq {
		t.Fatalf("the seek read the log after %v, want once after the hint %d", spy.afters, evs[1].Seq)
	}
	if _, err := r.s.CreateCard(ctx, board.CreateCardParams{ID: "d", State: board.StateReady}); err != nil {
		t.Fatal(err)
	}
	spy.afters = nil
	again, err := svc.EventsHead(ctx)
	if err != nil || again <= head {
		t.Fatalf("EventsHead after a write = %d, %v; want past %d", again, err, head)
	}
	if len(spy.afters) != 1 || spy.afters[0] != head {
		t.Fatalf("the second seek read the log after %v, want once after the last head %d", spy.afters, head)
	}
}

// TestEventsHeadAfterTheLogWasPrunedPastWhereItKnewIt: a prune (on a
// fleet, another agent's, bounded by that agent's effects cursor, not this
// one's) deletes the log past the last head this agent answered and past
// its hint. The head is still answered — it is never below what was pruned
// — instead of the seek being refused for as long as the hint lags
// (DESIGN.md#waiting, DESIGN.md#retention): a waiter whose head read is
// refused gives up its wait.
func TestEventsHeadAfterTheLogWasPrunedPastWhereItKnewIt(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, heartbeat.ModePID)
	for _, id := range []string{"a", "b"} {
		if _, err := r.s.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateReady}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := r.svc.EventsHead(ctx)
	if err != nil || first == 0 {
		t.Fatalf("EventsHead = %d, %v", first, err)
	}
	for _, id := range []string{"c", "d"} {
		if _, err := r.s.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateReady}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := r.s.Events(ctx, board.EventsParams{After: 0, Limit: 100})
	if err != nil || len(evs) != 4 {
		t.Fatalf("events = %v, %v; want four", evs, err)
	}
	last := evs[len(evs)-1].Seq
	res, err := r.s.Prune(ctx, board.PruneParams{Before: r.clk.Now().Add(time.Hour), KeepFrom: last})
	if err != nil || res.EventsThrough <= first {
		t.Fatalf("Prune = %+v, %v; want the log pruned past %d", res, err, first)
	}
	head, err := r.svc.EventsHead(ctx)
	if err != nil {
		t.Fatalf("EventsHead after a prune past the last head answered: %v", err)
	}
	if head < res.EventsThrough {
		t.Fatalf("EventsHead = %d, below the pruned position %d: a follow after it is refused", head, res.EventsThrough)
	}
	if _, err := r.s.Events(ctx, board.EventsParams{After: head, Limit: 1}); err != nil {
		t.Fatalf("Events after the head answered: %v", err)
	}
}
