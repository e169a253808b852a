package agent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

// watcher reads a real watch stream and hands its launch frames over.
type watcher struct {
	frames chan apitype.Frame
}

// watchLaunches connects a watch stream to the agent's socket and returns
// once the agent has said hello, so every frame pushed afterwards reaches it.
func watchLaunches(t *testing.T, path string) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{frames: make(chan apitype.Frame, 64)}
	hello := make(chan struct{})
	done := make(chan struct{})
	c := &client.Client{Socket: path}
	go func() {
		defer close(done)
		var once sync.Once
		_ = c.Watch(ctx, -1, func(f apitype.Frame) error {
			switch f.Type {
			case apitype.FrameHello:
				once.Do(func() { close(hello) })
			case apitype.FrameLaunch:
				w.frames <- f
			}
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-hello:
	case <-time.After(10 * time.Second):
		t.Fatal("no hello from the watch stream")
	}
	return w
}

// until collects launch frames up to and including the one for sentinel.
// The sentinel is a card a person moved into a launch state after the
// writes under test, so every hint those writes could produce was pushed
// before it: frames are numbered in push order.
func (w *watcher) until(t *testing.T, sentinel string) []apitype.Frame {
	t.Helper()
	var got []apitype.Frame
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f := <-w.frames:
			if f.Card == sentinel {
				return got
			}
			got = append(got, f)
		case <-timeout:
			t.Fatalf("sentinel %s never hinted; frames so far: %+v", sentinel, got)
		}
	}
}

type effectsEnv struct {
	t     *testing.T
	ctx   context.Context
	agent *socketapitest.Agent
	fx    *Effects
	w     *watcher
}

