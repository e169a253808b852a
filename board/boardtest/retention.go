package boardtest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// exerciseRetention pins Store.Prune and Store.DeleteCard
// (DESIGN.md#retention).
func exerciseRetention(t *testing.T, h Harness) {
	t.Parallel()
	t.Run("PruneRespectsAgeSinkAndClaim", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		old := e.finished("old-done", "r-old")
		held := e.card("held", "")
		heldRun := e.start(startReq("held", markerA, "r-held")).Run
		e.setState("held", board.StateDone) // claimed, in a sink
		pool := e.card("pool", "")
		st := e.start(startReq("pool", markerB, "r-pool"))
		e.finish(st, board.RunFailedResumable) // back in the pool, unclaimed
		cut := e.cutoff()
		e.finished("new-done", "r-new")

		got, err := e.s.Prune(e.ctx, board.PruneParams{Before: cut})
		if err != nil {
			t.Fatalf("Prune: %v", err)
		}
		if got.Runs != 1 || !slices.Equal(got.Cards, []string{"old-done"}) {
			t.Errorf("Prune = %+v; want the one run of old-done", got)
		}
		if _, err := e.s.GetRun(e.ctx, board.GetRunParams{ID: "r-old"}); !errors.Is(err, board.ErrNotFound) {
			t.Errorf("GetRun of the pruned run = %v, want ErrNotFound", err)
		}
		for _, id := range []string{heldRun.ID, "r-pool", "r-new"} {
			e.run(id) // kept: claimed, not in a sink, too young
		}
		if c := e.get("old-done"); c.LastRunID != old.LastRunID || c.State != board.StateDone {
			t.Errorf("the pruned card changed: %s", fmtCard(c))
		}
		_, _ = held, pool
		// Reopened, a card whose run was pruned starts afresh.
		e.reopen("old-done", e.b.FirstPool())
		if st := e.start(startReq("old-done", markerA, "r-again")); st.Resumed || st.Run.ID != "r-again" {
			t.Errorf("Start after the run was pruned = %+v, want a fresh run r-again", st.Run)
		}
	})
	t.Run("PruneIsBoundedAndDryRunWritesNothing", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		for _, id := range []string{"a", "b", "c"} {
			e.finished(id, "run-"+id)
		}
		cut := e.cutoff()
		seq := e.lastSeq()
		before := len(e.allEvents())
		dry, err := e.s.Prune(e.ctx, board.PruneParams{Before: cut, Limit: 2, DryRun: true})
		if err != nil {
			t.Fatalf("Prune dry run: %v", err)
		}
		if !dry.DryRun || dry.Runs != 2 || dry.Events != 2 || !dry.More {
			t.Errorf("dry run = %+v; want 2 runs, 2 events, more", dry)
		}
		e.run("run-a")
		if n := len(e.allEvents()); n != before || e.lastSeq() != seq {
			t.Errorf("a dry run changed the log: %d events, want %d", n, before)
		}
		got, err := e.s.Prune(e.ctx, board.PruneParams{Before: cut, Limit: 2})
		if err != nil {
			t.Fatalf("Prune: %v", err)
		}
		if got.Runs != 2 || got.Events != 2 || !got.More || !slices.Equal(got.Cards, dry.Cards) {
			t.Errorf("Prune = %+v; want what the dry run said (%+v)", got, dry)
		}
		rest, err := e.s.Prune(e.ctx, board.PruneParams{Before: cut, Limit: board.MaxPruneLimit})
		if err != nil {
			t.Fatalf("Prune: %v", err)
		}
		if rest.Runs != 1 || rest.More {
			t.Errorf("second Prune = %+v; want the last run and nothing more", rest)
		}
		again, err := e.s.Prune(e.ctx, board.PruneParams{Before: cut})
		if err != nil || again.Runs != 0 || again.Events != 0 {
			t.Errorf("a third Prune = %+v, %v; want nothing left", again, err)
		}
		if _, err := e.s.Prune(e.ctx, board.PruneParams{}); !errors.Is(err, board.ErrInvalidArgument) {
			t.Errorf("Prune without a cutoff = %v, want ErrInvalidArgument", err)
		}
	})
	t.Run("PrunedEventsAreRefusedNotSkipped", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("x", "")
		e.card("y", "")
		e.card("w", "")
		first := e.allEvents()
		cut := e.cutoff()
		e.card("z", "")
		keep := first[len(first)-1].Seq // the newest old event stays
		got, err := e.s.Prune(e.ctx, board.PruneParams{Before: cut, KeepFrom: keep})
		if err != nil {
			t.Fatalf("Prune: %v", err)
		}
		if got.Events != len(first)-1 || got.EventsThrough != first[len(first)-2].Seq {
			t.Fatalf("Prune = %+v; want every old event below KeepFrom %d", got, keep)
		}
		// A follower that had read only the first event would skip the
		// pruned ones: it is told, not served a gap.
		_, err = e.s.Events(e.ctx, board.EventsParams{After: first[0].Seq, Limit: 10})
		if !errors.Is(err, board.ErrEventsPruned) {
			t.Errorf("Events after a pruned position = %v, want ErrEventsPruned", err)
		}
		// From the start, or from the pruned position on, the log reads.
		evs := e.allEvents()
		if len(evs) == 0 || evs[0].Seq != keep {
			t.Errorf("Events(0) = %s; want the retained log from seq %d", fmtEvents(evs), keep)
		}
		if evs, err := e.s.Events(e.ctx, board.EventsParams{After: got.EventsThrough, Limit: 10}); err != nil || len(evs) == 0 {
			t.Errorf("Events after the pruned position = %s, %v; want the rest", fmtEvents(evs), err)
		}
	})
	t.Run("DeleteCard", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.finished("gone", "r-gone")
		e.card("held", "")
		tok := e.claim("held", markerA)
		e.card("blocker", "")
		e.create(board.CreateCardParams{ID: "dep", DependsOn: []string{"blocker"}, Actor: "cli"})

		seq := e.lastSeq()
		before := e.get("held")
		_, err := e.s.DeleteCard(e.ctx, board.DeleteCardParams{ID: "held", Actor: "uid:0"})
		wantConflict(t, err, markerA, tok.Epoch, "DeleteCard of a claimed card")
		e.unchanged(before, "a refused DeleteCard")
		_, err = e.s.DeleteCard(e.ctx, board.DeleteCardParams{ID: "blocker", Actor: "uid:0"})
		wantErr(t, err, board.ErrTransitionRejected, "DeleteCard of a blocker")
		_, err = e.s.DeleteCard(e.ctx, board.DeleteCardParams{ID: "nope", Actor: "uid:0"})
		wantErr(t, err, board.ErrNotFound, "DeleteCard of an unknown card")
		dry, err := e.s.DeleteCard(e.ctx, board.DeleteCardParams{ID: "gone", Actor: "uid:0", DryRun: true})
		if err != nil || dry.Runs != 1 || dry.Card.ID != "gone" {
			t.Errorf("dry DeleteCard = %+v, %v; want card gone with 1 run", dry, err)
		}
		e.run("r-gone")
		e.noEventsSince(seq, "refused and dry-run DeleteCards")

		// The fleet twin deletes a card only once the server's clock has
		// passed its epoch (its re-created card's epochs start from the
		// clock): a millisecond on the suite's clock.
		e.clock.Advance(time.Millisecond)
		got, err := e.s.DeleteCard(e.ctx, board.DeleteCardParams{ID: "gone", Actor: "uid:0"})
		if err != nil || got.Runs != 1 || got.Card.State != board.StateDone {
			t.Fatalf("DeleteCard = %+v, %v; want the done card and its run", got, err)
		}
		if _, err := e.s.GetCard(e.ctx, board.GetCardParams{ID: "gone"}); !errors.Is(err, board.ErrNotFound) {
			t.Errorf("GetCard after DeleteCard = %v, want ErrNotFound", err)
		}
		if _, err := e.s.GetRun(e.ctx, board.GetRunParams{ID: "r-gone"}); !errors.Is(err, board.ErrNotFound) {
			t.Errorf("GetRun of a deleted card's run = %v, want ErrNotFound", err)
		}
		ev := e.oneEventSince(seq, board.EventCardDeleted, "DeleteCard")
		if ev.Card != "gone" || ev.Actor != "uid:0" {
			t.Errorf("card_deleted event = %+v", ev)
		}
		cards, err := e.s.ListCards(e.ctx, board.ListCardsParams{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cards {
			if c.ID == "gone" {
				t.Errorf("ListCards still lists the deleted card")
			}
		}
		// The id is free again, and its epochs go on from the deleted
		// card's: a token of the old card is never handed out again
		// (DESIGN.md#epoch-monotone).
		e.card("gone", "")
		if tok := e.claim("gone", markerA); tok.Epoch <= got.Card.ClaimEpoch {
			t.Errorf("the re-created card's first claim has epoch %d, not past the deleted card's %d: the epoch repeated", tok.Epoch, got.Card.ClaimEpoch)
		}
	})
	t.Run("ConcurrentPrunesDeleteEachThingOnce", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		for _, id := range []string{"a", "b", "c", "d"} {
			e.finished(id, "run-"+id)
		}
		cut := e.cutoff()
		want := len(e.allEvents())
		// A dry run first: on the fleet twin it publishes the pending
		// outboxes, which a publish racing a prune could put back
		// (store/mongo.Store.Prune); the prunes then race on deletes only.
		if _, err := e.s.Prune(e.ctx, board.PruneParams{Before: cut, Limit: board.MaxPruneLimit, DryRun: true}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		runs, events := 0, 0
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := e.s.Prune(e.ctx, board.PruneParams{Before: cut, Limit: board.MaxPruneLimit})
				if err != nil {
					t.Errorf("concurrent Prune: %v", err)
					return
				}
				mu.Lock()
				runs += got.Runs
				events += got.Events
				mu.Unlock()
			}()
		}
		wg.Wait()
		if runs != 4 || events != want {
			t.Errorf("four prunes side by side deleted %d runs and %d events, want each run and event counted once (4, %d)", runs, events, want)
		}
	})
}

