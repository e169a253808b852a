package boardtest

import (
	"errors"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// moveVerb is one verb of the SetState family, moving card from its
// current state (from) to to.
type moveVerb struct {
	name string
	call func(e *env, card, from, to string) error
}

// setStateFamily lists every verb the sink guard must cover (DESIGN.md#sinks).
var setStateFamily = []moveVerb{
	{"SetState", func(e *env, card, _, to string) error {
		return e.s.SetState(e.ctx, board.MoveParams{Card: card, To: to, Actor: "uid:1000"})
	}},
	{"SetStateFrom", func(e *env, card, from, to string) error {
		_, err := e.s.SetStateFrom(e.ctx, board.MoveParams{Card: card, From: from, To: to, Actor: "bot"})
		return err
	}},
	{"SetStateOwned", func(e *env, card, _, to string) error {
		tok := e.get(card).Token()
		if tok.Marker == "" {
			tok = e.claim(card, markerA)
		}
		_, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: card, Token: tok, To: to})
		return err
	}},
}

func exerciseStates(t *testing.T, h Harness) {
	t.Run("TerminalIsASink", func(t *testing.T) {
		for _, v := range setStateFamily {
			for _, sink := range []string{board.StateDone, board.StateFailed, board.StateBlocked, board.StateCancelled} {
				for _, to := range []string{board.StateReady, board.StateBacklog, board.StateInProgress} {
					t.Run(v.name+"/"+sink+"To"+to, func(t *testing.T) {
						t.Parallel()
						e := open(t, h)
						e.card("c1", board.StateReady)
						e.setState("c1", sink)
						if v.name == "SetStateOwned" {
							e.claim("c1", markerA)
						}
						e.clock.Advance(time.Second)
						before := e.get("c1")
						seq := e.lastSeq()

						err := v.call(e, "c1", sink, to)
						if !errors.Is(err, board.ErrTerminalStateExit) || !errors.Is(err, board.ErrTransitionRejected) {
							t.Errorf("%s %s → %s: got %v, want ErrTerminalStateExit (which is also ErrTransitionRejected)", v.name, sink, to, err)
						}
						e.unchanged(before, "a refused sink exit")
						e.noEventsSince(seq, "a refused sink exit")
					})
				}
			}
		}
	})

	t.Run("TerminalToTerminalIsARefiling", func(t *testing.T) {
		for _, v := range setStateFamily {
			t.Run(v.name, func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.card("c1", board.StateReady)
				e.setState("c1", board.StateDone)
				if v.name == "SetStateOwned" {
					e.claim("c1", markerA)
				}
				seq := e.lastSeq()
				if err := v.call(e, "c1", board.StateDone, board.StateBlocked); err != nil {
					t.Fatalf("%s done → blocked: %v, want nil (terminal → terminal is allowed)", v.name, err)
				}
				if c := e.get("c1"); c.State != board.StateBlocked {
					t.Errorf("state = %q, want blocked", c.State)
				}
				ev := e.oneEventSince(seq, board.EventState, v.name+" done → blocked")
				if ev.Data.From != board.StateDone || ev.Data.To != board.StateBlocked {
					t.Errorf("state event %q → %q, want done → blocked", ev.Data.From, ev.Data.To)
				}
			})
		}
	})

	t.Run("SetStateFrom", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)

		seq := e.lastSeq()
		changed, err := e.s.SetStateFrom(e.ctx, board.MoveParams{Card: "c1", From: board.StateReady, To: board.StateBacklog, Actor: "bot"})
		if err != nil || !changed.Changed {
			t.Fatalf("SetStateFrom with the right source = %v, %v; want true, nil", changed.Changed, err)
		}
		ev := e.oneEventSince(seq, board.EventState, "SetStateFrom")
		if ev.Data.From != board.StateReady || ev.Data.To != board.StateBacklog {
			t.Errorf("event %q → %q, want ready → backlog", ev.Data.From, ev.Data.To)
		}

		e.clock.Advance(time.Second)
		before := e.get("c1")
		seq = e.lastSeq()
		changed, err = e.s.SetStateFrom(e.ctx, board.MoveParams{Card: "c1", From: board.StateReady, To: board.StateInProgress, Actor: "bot"})
		if err != nil || changed.Changed {
			t.Errorf("SetStateFrom from a drifted source = %v, %v; want false, nil", changed.Changed, err)
		}
		e.unchanged(before, "a drifted SetStateFrom")
		e.noEventsSince(seq, "a drifted SetStateFrom")

		// A terminal source is refused even when the card is not there: the
		// caller declared it wants to leave a sink, which is never allowed
		// outside Reopen.
		changed, err = e.s.SetStateFrom(e.ctx, board.MoveParams{Card: "c1", From: board.StateDone, To: board.StateReady, Actor: "bot"})
		if !errors.Is(err, board.ErrTerminalStateExit) || changed.Changed {
			t.Errorf("SetStateFrom with a drifted terminal source = %v, %v; want false, ErrTerminalStateExit", changed.Changed, err)
		}
		e.unchanged(before, "a refused SetStateFrom")
		e.noEventsSince(seq, "a refused SetStateFrom")
	})

	t.Run("Reopen", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		refused := func(to, what string) {
			t.Helper()
			e.clock.Advance(time.Second)
			before := e.get("c1")
			seq := e.lastSeq()
			err := e.s.Reopen(e.ctx, board.MoveParams{Card: "c1", To: to, Actor: "uid:0"})
			if !errors.Is(err, board.ErrTransitionRejected) && !errors.Is(err, board.ErrInvalidArgument) {
				t.Errorf("%s: got %v, want ErrTransitionRejected or ErrInvalidArgument", what, err)
			}
			e.unchanged(before, what)
			e.noEventsSince(seq, what)
		}
		refused(board.StateBacklog, "Reopen of a card that is not terminal")
		e.setState("c1", board.StateDone)
		refused(board.StateFailed, "Reopen into another terminal state")

		seq := e.lastSeq()
		if err := e.s.Reopen(e.ctx, board.MoveParams{Card: "c1", To: board.StateReady, Actor: "uid:0"}); err != nil {
			t.Fatalf("Reopen done → ready: %v", err)
		}
		if c := e.get("c1"); c.State != board.StateReady {
			t.Errorf("state after Reopen = %q, want ready", c.State)
		}
		ev := e.oneEventSince(seq, board.EventState, "Reopen")
		if ev.Data.From != board.StateDone || ev.Data.To != board.StateReady {
			t.Errorf("Reopen event %q → %q, want done → ready", ev.Data.From, ev.Data.To)
		}
	})

	// Reopen is refused while any card that names this one as a blocker is
	// outside waiting_deps (DESIGN.md#reopen): such a dependent was let go on the
	// strength of the blocker being complete, whichever blocker completed
	// last, whoever moved it, and whether or not it has finished since.
	t.Run("ReopenGuard", func(t *testing.T) {
		t.Run("PromotedDependent", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("a", board.StateReady)
			e.create(board.CreateCardParams{ID: "d", DependsOn: []string{"a"}})
			e.setState("a", board.StateDone)
			if !e.wantPromotedBy("d", "a", "dependent after its blocker completed") {
				t.FailNow()
			}
			e.reopenRefused("a", "Reopen while the dependent it promoted is working")

			// Parked back in waiting_deps, the dependent no longer holds the
			// blocker, and is promoted again when the blocker completes again.
			e.setState("d", board.StateWaitingDeps)
			e.reopen("a", board.StateReady)
			if d := e.get("d"); d.State != board.StateWaitingDeps {
				t.Errorf("dependent after its blocker was reopened: %s, want still waiting_deps", fmtCard(d))
			}
			e.setState("a", board.StateDone)
			e.wantPromotedBy("d", "a", "dependent after its reopened blocker completed again")
		})

		t.Run("EarlierBlocker", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("a", board.StateReady)
			e.card("b", board.StateReady)
			e.create(board.CreateCardParams{ID: "d", DependsOn: []string{"a", "b"}})
			e.setState("a", board.StateDone)
			e.setState("b", board.StateDone)
			if !e.wantPromotedBy("d", "b", "dependent after both blockers completed") {
				t.FailNow()
			}
			e.reopenRefused("a", "Reopen of the earlier blocker of a promoted dependent")
			e.reopenRefused("b", "Reopen of the last blocker of a promoted dependent")

			e.setState("d", board.StateWaitingDeps)
			e.reopen("a", board.StateReady)
			e.reopen("b", board.StateReady)
			e.setState("a", board.StateDone)
			if d := e.get("d"); d.State != board.StateWaitingDeps {
				t.Errorf("dependent with one blocker complete again: %s, want still waiting_deps", fmtCard(d))
			}
			e.setState("b", board.StateDone)
			e.wantPromotedBy("d", "b", "dependent after both blockers completed again")
		})

		t.Run("DependentMovedByHand", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("a", board.StateReady)
			e.create(board.CreateCardParams{ID: "d", DependsOn: []string{"a"}})
			e.setState("d", board.StateBacklog) // an operator lets it go early
			e.setState("a", board.StateDone)
			if d := e.get("d"); d.State != board.StateBacklog || d.PromotedBy != "" {
				t.Fatalf("dependent moved out of waiting_deps by hand: %s, want backlog, never promoted", fmtCard(d))
			}
			e.reopenRefused("a", "Reopen while a dependent moved on by hand is outside waiting_deps")
		})

		t.Run("FinishedDependent", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("a", board.StateReady)
			e.create(board.CreateCardParams{ID: "d", DependsOn: []string{"a"}})
			e.setState("a", board.StateDone)
			e.setState("d", board.StateDone)
			e.reopenRefused("a", "Reopen while a dependent has finished")

			// The way out for a finished dependent is to reopen it into
			// waiting_deps first.
			e.reopen("d", board.StateWaitingDeps)
			e.reopen("a", board.StateReady)
		})

		t.Run("WaitingDependent", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("a", board.StateReady)
			e.card("b", board.StateReady)
			e.create(board.CreateCardParams{ID: "d", DependsOn: []string{"a", "b"}})
			e.setState("a", board.StateDone)
			before := e.get("d")
			e.reopen("a", board.StateReady)
			e.unchanged(before, "reopening a blocker of a dependent still waiting on another")
		})
	})

	t.Run("CompletionPromotesDependents", func(t *testing.T) {
		type completer struct {
			name string
			done func(e *env, id string)
		}
		completers := []completer{
			{"SetState", func(e *env, id string) { e.setState(id, board.StateDone) }},
			{"SetStateFrom", func(e *env, id string) {
				if ch, err := e.s.SetStateFrom(e.ctx, board.MoveParams{Card: id, From: e.get(id).State, To: board.StateDone, Actor: "bot"}); err != nil || !ch.Changed {
					e.t.Fatalf("SetStateFrom → done = %v, %v", ch.Changed, err)
				}
			}},
			{"SetStateOwned", func(e *env, id string) {
				tok := e.claim(id, markerA)
				if ch, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: id, Token: tok, To: board.StateDone, Reason: board.ReasonRunFinished}); err != nil || !ch.Changed {
					e.t.Fatalf("SetStateOwned → done = %v, %v", ch.Changed, err)
				}
			}},
		}
		for _, cp := range completers {
			t.Run(cp.name, func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.card("a", board.StateReady)
				e.card("c", board.StateReady)
				if d := e.create(board.CreateCardParams{ID: "d", DependsOn: []string{"a"}}); d.State != board.StateWaitingDeps {
					t.Fatalf("a card created with an open blocker is in %q, want waiting_deps", d.State)
				}
				e.create(board.CreateCardParams{ID: "b", DependsOn: []string{"a", "c"}})
				seq := e.lastSeq()

				cp.done(e, "a")
				d := e.get("d")
				if d.State != e.b.FirstPool() || d.StateReason != board.ReasonUnblocked || d.PromotedBy != "a" {
					t.Errorf("dependent of a completed blocker: %s, want state %q reason unblocked promoted_by a", fmtCard(d), e.b.FirstPool())
				}
				if b := e.get("b"); b.State != board.StateWaitingDeps || b.PromotedBy != "" {
					t.Errorf("dependent with another open blocker: %s, want still waiting_deps, not promoted", fmtCard(b))
				}
				var promoted []board.Event
				for _, ev := range e.eventsAfter(seq) {
					if ev.Type == board.EventState && ev.Card == "d" {
						promoted = append(promoted, ev)
					}
				}
				if len(promoted) != 1 || promoted[0].Reason != board.ReasonUnblocked || promoted[0].Data.From != board.StateWaitingDeps || promoted[0].Data.To != e.b.FirstPool() {
					t.Errorf("promotion events of d = %s, want one waiting_deps → %s with reason unblocked", fmtEvents(promoted), e.b.FirstPool())
				}

				e.setState("c", board.StateDone)
				if b := e.get("b"); b.State != e.b.FirstPool() || b.PromotedBy != "c" || b.StateReason != board.ReasonUnblocked {
					t.Errorf("dependent whose last blocker completed: %s, want %q promoted by c", fmtCard(b), e.b.FirstPool())
				}
				// A card created once its blockers are complete starts in the pool.
				if f := e.create(board.CreateCardParams{ID: "f", DependsOn: []string{"a", "c"}}); f.State != e.b.FirstPool() {
					t.Errorf("card created with complete blockers is in %q, want %q", f.State, e.b.FirstPool())
				}
			})
		}
	})

	t.Run("NonCompletionSinkDoesNotPromote", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("a", board.StateReady)
		e.create(board.CreateCardParams{ID: "d", DependsOn: []string{"a"}})
		e.setState("a", board.StateFailed)
		if d := e.get("d"); d.State != board.StateWaitingDeps || d.PromotedBy != "" {
			t.Errorf("dependent of a failed blocker: %s, want still waiting_deps", fmtCard(d))
		}
	})

	t.Run("StateMoveClearsGaveUp", func(t *testing.T) {
		for _, v := range setStateFamily {
			t.Run(v.name, func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.card("c1", board.StateReady)
				tok := e.claim("c1", markerA)
				if err := e.s.SetGaveUpOwned(e.ctx, board.SetGaveUpOwnedParams{Card: "c1", Token: tok, GaveUp: &board.GaveUp{Reason: "run gone", At: e.clock.Now()}}); err != nil {
					t.Fatal(err)
				}
				if err := v.call(e, "c1", board.StateReady, board.StateBacklog); err != nil {
					t.Fatalf("%s ready → backlog: %v", v.name, err)
				}
				if c := e.get("c1"); c.GaveUp != nil {
					t.Errorf("gave_up after %s = %s, want cleared by the state move", v.name, fmtGaveUp(c.GaveUp))
				}
			})
		}
	})

	t.Run("OrdinaryWritesNeverTouchClaimFamily", func(t *testing.T) {
		type write struct {
			name string
			do   func(e *env) error
		}
		writes := []write{
			{"SetState", func(e *env) error {
				return e.s.SetState(e.ctx, board.MoveParams{Card: "c1", To: board.StateBacklog, Actor: "uid:0"})
			}},
			{"SetStateFrom", func(e *env) error {
				_, err := e.s.SetStateFrom(e.ctx, board.MoveParams{Card: "c1", From: board.StateReady, To: board.StateBacklog, Actor: "bot"})
				return err
			}},
			{"SetStateToCompletion", func(e *env) error {
				return e.s.SetState(e.ctx, board.MoveParams{Card: "c1", To: board.StateDone, Actor: "uid:0"})
			}},
			{"Reopen", func(e *env) error {
				e.setState("c1", board.StateDone)
				return e.s.Reopen(e.ctx, board.MoveParams{Card: "c1", To: board.StateReady, Actor: "uid:0"})
			}},
			{"AdjustLabels", func(e *env) error {
				_, err := e.s.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "c1", Add: []string{"x"}, Actor: "uid:0"})
				return err
			}},
			{"SetLabels", func(e *env) error {
				_, err := e.s.SetLabels(e.ctx, board.SetLabelsParams{Card: "c1", Labels: []string{"y"}, Actor: "uid:0"})
				return err
			}},
			{"CreateRunUpdateRun", func(e *env) error {
				c := e.get("c1")
				if _, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: c.Token(), Run: board.Run{ID: "r1", Card: "c1", Status: board.RunRunning}}); err != nil {
					return err
				}
				st := board.RunFinished
				_, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: c.Token(), Status: &st})
				return err
			}},
			{"CreateDependent", func(e *env) error {
				_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "dep", DependsOn: []string{"c1"}})
				return err
			}},
		}
		for _, w := range writes {
			t.Run(w.name, func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.card("c1", board.StateReady)
				e.claim("c1", markerA)
				e.clock.Advance(time.Second)
				before := familyOf(e.get("c1"))
				if err := w.do(e); err != nil {
					t.Fatalf("%s: %v", w.name, err)
				}
				if got := familyOf(e.get("c1")); !got.equal(before) {
					t.Errorf("%s changed the claim family: got %s, want %s", w.name, got, before)
				}
			})
		}
	})
}

// wantPromotedBy checks that id sits in the first pool state, promoted
// there by blocker; it reports whether it does.
func (e *env) wantPromotedBy(id, blocker, what string) bool {
	e.t.Helper()
	d := e.get(id)
	if d.State != e.b.FirstPool() || d.PromotedBy != blocker {
		e.t.Errorf("%s: %s, want %q promoted by %s", what, fmtCard(d), e.b.FirstPool(), blocker)
		return false
	}
	return true
}
