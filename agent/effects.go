package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// OneShotPrefix marks a one-shot label: "once:<name>" is a standing request
// for ONE launch of the card. It fires on the first firing event that either
// adds it to a card (a labels event or a card created with it) or moves a
// card that carries it into a launch state, except that a card waiting on
// its blockers (in waiting_deps) cannot launch: there it stays armed until
// a move takes the card into a launch state (its promotion); firing pushes a launch hint and
// consumes the label (AdjustLabels remove), so it never fires twice. A
// machine-reason event neither fires nor consumes it (DESIGN.md#machine-reasons). SetLabels is absolute by contract, so stating the label
// again re-arms it (DESIGN.md#label-sweeps).
const OneShotPrefix = "once:"

// FleetEffectsPoll is how often the effects layer reads a fleet's log
// (a shared store): a read there is two queries, and an idle agent must
// cost the fleet's server under one command a second
// (DESIGN.md#event-log). A fleet's events also reach readers only once
// they are a second old, so a faster poll would not hint much sooner.
const FleetEffectsPoll = 2500 * time.Millisecond

// IsOneShot reports whether label is a one-shot label.
func IsOneShot(label string) bool {
	return strings.HasPrefix(label, OneShotPrefix) && len(label) > len(OneShotPrefix)
}

// EffectsActorPrefix starts the actor of a one-shot consumption:
// "effects:" + the consuming agent's marker. The actor is what makes the
// consumption an election across agents sharing one store (see Effects).
const EffectsActorPrefix = "effects:"

// EffectsStore is what the effects layer calls on the store: the event
// log it tails, the card whose one-shots a launch move fires (GetCard) and
// the board (LoadBoard, when EffectsConfig.Board is nil), and AdjustLabels,
// which consumes a fired one-shot. Every board.Store is one.
type EffectsStore interface {
	board.EventLog
	board.CardReader
	board.CardWriter
}