// finished creates card id and runs it to done under a run named runID.
func (e *env) finished(id, runID string) board.Card {
	e.t.Helper()
	e.card(id, "")
	st := e.start(startReq(id, markerA, runID))
	return e.finish(st, board.RunFinished)
}

// finish gives the run of st its verdict and returns the card after it.
func (e *env) finish(st board.StartResult, status board.RunStatus) board.Card {
	e.t.Helper()
	f, err := e.s.Finish(e.ctx, board.FinishParams{Card: st.Card.ID, Token: st.Token, RunID: st.Run.ID, Status: status})
	if err != nil {
		e.t.Fatalf("Finish(%q, %s): %v", st.Card.ID, status, err)
	}
	return f.Card
}

// cutoff returns a time after everything written so far and at or before
// anything written next: the local clock is advanced past it; on the
// fleet twin the server's clock is read until its second has passed the
// newest write (a poll with a deadline, not a sleep): the fleet's event
// cutoff is whole seconds, its sequence numbers' resolution.
func (e *env) cutoff() time.Time {
	e.t.Helper()
	if e.local() {
		cut := e.clock.Now().Add(time.Millisecond)
		e.clock.Advance(time.Second)
		return cut
	}
	var newest time.Time
	for _, ev := range e.allEvents() {
		if ev.At.After(newest) {
			newest = ev.At
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		now, err := e.s.Now(e.ctx)
		if err != nil {
			e.t.Fatalf("Now: %v", err)
		}
		// An event's time is the server's clock as the store last read
		// it (at most a second old), its sequence number the server's
		// stamp: a second more keeps the two on the same side.
		if sec := now.Truncate(time.Second); sec.After(newest.Add(time.Second)) {
			return sec
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the store's clock did not pass %s", fmtTime(newest))
		}
		time.Sleep(time.Millisecond)
	}
}
