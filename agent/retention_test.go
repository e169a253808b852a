package agent

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// retentionStore opens a real bbolt store on a manual clock.
func retentionStore(t *testing.T) (*boltstore.Store, *boardtest.ManualClock) {
	t.Helper()
	clk := boardtest.NewManualClock(time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC))
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, clk
}

// finishCard runs card id to done under run runID.
func finishCard(t *testing.T, s board.Store, id, runID string) {
	t.Helper()
	ctx := t.Context()
	if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: id, Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Start(ctx, board.StartParams{Card: id, Marker: "host-42", Lease: time.Minute, Run: board.Run{ID: runID, Host: "host", PID: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, board.FinishParams{Card: id, Token: st.Token, RunID: runID, Status: board.RunFinished}); err != nil {
		t.Fatal(err)
	}
}

type prunePass struct {
	res board.PruneResult
	err error
}

// The background pruner runs a pass when its timer fires (the test's, not
// a sleep), prunes by the store's clock less the policy's age, keeps the
// events the effects layer has not applied, and follows a pass that hit
// its bound with the next one after MorePause instead of a whole interval
// (DESIGN.md#retention).
func TestPrunerPassesOnItsTimerAndDrainsABacklog(t *testing.T) {
	t.Parallel()
	s, clk := retentionStore(t)
	finishCard(t, s, "a", "run-a")
	finishCard(t, s, "b", "run-b")
	clk.Advance(31 * 24 * time.Hour)
	finishCard(t, s, "young", "run-young")

	waits := make(chan time.Duration, 8)
	fire := make(chan time.Time)
	passes := make(chan prunePass, 8)
	p := NewPruner(PrunerConfig{
		Store:    s,
		Policy:   RetentionConfig{Age: 720 * time.Hour, PerPass: 1, Interval: 10 * time.Minute},
		KeepFrom: func() int64 { return 4 }, // the effects layer applied events 1..3
		Logger:   slog.New(slog.DiscardHandler),
		After: func(d time.Duration) <-chan time.Time {
			waits <- d
			return fire
		},
		OnPass: func(r board.PruneResult, err error) { passes <- prunePass{r, err} },
	})
	p.Start(t.Context())
	defer p.Stop()

	pass := func(wantWait time.Duration) board.PruneResult {
		t.Helper()
		if d := <-waits; d != wantWait {
			t.Fatalf("the pruner waited %s, want %s", d, wantWait)
		}
		fire <- time.Time{}
		got := <-passes
		if got.err != nil {
			t.Fatalf("pass: %v", got.err)
		}
		return got.res
	}
	first := pass(10 * time.Minute)
	if first.Runs != 1 || first.Events != 1 || !first.More {
		t.Errorf("first pass = %+v; want one run, one event, more to come", first)
	}
	second := pass(MorePause)
	if second.Runs != 1 || second.Events != 1 {
		t.Errorf("second pass = %+v; want the other old run and one more event", second)
	}
	third := pass(MorePause)
	if third.Runs != 0 || third.Events != 1 || third.More {
		t.Errorf("third pass = %+v; want the last event below KeepFrom and nothing more", third)
	}
	if d := <-waits; d != 10*time.Minute {
		t.Errorf("after the backlog the pruner waits %s, want the interval", d)
	}
	for _, id := range []string{"run-a", "run-b"} {
		if _, err := s.GetRun(t.Context(), board.GetRunParams{ID: id}); !errors.Is(err, board.ErrNotFound) {
			t.Errorf("GetRun(%s) = %v, want it pruned", id, err)
		}
	}
	if _, err := s.GetRun(t.Context(), board.GetRunParams{ID: "run-young"}); err != nil {
		t.Errorf("a run younger than the age was pruned: %v", err)
	}
	evs, err := s.Events(t.Context(), board.EventsParams{After: 0, Limit: 100})
	if err != nil || len(evs) == 0 || evs[0].Seq != 4 {
		t.Errorf("the log after the passes starts at %v (%v); want seq 4, the first event the effects layer had not applied", evs, err)
	}
}

// A store that cannot prune (a plugin from before retention, refused the
// verb as an invalid argument) is told once: the pruner stops instead of failing
// every interval.
func TestPrunerStopsOnAStoreThatCannotPrune(t *testing.T) {
	t.Parallel()
	s, _ := retentionStore(t)
	waits := make(chan time.Duration, 8)
	fire := make(chan time.Time, 1)
	p := NewPruner(PrunerConfig{
		Store:  refusingPrune{s},
		Policy: RetentionConfig{Age: time.Hour, PerPass: 10, Interval: time.Minute},
		Logger: slog.New(slog.DiscardHandler),
		After: func(d time.Duration) <-chan time.Time {
			waits <- d
			return fire
		},
	})
	p.Start(t.Context())
	<-waits
	fire <- time.Time{}
	done := make(chan struct{})
	go func() { <-p.done; close(done) }()
	select {
	case <-done:
	case d := <-waits:
		t.Errorf("the pruner waits %s for another pass on a store that cannot prune", d)
	case <-time.After(10 * time.Second):
		t.Error("the pruner did not stop")
	}
	p.Stop()
}

type refusingPrune struct{ *boltstore.Store }

func (refusingPrune) Prune(context.Context, board.PruneParams) (board.PruneResult, error) {
	return board.PruneResult{}, board.Invalid("no retention here")
}

// Another agent's prune (a fleet's agents each keep only their own
// cursor) may cut the log below this agent's effects cursor. The effects
// layer then moves to the head, as a starting agent does, and goes on
// hinting; it does not fail every poll on the gap for ever.
func TestEffectsMoveToTheHeadWhenTheLogWasPrunedPastThem(t *testing.T) {
	t.Parallel()
	e := newEffectsEnv(t, "fxhost-201")
	e.create("c1", board.StateBacklog)
	if err := e.fx.SeekHead(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.create("c2", board.StateBacklog)
	e.create("c3", board.StateBacklog)
	// Pruned with no floor, as another agent's pass would.
	if _, err := e.agent.Store.Prune(e.ctx, board.PruneParams{Before: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fx.RunOnce(e.ctx); err != nil {
		t.Fatalf("effects pass after the log was pruned past its cursor: %v", err)
	}
	e.move("c1", board.StateReady)
	if got := launches(e.hintsAfter("sentinel")); len(got) != 1 || got[0] != "c1@ready" {
		t.Errorf("launch hints after the prune = %v, want [c1@ready]", got)
	}
}