// EffectsConfig configures the effects layer.
type EffectsConfig struct {
	// Store is the store whose event log is tailed.
	Store EffectsStore
	// Board reads the board definition the launch states are decided by:
	// the agent's cache of it. Nil reads Store.LoadBoard.
	Board func(ctx context.Context) (board.Board, error)
	// Notify pushes a launch frame onto this agent's watch stream.
	Notify func(apitype.Frame)
	// Marker is this agent's own marker; consumptions are recorded with the
	// actor EffectsActorPrefix + Marker.
	Marker string
	// Poll is how often the log is read when nothing wakes the tailer:
	// writes through another agent or a cascade of a write made elsewhere
	// are only found this way. Default 500ms.
	Poll time.Duration
	// Page is how many events one read takes (default 256).
	Page int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// EffectsPass reports what one run of the tailer did.
type EffectsPass struct {
	// Cursor is the sequence of the last event handled.
	Cursor int64
	// Seen counts events read; Hints the launch frames pushed; Consumed
	// the one-shot labels this agent consumed.
	Seen, Hints, Consumed int
}

// Effects turns the store's event log into effects: launch hints on the
// watch stream and one-shot label consumption. It is the ONE place hints
// are produced, because only the log sees every write — this agent's,
// other agents' on a shared MongoDB, and the cascades the store makes
// itself (a dependent promoted with reason unblocked) — together with each
// write's provenance.
//
// The rule (DESIGN.md#machine-reasons): a machine-reason event (watchdog,
// state_rename, state_delete, field_rename, field_delete, unlaunchable)
// fires no effect at all — no hint, no one-shot consumption — while it
// still flows to audit tails with its actor blanked. unblocked is not
// machine: the cascade of closing a blocker keeps its triggers.
//
// Every agent tails the log and hints its OWN workers, so a plain launch
// move is hinted once per agent. A one-shot fires once for the whole fleet:
// every agent that sees it fire asks the store to remove the label, the
// store's AdjustLabels is one atomic step that writes (and logs) only when
// the label is still there, so exactly one removal event exists, and only
// the agent whose actor that event names pushes the hint. The consumption
// is the election.
type Effects struct {
	cfg   EffectsConfig
	actor string
	wake  chan struct{}

	// pending maps a one-shot this agent tried to consume to what the hint
	// should say if the tail shows the consumption was ours. It is cleared
	// by the next removal of that label on that card, whoever made it:
	// a removal attempt that wrote nothing means someone removed it after
	// the trigger, and that removal is later in the log.
	pending map[oneShotKey]pendingHint
	cursor  int64
	// head is cursor published for other goroutines: the board counts
	// recount only when it moved (DESIGN.md#queue-depth).
	head atomic.Int64

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

type oneShotKey struct{ card, label string }

type pendingHint struct {
	state string
	// hinted: the trigger was itself a launch move this agent hinted
	// already; one gesture, one hint per agent.
	hinted bool
}

// NewEffects validates cfg.
func NewEffects(cfg EffectsConfig) (*Effects, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("field Store is nil"))
	}
	if cfg.Notify == nil {
		errs = append(errs, errors.New("field Notify is nil"))
	}
	if err := board.ValidateAgentMarker(cfg.Marker); err != nil {
		errs = append(errs, fmt.Errorf("field Marker: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("effects config: %w", err)
	}
	if cfg.Board == nil && cfg.Store != nil {
		cfg.Board = cfg.Store.LoadBoard
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.Page <= 0 {
		cfg.Page = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Effects{
		cfg:     cfg,
		actor:   EffectsActorPrefix + cfg.Marker,
		wake:    make(chan struct{}, 1),
		pending: map[oneShotKey]pendingHint{},
	}, nil
}

// Actor is the actor this agent's consumptions are recorded with.
func (e *Effects) Actor() string { return e.actor }

// SeekHead moves the cursor to the last event in the log, so an agent that
// starts does not replay history as fresh gestures. Events written while no
// agent tailed the log are not hinted; a one-shot added then stays armed
// and fires on the next launch move of its card.
//
// A page shorter than the limit is the head as it was when it was read:
// the seek stops there. Waiting for an empty page would chase a fleet's
// log that grows while it is read, and the agent would never finish
// starting; what is written after the seek is tailed as fresh.
func (e *Effects) SeekHead(ctx context.Context) error {
	const page = 10000
	for {
		evs, err := e.cfg.Store.Events(ctx, board.EventsParams{After: e.cursor, Limit: page})
		if err != nil {
			return fmt.Errorf("effects: finding the head of the event log: %w", err)
		}
		if len(evs) > 0 {
			e.cursor = evs[len(evs)-1].Seq
			e.head.Store(e.cursor)
		}
		if len(evs) < page {
			return nil
		}
	}
}

// Head is the sequence of the last event the tailer handled (or sought
// past). It is safe to call from any goroutine.
func (e *Effects) Head() int64 { return e.head.Load() }

// Wake makes the tailer read the log now (after a write this agent made).
func (e *Effects) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Start tails the log in the background until Stop or ctx ends.
func (e *Effects) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done != nil {
		return errors.New("effects: already started")
	}
	ctx, e.cancel = context.WithCancel(ctx)
	e.done = make(chan struct{})
	go e.loop(ctx, e.done)
	return nil
}

// Stop ends the tailer and waits for it. A nil or unstarted Effects is a
// no-op, so an agent that failed half-way through starting can call it.
func (e *Effects) Stop() {
	if e == nil {
		return
	}
	e.mu.Lock()
	cancel, done := e.cancel, e.done
	e.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (e *Effects) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(e.cfg.Poll)
	defer t.Stop()
	for {
		if _, err := e.RunOnce(ctx); err != nil && ctx.Err() == nil {
			e.cfg.Logger.Warn("effects: reading the event log", "after", e.cursor, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
		case <-t.C:
		}
	}
}

// RunOnce reads the log from the cursor to its end and applies every event.
// It is not safe to call concurrently with the background loop; tests
// drive one pass at a time with it. On a store error it stops at the last
// event fully handled, so the next run retries the one that failed.
func (e *Effects) RunOnce(ctx context.Context) (EffectsPass, error) {
	var p EffectsPass
	for {
		evs, err := e.cfg.Store.Events(ctx, board.EventsParams{After: e.cursor, Limit: e.cfg.Page})
		if errors.Is(err, board.ErrEventsPruned) {
			// Another agent's prune (a fleet's agents each keep only
			// their own cursor) cut the log below this one: what was
			// pruned is older than the retention age, so the layer moves
			// to the head as a new agent does rather than stall on the
			// gap for ever (DESIGN.md#retention).
			e.cfg.Logger.Warn("effects: the event log was pruned past this agent's position; moving to its head", "after", e.cursor, "err", err)
			prev := e.cursor
			e.cursor = 0 // the pruned position reads as the same error
			if err := e.SeekHead(ctx); err != nil {
				e.cursor = prev // never left at 0: that would replay the log
				e.head.Store(prev)
				p.Cursor = e.cursor
				return p, err
			}
			p.Cursor = e.cursor
			return p, nil
		}
		if err != nil {
			p.Cursor = e.cursor
			return p, err
		}
		for _, ev := range evs {
			if err := e.apply(ctx, ev, &p); err != nil {
				p.Cursor = e.cursor
				return p, fmt.Errorf("event %d (%s %s): %w", ev.Seq, ev.Type, ev.Card, err)
			}
			e.cursor = ev.Seq
			e.head.Store(e.cursor)
			p.Seen++
		}
		if len(evs) < e.cfg.Page {
			p.Cursor = e.cursor
			return p, nil
		}
	}
}

// apply handles one event. Consumption is attempted before any hint is
// pushed, so an event retried after a store error never hints twice.
func (e *Effects) apply(ctx context.Context, ev board.Event, p *EffectsPass) error {
	if ev.Type == board.EventLabels {
		e.settle(ev, p)
	}
	// DESIGN.md#machine-reasons: machine provenance fires nothing at all.
	if !ev.FiresEffects() {
		return nil
	}
	b, err := e.cfg.Board(ctx)
	if err != nil {
		return err
	}
	var armed []string // one-shots this event fires
	launchTo := ""
	switch ev.Type {
	case board.EventCardCreated:
		// DESIGN.md#one-shot-labels: a card created to wait on its
		// blockers cannot launch; its one-shots stay armed for the move
		// that takes it out of waiting_deps into a launch state.
		if ev.Data.To != board.StateWaitingDeps {
			armed = oneShots(ev.Data.Labels)
		}
		if b.IsLaunch(ev.Data.To) {
			launchTo = ev.Data.To
		}
	case board.EventLabels:
		if armed = oneShots(ev.Data.Added); len(armed) > 0 {
			// The same for a one-shot given to a card that waits, judged
			// on the card as it is now: one promoted since fires here, and
			// its promotion, later in the log, finds the one-shot gone.
			c, err := e.cfg.Store.GetCard(ctx, board.GetCardParams{ID: ev.Card})
			switch {
			case errors.Is(err, board.ErrNotFound):
				armed = nil
			case err != nil:
				return err
			case c.State == board.StateWaitingDeps:
				armed = nil
			}
		}
	case board.EventState:
		if !b.IsLaunch(ev.Data.To) {
			return nil
		}
		launchTo = ev.Data.To
		// A launch move fires the one-shots the card carries now.
		c, err := e.cfg.Store.GetCard(ctx, board.GetCardParams{ID: ev.Card})
		switch {
		case errors.Is(err, board.ErrNotFound):
		case err != nil:
			return err
		default:
			armed = oneShots(c.Labels)
		}
	default:
		return nil
	}
	if len(armed) > 0 {
		c, err := e.cfg.Store.AdjustLabels(ctx, board.AdjustLabelsParams{Card: ev.Card, Remove: armed, Actor: e.actor})
		switch {
		case errors.Is(err, board.ErrNotFound):
		case err != nil:
			return fmt.Errorf("consuming one-shot labels %v: %w", armed, err)
		default:
			for _, l := range armed {
				e.pending[oneShotKey{ev.Card, l}] = pendingHint{state: c.State, hinted: launchTo != ""}
			}
		}
	}
	if launchTo != "" {
		e.hint(ev.Card, launchTo, "")
		p.Hints++
	}
	return nil
}

// settle resolves pending consumptions against a labels event: a removal
// recorded under this agent's actor is the consumption it won, and it
// hints; a removal by anyone else means another agent (or a person) got
// there first, and this agent stays silent.
func (e *Effects) settle(ev board.Event, p *EffectsPass) {
	for _, l := range ev.Data.Removed {
		k := oneShotKey{ev.Card, l}
		ph, ok := e.pending[k]
		if !ok {
			continue
		}
		delete(e.pending, k)
		if ev.Actor != e.actor {
			continue
		}
		p.Consumed++
		e.cfg.Logger.Info("one-shot label fired and consumed", "card", ev.Card, "label", l, "seq", ev.Seq)
		if !ph.hinted {
			e.hint(ev.Card, ph.state, l)
			p.Hints++
		}
	}
}

func (e *Effects) hint(card, state, oneShot string) {
	e.cfg.Notify(apitype.Frame{Type: apitype.FrameLaunch, Card: card, State: state, Reason: oneShot})
}

func oneShots(labels []string) []string {
	var out []string
	for _, l := range labels {
		if IsOneShot(l) {
			out = append(out, l)
		}
	}
	return out
}

// initEffects builds the effects layer and seeks it to the head of the log.
// It runs before the socket serves, so no write made through this agent
// can fall between the seek and the first read.
func (a *Agent) initEffects(ctx context.Context) error {
	var poll time.Duration // the default
	if a.store.Traits().Shared {
		poll = FleetEffectsPoll
	}
	fx, err := NewEffects(EffectsConfig{
		Poll:   poll,
		Store:  a.store,
		Board:  a.boards.Board,
		Marker: a.marker,
		Notify: func(f apitype.Frame) {
			if srv := a.srv.Load(); srv != nil {
				srv.Notify(f)
			}
		},
		Logger: a.log.With("component", "effects"),
	})
	if err != nil {
		return err
	}
	if err := fx.SeekHead(ctx); err != nil {
		return err
	}
	a.effects = fx
	return nil
}

// effectsHead is the socket server's EventHeadHint: the effects layer's
// cursor, an event of the log, so never past its head.
func (a *Agent) effectsHead() int64 {
	if a.effects != nil {
		return a.effects.Head()
	}
	return 0
}

// wakeEffects is the socket server's AfterWrite hook.
func (a *Agent) wakeEffects() {
	if a.effects != nil {
		a.effects.Wake()
	}
}
