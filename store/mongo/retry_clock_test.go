package mongostore_test

import (
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// TestRetryAtFromAServerClockSteppedBack: DESIGN.md#retries and
// DESIGN.md#never-stranded. A retry's backoff is stamped by the server's
// clock. If that clock ran a year ahead when it stamped (a forward step,
// later put right), the card's retry_at is a year ahead of the present —
// beyond any backoff a policy can stamp (board.MaxBackoff) — and a pick
// that honoured it would pass the card over for a year. Such a retry_at is
// a clock step, not a backoff: the pool takes the card, and so does a
// claim by id.
func TestRetryAtFromAServerClockSteppedBack(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{})
	clock := boardtest.NewManualClock(f.serverNow())
	uri := mongotest.ClockProxy(t, clock)
	s := openStore(t, mongostore.Options{URI: uri, Database: f.raw.Name(), Clock: clock})
	ctx := t.Context()
	for _, id := range []string{"c1", "c2"} {
		if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: id, Actor: "cli", Retry: &board.RetryPolicy{MaxAttempts: 3, Backoff: time.Hour}}); err != nil {
			t.Fatalf("CreateCard %s: %v", id, err)
		}
	}
	t0 := clock.Now()
	clock.Set(t0.Add(365 * 24 * time.Hour))
	for _, id := range []string{"c1", "c2"} {
		st, err := s.Start(ctx, board.StartParams{Card: id, Marker: "host-a-11", Lease: 30 * time.Second, Run: board.Run{ID: id + "-r1"}})
		if err != nil {
			t.Fatalf("Start %s: %v", id, err)
		}
		if _, err := s.Finish(ctx, board.FinishParams{Card: id, Token: st.Token, RunID: id + "-r1",
			Status: board.RunFailed, FailureCode: "SIGNAL_9", Retryable: true}); err != nil {
			t.Fatalf("Finish %s (retryable): %v", id, err)
		}
	}
	clock.Set(t0.Add(time.Minute))
	card, err := s.ClaimNext(ctx, board.ClaimNextParams{Marker: "host-b-22", Lease: 30 * time.Second})
	if err != nil || card.ID != "c1" {
		t.Errorf("ClaimNext after the server's clock was put right = %q, %v; want c1 (its retry_at is a year ahead, beyond any backoff)", card.ID, err)
	}
	if _, err := s.Claim(ctx, board.ClaimParams{Card: "c2", Marker: "host-b-22", Lease: 30 * time.Second}); err != nil {
		t.Errorf("Claim c2 after the server's clock was put right: %v; want it taken", err)
	}
}