func newEffectsEnv(t *testing.T, marker string) *effectsEnv {
	t.Helper()
	a := socketapitest.Start(t, socketapitest.Options{})
	fx, err := NewEffects(EffectsConfig{
		Store: a.Store, Notify: a.Server.Notify, Marker: marker,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &effectsEnv{t: t, ctx: context.Background(), agent: a, fx: fx, w: watchLaunches(t, a.Path)}
}

func (e *effectsEnv) create(id, state string, labels ...string) {
	e.t.Helper()
	if _, err := e.agent.Store.CreateCard(e.ctx, board.CreateCardParams{ID: id, State: state, Labels: labels, Actor: "uid:1000"}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *effectsEnv) move(id, to string) {
	e.t.Helper()
	if err := e.agent.Store.SetState(e.ctx, board.MoveParams{Card: id, To: to, Actor: "uid:1000"}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *effectsEnv) pass() EffectsPass {
	e.t.Helper()
	p, err := e.fx.RunOnce(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// hintsAfter runs one pass, then moves a fresh sentinel card into ready and
// runs another, and returns the launch frames pushed before the sentinel's.
func (e *effectsEnv) hintsAfter(sentinel string) []apitype.Frame {
	e.t.Helper()
	e.pass()
	e.create(sentinel, board.StateBacklog)
	e.move(sentinel, board.StateReady)
	e.pass()
	return e.w.until(e.t, sentinel)
}

func (e *effectsEnv) lastEvent(card string, typ board.EventType) board.Event {
	e.t.Helper()
	evs, err := e.agent.Store.Events(e.ctx, board.EventsParams{After: 0, Limit: 10000})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Card == card && evs[i].Type == typ {
			return evs[i]
		}
	}
	e.t.Fatalf("no %s event for %s", typ, card)
	return board.Event{}
}

func launches(fs []apitype.Frame) []string {
	var out []string
	for _, f := range fs {
		s := f.Card + "@" + f.State
		if f.Reason != "" {
			s += "/" + f.Reason
		}
		out = append(out, s)
	}
	return out
}

func TestEffectsPersonMoveIntoLaunchStateHintsOnce(t *testing.T) {
	t.Parallel()
	e := newEffectsEnv(t, "fxhost-101")
	e.create("c1", board.StateBacklog)
	e.create("c2", board.StateBacklog)
	if err := e.fx.SeekHead(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.move("c1", board.StateReady)
	// A move into a state that is not a launch state hints nothing.
	e.move("c2", board.StateAwaitingInput)

	got := launches(e.hintsAfter("sentinel"))
	if want := []string{"c1@ready"}; !slices.Equal(got, want) {
		t.Errorf("launch hints = %v, want %v", got, want)
	}
}

func TestEffectsSeekHeadDoesNotReplayHistory(t *testing.T) {
	t.Parallel()
	e := newEffectsEnv(t, "fxhost-102")
	e.create("old", board.StateReady, "once:go")
	if err := e.fx.SeekHead(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := launches(e.hintsAfter("sentinel")); len(got) != 0 {
		t.Errorf("launch hints for events before the agent started = %v, want none", got)
	}
	c, err := e.agent.Store.GetCard(e.ctx, board.GetCardParams{ID: "old"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.Labels, "once:go") {
		t.Errorf("labels = %v: a one-shot added before the agent started was consumed without a firing event", c.Labels)
	}
}

// TestEffectsMachineReasonsFireNothing pins DESIGN.md#machine-reasons: a move
// under machine provenance into a launch state hints nothing and consumes
// no one-shot the card carries, while the event still flows, actor blank.
func TestEffectsMachineReasonsFireNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		reason board.Reason
		// write moves card into ready under machine provenance.
		write func(t *testing.T, s board.Store, card string)
	}{
		{
			name:   "watchdog repark by a recovery marker",
			reason: board.ReasonWatchdog,
			write: func(t *testing.T, s board.Store, card string) {
				ctx := context.Background()
				got, err := s.Claim(ctx, board.ClaimParams{Card: card, Marker: board.RecoveryMarker("fxhost-999"), Lease: time.Minute})
				tok := got.Token()
				if err != nil {
					t.Fatal(err)
				}
				// No reason given: the store stamps watchdog on a recovery
				// marker's move, as the reaper's repark relies on.
				if _, err := s.SetStateOwned(ctx, board.SetStateOwnedParams{Card: card, Token: tok, To: board.StateReady, From: board.StateInProgress}); err != nil {
					t.Fatal(err)
				}
				if err := s.ReleaseOwned(ctx, board.OwnedParams{Card: card, Token: tok}); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name:   "state rename migration",
			reason: board.ReasonStateRename,
			write: func(t *testing.T, s board.Store, card string) {
				if _, err := s.SetStateFrom(context.Background(), board.MoveParams{
					Card: card, From: board.StateInProgress, To: board.StateReady, Reason: board.ReasonStateRename, Actor: "migration",
				}); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEffectsEnv(t, "fxhost-103")
			// The card carries an armed one-shot from before the agent
			// started tailing: only a firing event may consume it.
			e.create("c1", board.StateInProgress, "once:go")
			if err := e.fx.SeekHead(e.ctx); err != nil {
				t.Fatal(err)
			}
			tc.write(t, e.agent.Store, "c1")
			ev := e.lastEvent("c1", board.EventState)
			if ev.Reason != tc.reason || ev.Actor != "" || ev.Data.To != board.StateReady {
				t.Fatalf("machine move event = reason %q actor %q to %q, want reason %q, blank actor, to ready", ev.Reason, ev.Actor, ev.Data.To, tc.reason)
			}

			if got := launches(e.hintsAfter("sentinel")); len(got) != 0 {
				t.Errorf("launch hints after a machine-reason move = %v, want none", got)
			}
			c, err := e.agent.Store.GetCard(e.ctx, board.GetCardParams{ID: "c1"})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(c.Labels, "once:go") {
				t.Errorf("labels = %v: a machine-reason move consumed the one-shot", c.Labels)
			}

			// The label stays armed: the next move a person makes into a
			// launch state fires it, with one hint for the one gesture.
			e.move("c1", board.StateBacklog)
			e.move("c1", board.StateReady)
			if got, want := launches(e.hintsAfter("sentinel2")), []string{"c1@ready"}; !slices.Equal(got, want) {
				t.Errorf("launch hints after a person's move = %v, want %v", got, want)
			}
			if c, _ := e.agent.Store.GetCard(e.ctx, board.GetCardParams{ID: "c1"}); slices.Contains(c.Labels, "once:go") {
				t.Errorf("labels = %v: the person's launch move did not consume the one-shot", c.Labels)
			}
		})
	}
}

func TestEffectsUnblockedPromotionHints(t *testing.T) {
	t.Parallel()
	e := newEffectsEnv(t, "fxhost-104")
	e.create("blocker", board.StateInProgress)
	if _, err := e.agent.Store.CreateCard(e.ctx, board.CreateCardParams{ID: "dep", DependsOn: []string{"blocker"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.fx.SeekHead(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.move("blocker", board.StateDone)
	ev := e.lastEvent("dep", board.EventState)
	if ev.Reason != board.ReasonUnblocked || ev.Data.To != board.StateReady {
		t.Fatalf("dependent's event = reason %q to %q, want unblocked to ready", ev.Reason, ev.Data.To)
	}
	if got, want := launches(e.hintsAfter("sentinel")), []string{"dep@ready"}; !slices.Equal(got, want) {
		t.Errorf("launch hints = %v, want %v (unblocked is not machine)", got, want)
	}
}

func TestEffectsOneShotAddedByPersonFiresAndIsConsumed(t *testing.T) {
	t.Parallel()
	e := newEffectsEnv(t, "fxhost-105")
	e.create("c1", board.StateBacklog, "keep")
	if err := e.fx.SeekHead(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.agent.Store.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "c1", Add: []string{"once:go"}, Actor: "uid:1000"}); err != nil {
		t.Fatal(err)
	}
	if got, want := launches(e.hintsAfter("sentinel")), []string{"c1@backlog/once:go"}; !slices.Equal(got, want) {
		t.Errorf("launch hints = %v, want %v", got, want)
	}
	c, err := e.agent.Store.GetCard(e.ctx, board.GetCardParams{ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Labels, []string{"keep"}; !slices.Equal(got, want) {
		t.Errorf("labels after firing = %v, want %v", got, want)
	}
	ev := e.lastEvent("c1", board.EventLabels)
	if got, want := ev.Actor, e.fx.Actor(); got != want {
		t.Errorf("consumption actor = %q, want %q", got, want)
	}
	// A second pass finds nothing new to fire.
	if got := launches(e.hintsAfter("sentinel2")); len(got) != 0 {
		t.Errorf("launch hints on a later pass = %v, want none", got)
	}
}

// TestEffectsOneShotFiresOnceAcrossAgents runs several agents' effects
// layers concurrently over one store: each one-shot is consumed by exactly
// one of them, and only that one hints.
func TestEffectsOneShotFiresOnceAcrossAgents(t *testing.T) {
	t.Parallel()
	const agents, cards = 3, 20
	a := socketapitest.Start(t, socketapitest.Options{})
	ctx := context.Background()
	var mu sync.Mutex
	hints := map[string][]string{} // card → markers that hinted it
	var fxs []*Effects
	for i := range agents {
		marker := board.WorkerMarker("fxhost", 200+i)
		fx, err := NewEffects(EffectsConfig{
			Store: a.Store, Marker: marker, Logger: slog.New(slog.DiscardHandler),
			Notify: func(f apitype.Frame) {
				mu.Lock()
				defer mu.Unlock()
				hints[f.Card] = append(hints[f.Card], marker)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		fxs = append(fxs, fx)
	}
	for i := range cards {
		id := fmt.Sprintf("c%02d", i)
		if _, err := a.Store.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateBacklog}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Store.AdjustLabels(ctx, board.AdjustLabelsParams{Card: id, Add: []string{"once:go"}, Actor: "uid:1000"}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, fx := range fxs {
		wg.Go(func() {
			if _, err := fx.RunOnce(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// One more pass each, so every agent reads the removals the others
	// wrote after its first pass ended.
	for _, fx := range fxs {
		if _, err := fx.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}

	evs, err := a.Store.Events(ctx, board.EventsParams{After: 0, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	consumedBy := map[string][]string{}
	for _, ev := range evs {
		if ev.Type == board.EventLabels && slices.Contains(ev.Data.Removed, "once:go") {
			consumedBy[ev.Card] = append(consumedBy[ev.Card], ev.Actor)
		}
	}
	for i := range cards {
		id := fmt.Sprintf("c%02d", i)
		if got := hints[id]; len(got) != 1 {
			t.Errorf("card %s hinted by %v, want exactly one agent", id, got)
			continue
		}
		if got, want := consumedBy[id], []string{EffectsActorPrefix + hints[id][0]}; !slices.Equal(got, want) {
			t.Errorf("card %s consumed by %v, want only the agent that hinted, %v", id, got, want)
		}
	}
}

// TestEffectsOneShotFromALabelSweepIsNotConsumed: a one-shot label that
// arrives through a machine-reason labels write (a field_rename sweep)
// neither fires nor is consumed (DESIGN.md#machine-reasons).
func TestEffectsOneShotFromALabelSweepIsNotConsumed(t *testing.T) {
	t.Parallel()
	e := newEffectsEnv(t, "fxhost-106")
	e.create("c1", board.StateBacklog, "old:go")
	if err := e.fx.SeekHead(e.ctx); err != nil {
		t.Fatal(err)
	}
	if set, err := e.agent.Store.SetLabelsFrom(e.ctx, board.SetLabelsFromParams{
		Card: "c1", Expect: []string{"old:go"}, Labels: []string{"once:go"}, Reason: board.ReasonFieldRename, Actor: "sweep",
	}); err != nil || !set.Changed {
		t.Fatalf("SetLabelsFrom: changed %v, err %v", set.Changed, err)
	}
	if ev := e.lastEvent("c1", board.EventLabels); ev.Reason != board.ReasonFieldRename || !slices.Contains(ev.Data.Added, "once:go") {
		t.Fatalf("sweep event = reason %q added %v, want field_rename adding once:go", ev.Reason, ev.Data.Added)
	}
	if got := launches(e.hintsAfter("sentinel")); len(got) != 0 {
		t.Errorf("launch hints after a label sweep = %v, want none", got)
	}
	if c, _ := e.agent.Store.GetCard(e.ctx, board.GetCardParams{ID: "c1"}); !slices.Contains(c.Labels, "once:go") {
		t.Errorf("labels = %v: a machine-reason label write consumed the one-shot", c.Labels)
	}
}

// busyLog is a store whose event log grows while it is read: every Events
// call first records one more event, as a busy fleet's log does while a
// slow reader pages through it.
type busyLog struct {
	board.Store
	n int
}

func (b *busyLog) Events(ctx context.Context, p board.EventsParams) ([]board.Event, error) {
	b.n++
	if _, err := b.Store.CreateCard(ctx, board.CreateCardParams{ID: fmt.Sprintf("busy-%d", b.n)}); err != nil {
		return nil, err
	}
	return b.Store.Events(ctx, p)
}

// TestEffectsSeekHeadEndsOnABusyLog: the seek stops at the first page
// shorter than its limit, which is the log's head when it was read. Waiting
// for an empty page instead chases a log that grows while it is read, and
// an agent never finishes starting.
func TestEffectsSeekHeadEndsOnABusyLog(t *testing.T) {
	t.Parallel()
	e := newEffectsEnv(t, "fxhost-103")
	fx, err := NewEffects(EffectsConfig{Store: &busyLog{Store: e.agent.Store}, Board: func(context.Context) (board.Board, error) { return board.DefaultBoard(true), nil }, Marker: "fxhost-103", Notify: func(apitype.Frame) {}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	if err := fx.SeekHead(ctx); err != nil {
		t.Fatalf("SeekHead on a log that grows while it is read: %v", err)
	}
}

// TestEffectsOneShotWaitsOutTheBlockers: a one-shot on a card waiting in
// waiting_deps — created there with it, or given it there — asks for a
// launch the card cannot take yet. It stays armed, hints nothing, and
// fires (and is consumed) when the card leaves waiting_deps into a launch
// state: here, the promotion when its blocker completes.
func TestEffectsOneShotWaitsOutTheBlockers(t *testing.T) {
	t.Parallel()
	e := newEffectsEnv(t, "fxhost-107")
	e.create("blocker", board.StateInProgress)
	if err := e.fx.SeekHead(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.agent.Store.CreateCard(e.ctx, board.CreateCardParams{
		ID: "dep", DependsOn: []string{"blocker"}, Labels: []string{"once:go", "keep"}, Actor: "uid:1000",
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.agent.Store.CreateCard(e.ctx, board.CreateCardParams{ID: "dep2", DependsOn: []string{"blocker"}, Actor: "uid:1000"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.agent.Store.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "dep2", Add: []string{"once:go"}, Actor: "uid:1000"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"dep", "dep2"} {
		if c, err := e.agent.Store.GetCard(e.ctx, board.GetCardParams{ID: id}); err != nil || c.State != board.StateWaitingDeps {
			t.Fatalf("%s: state %q (err %v), want waiting_deps", id, c.State, err)
		}
	}
	if got := launches(e.hintsAfter("sentinel")); len(got) != 0 {
		t.Errorf("launch hints while the cards wait on their blocker = %v, want none", got)
	}
	for _, id := range []string{"dep", "dep2"} {
		if c, _ := e.agent.Store.GetCard(e.ctx, board.GetCardParams{ID: id}); !slices.Contains(c.Labels, "once:go") {
			t.Errorf("%s labels = %v while it waits: the one-shot was consumed without a launch", id, c.Labels)
		}
	}

	e.move("blocker", board.StateDone) // promotes both, reason unblocked
	got := launches(e.hintsAfter("sentinel2"))
	slices.Sort(got)
	if want := []string{"dep2@ready", "dep@ready"}; !slices.Equal(got, want) {
		t.Errorf("launch hints after the promotion = %v, want %v (one each)", got, want)
	}
	for id, want := range map[string][]string{"dep": {"keep"}, "dep2": nil} {
		c, err := e.agent.Store.GetCard(e.ctx, board.GetCardParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Labels) != len(want) || !slices.Equal(c.Labels, want) && len(want) > 0 {
			t.Errorf("%s labels after the promotion = %v, want %v (the one-shot consumed)", id, c.Labels, want)
		}
	}
	if got := launches(e.hintsAfter("sentinel3")); len(got) != 0 {
		t.Errorf("launch hints on a later pass = %v, want none", got)
	}
}
