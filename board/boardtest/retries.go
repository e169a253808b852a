package boardtest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// exerciseRetries is the retry policy's part of the contract
// (DESIGN.md#retries): a run new to a card is an attempt, a retryable
// failure returns the card to the pool backing off by the store's clock,
// the pool passes a card over while it backs off, a claim by id is
// refused, and the attempts spent file the card failed saying so. On the
// fleet the backoff is the server's clock, which the suite cannot move:
// there the pick after the backoff is checked on a card whose backoff is a
// millisecond, by polling the pick with a deadline.
func exerciseRetries(t *testing.T, h Harness) {
	t.Run("BackoffIsPassedOverUntilRetryAt", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.create(board.CreateCardParams{ID: "c1", Actor: "cli", Retry: &board.RetryPolicy{MaxAttempts: 3, Backoff: time.Hour}})
		if c := e.get("c1"); c.Retry == nil || c.Retry.MaxAttempts != 3 || c.Retry.Backoff != time.Hour {
			t.Fatalf("c1's own retry policy = %+v, want max_attempts 3, backoff 1h", c.Retry)
		}
		e.card("c2", "")
		st := e.start(startReq("c1", markerA, "r1"))
		if st.Card.Attempts != 1 {
			t.Errorf("Start: attempts %d, want 1 (a run new to the card)", st.Card.Attempts)
		}
		before := e.clock.Now()
		f, err := e.s.Finish(e.ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1",
			Status: board.RunFailed, FailureCode: "SIGNAL_9", Retryable: true})
		if err != nil {
			t.Fatalf("Finish (retryable): %v", err)
		}
		c := e.get("c1")
		if c.State != e.b.FirstPool() || c.Claimed() || c.Attempts != 1 || c.GaveUp != nil {
			t.Fatalf("after a retryable failure c1 = %s attempts %d gave_up %+v; want free in %s, 1 attempt, no stamp", fmtCard(c), c.Attempts, c.GaveUp, e.b.FirstPool())
		}
		if !f.Run.RetryableFailure || !e.run("r1").RetryableFailure {
			t.Errorf("the run does not record its retryable failure: %+v", e.run("r1"))
		}
		if e.local() && !c.RetryAt.Equal(before.Add(time.Hour)) {
			t.Errorf("retry_at = %s, want the store's clock plus the backoff, %s", c.RetryAt, before.Add(time.Hour))
		}
		if !e.local() && c.RetryAt.Before(time.Now().Add(50*time.Minute)) {
			t.Errorf("retry_at = %s, want about an hour from the server's now", c.RetryAt)
		}

		// The pool passes c1 over: the younger c2 is taken, then none.
		card, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease})
		tok2 := card.Token()
		if err != nil || card.ID != "c2" {
			t.Fatalf("ClaimNext = %s, %v; want c2 (c1 backs off)", card.ID, err)
		}
		e.release("c2", tok2)
		e.setState("c2", board.StateBacklog)
		_, err = e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease})
		wantErr(t, err, board.ErrNotFound, "ClaimNext with only a card backing off")
		_, err = e.s.Start(e.ctx, board.StartParams{Next: true, Marker: markerB, Lease: lease, Run: board.Run{ID: "rn"}})
		wantErr(t, err, board.ErrNotFound, "Start next with only a card backing off")

		// By id: refused, naming the time; nothing written.
		seq := e.lastSeq()
		_, err = e.s.Claim(e.ctx, board.ClaimParams{Card: "c1", Marker: markerB, Lease: lease})
		wantErr(t, err, board.ErrTransitionRejected, "Claim of a card backing off")
		if err != nil && !strings.Contains(err.Error(), c.RetryAt.UTC().Format(time.RFC3339)[:16]) {
			t.Errorf("the refusal %q does not name the time %s", err, c.RetryAt)
		}
		_, err = e.s.Start(e.ctx, startReq("c1", markerB, "r2"))
		wantErr(t, err, board.ErrTransitionRejected, "Start of a card backing off")
		e.noEventsSince(seq, "refused claims of a card backing off")

		if e.local() {
			// The store's clock passes retry_at: the pool takes c1 again,
			// and its next run is attempt 2.
			e.clock.Advance(time.Hour)
			st := e.start(board.StartParams{Next: true, Marker: markerB, Lease: lease, Run: board.Run{ID: "r2"}})
			if st.Card.ID != "c1" || st.Card.Attempts != 2 || st.Resumed {
				t.Errorf("Start next after the backoff = %s attempts %d resumed %v; want c1, attempt 2, a fresh run", st.Card.ID, st.Card.Attempts, st.Resumed)
			}
			return
		}
		// The fleet: a card whose backoff is a millisecond is taken once
		// the server's clock has passed it.
		e.create(board.CreateCardParams{ID: "c3", Actor: "cli", Retry: &board.RetryPolicy{Backoff: time.Millisecond}})
		st3 := e.start(startReq("c3", markerA, "r3"))
		if _, err := e.s.Finish(e.ctx, board.FinishParams{Card: "c3", Token: st3.Token, RunID: "r3",
			Status: board.RunFailed, FailureCode: "SIGNAL_11", Retryable: true}); err != nil {
			t.Fatalf("Finish c3: %v", err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			card, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease})
			if err == nil {
				if card.ID != "c3" {
					t.Errorf("ClaimNext = %s, want c3 (c1 still backs off)", card.ID)
				}
				break
			}
			if !errors.Is(err, board.ErrNotFound) || time.Now().After(deadline) {
				t.Fatalf("ClaimNext after c3's backoff: %v", err)
			}
		}
	})

	// A retry's backoff does not depend on the filing moving the card: a
	// card claimed by id in the pool and run there (Claim, CreateRun —
	// never moved into the running column) is not moved by Finish, and
	// still backs off.
	t.Run("ARetryUnmovedStillBacksOff", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.create(board.CreateCardParams{ID: "c1", Actor: "cli", Retry: &board.RetryPolicy{MaxAttempts: 3, Backoff: time.Hour}})
		tok := e.claim("c1", markerA)
		if _, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "r1", Card: "c1"}}); err != nil {
			t.Fatalf("CreateRun: %v", err)
		}
		if _, err := e.s.Finish(e.ctx, board.FinishParams{Card: "c1", Token: tok, RunID: "r1",
			Status: board.RunFailed, FailureCode: "SIGNAL_9", Retryable: true}); err != nil {
			t.Fatalf("Finish (retryable): %v", err)
		}
		c := e.get("c1")
		if c.Claimed() || c.Attempts != 1 || c.RetryAt.IsZero() {
			t.Fatalf("after a retryable failure c1 = %s attempts %d retry_at %s; want free, 1 attempt, backing off", fmtCard(c), c.Attempts, c.RetryAt)
		}
		card, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease})
		if err == nil {
			t.Fatalf("ClaimNext took %s at once: the retry's backoff was lost because the filing did not move the card", card.ID)
		}
		wantErr(t, err, board.ErrNotFound, "ClaimNext with only a card backing off")
	})

	// The watchdog's retry of a card run where it sat, in the first pool
	// state: SetStateOwned with Retry into the state the card is in moves
	// nothing and reports no move, but stamps the backoff.
	t.Run("ARetryMoveIntoTheSameStateStillBacksOff", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.create(board.CreateCardParams{ID: "c1", Actor: "cli", Retry: &board.RetryPolicy{MaxAttempts: 3, Backoff: time.Hour}})
		tok := e.claim("c1", markerA)
		seq := e.lastSeq()
		changed, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, From: e.b.FirstPool(), To: e.b.FirstPool(), Reason: board.ReasonRetry, Retry: true})
		if err != nil || changed.Changed {
			t.Fatalf("SetStateOwned (retry, same state) = %v, %v; want no move reported", changed.Changed, err)
		}
		for _, ev := range e.eventsAfter(seq) {
			if ev.Type == board.EventState {
				t.Errorf("a state event %+v for a move that moved nothing", ev)
			}
		}
		e.release("c1", tok)
		if c := e.get("c1"); c.RetryAt.IsZero() {
			t.Fatalf("c1 = %s retry_at zero: the retry's backoff was lost because the move moved nothing", fmtCard(c))
		}
		_, err = e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease})
		wantErr(t, err, board.ErrNotFound, "ClaimNext with only a card backing off")
	})

	// A retry_at further ahead than any backoff the policy can stamp
	// (board.MaxBackoff) was stamped by a clock that has since stepped
	// back: the card is not left passed over until the clock catches up
	// (DESIGN.md#never-stranded). Locally the suite steps the store's
	// clock; the fleet's server clock is stepped in store/mongo's own test.
	t.Run("ARetryAtBeyondAnyBackoffIsAClockStep", func(t *testing.T) {
		t.Parallel()
		if h.Fleet {
			t.Skip("the fleet's server clock is stepped in store/mongo's TestRetryAtFromAServerClockSteppedBack")
		}
		e := open(t, h)
		e.create(board.CreateCardParams{ID: "c1", Actor: "cli", Retry: &board.RetryPolicy{MaxAttempts: 3, Backoff: time.Hour}})
		before := e.clock.Now()
		e.clock.Set(before.Add(365 * 24 * time.Hour)) // the clock runs a year ahead…
		st := e.start(startReq("c1", markerA, "r1"))
		if _, err := e.s.Finish(e.ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1",
			Status: board.RunFailed, FailureCode: "SIGNAL_9", Retryable: true}); err != nil {
			t.Fatalf("Finish (retryable): %v", err)
		}
		e.clock.Set(before.Add(time.Minute)) // …and is stepped back
		card, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease})
		if err != nil || card.ID != "c1" {
			t.Fatalf("ClaimNext after the clock stepped back = %q, %v; want c1 (retry_at %s is a year ahead, beyond any backoff)", card.ID, err, e.get("c1").RetryAt)
		}
	})

	t.Run("AttemptsSpentFileTheCardFailed", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.create(board.CreateCardParams{ID: "c1", Actor: "cli", Retry: &board.RetryPolicy{MaxAttempts: 1}})
		st := e.start(startReq("c1", markerA, "r1"))
		if _, err := e.s.Finish(e.ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1",
			Status: board.RunFailed, FailureCode: "SIGNAL_9", Retryable: true}); err != nil {
			t.Fatalf("Finish: %v", err)
		}
		c := e.get("c1")
		if c.State != board.StateFailed || c.GaveUp == nil || !strings.Contains(c.GaveUp.Reason, "attempts spent (1 of 1)") || c.GaveUp.Attempts != 1 {
			t.Fatalf("c1 = %s gave_up %+v; want failed with a stamp naming its attempts spent (1 of 1)", fmtCard(c), c.GaveUp)
		}
		e.reopen("c1", e.b.FirstPool())
		if c := e.get("c1"); c.Attempts != 0 || !c.RetryAt.IsZero() || c.GaveUp != nil {
			t.Errorf("reopened c1: attempts %d retry_at %s gave_up %+v; want a fresh set of attempts", c.Attempts, c.RetryAt, c.GaveUp)
		}
	})

	t.Run("AnExitStatusIsNotRetried", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", "")
		st := e.start(startReq("c1", markerA, "r1"))
		if _, err := e.s.Finish(e.ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1",
			Status: board.RunFailed, FailureCode: "EXIT_1"}); err != nil {
			t.Fatalf("Finish: %v", err)
		}
		if c := e.get("c1"); c.State != board.StateFailed || !c.RetryAt.IsZero() || c.GaveUp != nil {
			t.Errorf("c1 = %s retry_at %s; want failed as before the policy", fmtCard(c), c.RetryAt)
		}
		_, err := e.s.Finish(e.ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1",
			Status: board.RunFinished, Retryable: true})
		wantErr(t, err, board.ErrInvalidArgument, "a retryable verdict that is not a failure")
	})

	t.Run("AResumeIsNotAnAttempt", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", "")
		st := e.start(startReq("c1", markerA, "r1"))
		if _, err := e.s.Finish(e.ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1", Status: board.RunFailedResumable}); err != nil {
			t.Fatalf("Finish: %v", err)
		}
		st = e.start(startReq("c1", markerB, "r2"))
		// Locally the Start resumes r1: the same attempt. The fleet never
		// resumes (DESIGN.md#resume): r2 is attempt 2.
		want := 1
		if !e.local() {
			want = 2
		}
		if st.Card.Attempts != want || e.get("c1").Attempts != want {
			t.Errorf("after a resumable failure and a Start (resumed %v): attempts %d, want %d", st.Resumed, st.Card.Attempts, want)
		}
		// A person's move into a pool state is a fresh set of attempts.
		e.release("c1", st.Token)
		e.setState("c1", board.StateBacklog)
		e.setState("c1", e.b.FirstPool())
		if c := e.get("c1"); c.Attempts != 0 {
			t.Errorf("after an operator's move into %s: attempts %d, want 0", e.b.FirstPool(), c.Attempts)
		}
	})
}
