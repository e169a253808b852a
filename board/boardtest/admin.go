package boardtest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/boardadmin"
)

// adminOf returns the store as the board-administration walkers see it,
// and a walker over it whose BeforeWrite seam is hook.
func (e *env) admin(hook func(card string, attempt int)) (boardadmin.Store, *boardadmin.Admin) {
	e.t.Helper()
	s := e.s
	a, err := boardadmin.New(boardadmin.Config{Store: s, Actor: "uid:0", BeforeWrite: hook})
	if err != nil {
		e.t.Fatalf("boardadmin.New: %v", err)
	}
	return s, a
}

// sweepEvents checks that every event logged after seq is a machine-reason
// event of the wanted type and reason with a blank actor (so it fires no
// effect), and returns them by card.
func (e *env) sweepEvents(seq int64, typ board.EventType, reason board.Reason) map[string][]board.Event {
	e.t.Helper()
	by := map[string][]board.Event{}
	for _, ev := range e.eventsAfter(seq) {
		if ev.Type != typ || ev.Reason != reason || ev.Actor != "" || ev.FiresEffects() {
			e.t.Errorf("sweep logged %s, want only %s events with reason %s, no actor, firing no effect", fmtEvents([]board.Event{ev}), typ, reason)
		}
		by[ev.Card] = append(by[ev.Card], ev)
	}
	return by
}

func wantReport(t *testing.T, got board.SweepReport, changed []string, unchanged int, contended []string) {
	t.Helper()
	if !slices.Equal(got.Changed, changed) || got.Unchanged != unchanged || !slices.Equal(got.Contended, contended) {
		t.Errorf("report %+v: got changed %q unchanged %d contended %q, want changed %q unchanged %d contended %q",
			got, got.Changed, got.Unchanged, got.Contended, changed, unchanged, contended)
	}
}

// ExerciseAdmin runs the board-administration checks (DESIGN.md#label-sweeps): the
// stored board definition, the label compare-and-set, and the state and
// label sweeps of package boardadmin on top of them.
func ExerciseAdmin(t *testing.T, h Harness) {
	t.Run("BoardDefinition", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		s, _ := e.admin(nil)
		stored, err := s.LoadBoard(e.ctx)
		if err != nil {
			t.Fatalf("LoadBoard: %v", err)
		}
		if d := e.b.Diff(stored); len(d) != 0 {
			t.Fatalf("stored board differs from the one the store was seeded with: %q", d)
		}
		next := stored.Clone()
		next.States = append(next.States, board.State{Name: "parked"})

		wrong := stored.Clone()
		wrong.States = wrong.States[1:]
		set, err := s.SetBoard(e.ctx, board.SetBoardParams{Expect: wrong, Next: next})
		if err != nil || set.Changed || !set.Board.Equal(stored) {
			t.Errorf("SetBoard with a stale expectation = %v, %v, %v; want the stored board, false, nil", set.Board, set.Changed, err)
		}
		bad := stored.Clone()
		bad.States = append(bad.States, board.State{Name: board.StateBacklog})
		if _, err := s.SetBoard(e.ctx, board.SetBoardParams{Expect: stored, Next: bad}); !errors.Is(err, board.ErrInvalidArgument) {
			t.Errorf("SetBoard with a duplicate state: got %v, want ErrInvalidArgument", err)
		}
		set, err = s.SetBoard(e.ctx, board.SetBoardParams{Expect: stored, Next: next})
		if err != nil || !set.Changed || !set.Board.Equal(next) {
			t.Fatalf("SetBoard = %v, %v, %v; want the new board, true, nil", set.Board, set.Changed, err)
		}
		if again, err := s.LoadBoard(e.ctx); err != nil || !again.Equal(next) {
			t.Errorf("LoadBoard after SetBoard = %v, %v; want %v", again, err, next)
		}
		if _, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "p1", State: "parked"}); err != nil {
			t.Errorf("CreateCard in a state added by SetBoard: %v", err)
		}
	})

	t.Run("SetLabelsFrom", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		s, _ := e.admin(nil)
		e.create(board.CreateCardParams{ID: "c1", State: board.StateReady, Labels: []string{"a", "b"}})
		before := e.get("c1")
		seq := e.lastSeq()

		set, err := s.SetLabelsFrom(e.ctx, board.SetLabelsFromParams{Card: "c1", Expect: []string{"b", "a"}, Labels: []string{"z"}, Reason: board.ReasonFieldRename, Actor: "uid:0"})
		if err != nil || set.Changed || !sameLabels(set.Card.Labels, []string{"a", "b"}) {
			t.Errorf("SetLabelsFrom with a stale expectation = %q, %v, %v; want the current labels, false, nil", set.Card.Labels, set.Changed, err)
		}
		e.unchanged(before, "a missed SetLabelsFrom")
		e.noEventsSince(seq, "a missed SetLabelsFrom")

		set, err = s.SetLabelsFrom(e.ctx, board.SetLabelsFromParams{Card: "c1", Expect: []string{"a", "b"}, Labels: []string{"a", "c"}, Reason: board.ReasonFieldRename, Actor: "uid:0"})
		if err != nil || !set.Changed || !sameLabels(set.Card.Labels, []string{"a", "c"}) {
			t.Fatalf("SetLabelsFrom = %q, %v, %v; want [a c], true, nil", set.Card.Labels, set.Changed, err)
		}
		ev := e.oneEventSince(seq, board.EventLabels, "SetLabelsFrom")
		if ev.Reason != board.ReasonFieldRename || ev.Actor != "" || !sameLabels(ev.Data.Added, []string{"c"}) || !sameLabels(ev.Data.Removed, []string{"b"}) {
			t.Errorf("labels event %s, want reason field_rename, blank actor, added [c] removed [b]", fmtEvents([]board.Event{ev}))
		}
		if familyOf(e.get("c1")) != familyOf(before) {
			t.Errorf("SetLabelsFrom touched the claim family")
		}
		if _, err := s.SetLabelsFrom(e.ctx, board.SetLabelsFromParams{Card: "nope", Labels: []string{"x"}}); !errors.Is(err, board.ErrNotFound) {
			t.Errorf("SetLabelsFrom on an unknown card: got %v, want ErrNotFound", err)
		}
	})

	t.Run("LabelRenameKeepsConcurrentAdjust", func(t *testing.T) {
		// DESIGN.md#label-sweeps: the sweep's write is a compare-and-set on the labels
		// it read, so a relative edit landing mid-walk is never lost.
		t.Parallel()
		e := open(t, h)
		e.create(board.CreateCardParams{ID: "c1", Labels: []string{"old", "x"}})
		e.create(board.CreateCardParams{ID: "c2", Labels: []string{"old"}})
		e.create(board.CreateCardParams{ID: "c3", Labels: []string{"y"}})
		_, a := e.admin(func(card string, attempt int) {
			if card == "c1" && attempt == 1 {
				if _, err := e.s.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "c1", Add: []string{"fresh"}, Actor: "bot"}); err != nil {
					t.Errorf("concurrent AdjustLabels: %v", err)
				}
			}
		})
		seq := e.lastSeq()
		rep, err := a.RenameLabel(e.ctx, "old", "new")
		if err != nil {
			t.Fatalf("RenameLabel: %v", err)
		}
		wantReport(t, rep, []string{"c1", "c2"}, 1, nil)
		for id, want := range map[string][]string{"c1": {"new", "x", "fresh"}, "c2": {"new"}, "c3": {"y"}} {
			if got := e.get(id).Labels; !sameLabels(got, want) {
				t.Errorf("labels of %s after the rename = %q, want %q", id, got, want)
			}
		}
		var sweep int
		for _, ev := range e.eventsAfter(seq) {
			if ev.Reason == board.ReasonFieldRename {
				sweep++
				if ev.Actor != "" || ev.FiresEffects() {
					t.Errorf("sweep event %s carries an actor or fires effects", fmtEvents([]board.Event{ev}))
				}
			}
		}
		if sweep != 2 {
			t.Errorf("field_rename events = %d, want one per changed card (2)", sweep)
		}
	})

	t.Run("OneShotConsumedDuringRenameStaysConsumed", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.create(board.CreateCardParams{ID: "c1", Labels: []string{"once:go", "old"}})
		_, a := e.admin(func(card string, attempt int) {
			if card == "c1" && attempt == 1 {
				// The effect layer consumes the one-shot between the
				// sweep's read and its write.
				if _, err := e.s.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "c1", Remove: []string{"once:go"}, Actor: "effects:agent-1-303"}); err != nil {
					t.Errorf("consume: %v", err)
				}
			}
		})
		if _, err := a.RenameLabel(e.ctx, "old", "new"); err != nil {
			t.Fatalf("RenameLabel: %v", err)
		}
		if got := e.get("c1").Labels; !sameLabels(got, []string{"new"}) {
			t.Errorf("labels after a rename that raced a consumption = %q, want [new] (the one-shot stays consumed)", got)
		}
	})

	t.Run("LabelSweeps", func(t *testing.T) {
		cases := []struct {
			name string
			run  func(a *boardadmin.Admin, e *env) (board.SweepReport, error)
			want map[string][]string
			rsn  board.Reason
		}{
			{"Rename", func(a *boardadmin.Admin, e *env) (board.SweepReport, error) { return a.RenameLabel(e.ctx, "a", "c") },
				map[string][]string{"k1": {"c", "x", "b"}, "k2": {"c", "x"}, "k3": {"x"}}, board.ReasonFieldRename},
			{"Merge", func(a *boardadmin.Admin, e *env) (board.SweepReport, error) {
				return a.MergeLabels(e.ctx, []string{"a", "b"}, "m")
			}, map[string][]string{"k1": {"m", "x"}, "k2": {"c", "m", "x"}, "k3": {"x"}}, board.ReasonFieldRename},
			{"Delete", func(a *boardadmin.Admin, e *env) (board.SweepReport, error) { return a.DeleteLabel(e.ctx, "x") },
				map[string][]string{"k1": {"a", "b"}, "k2": {"c", "a"}, "k3": {}}, board.ReasonFieldDelete},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.create(board.CreateCardParams{ID: "k1", Labels: []string{"a", "x", "b"}})
				e.create(board.CreateCardParams{ID: "k2", Labels: []string{"c", "a", "x"}})
				e.create(board.CreateCardParams{ID: "k3", Labels: []string{"x"}})
				_, a := e.admin(nil)
				seq := e.lastSeq()
				rep, err := tc.run(a, e)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				var changed []string
				for _, id := range []string{"k1", "k2", "k3"} {
					got := e.get(id).Labels
					if !sameLabels(got, tc.want[id]) {
						t.Errorf("labels of %s = %q, want %q", id, got, tc.want[id])
					}
					if !sameLabels(got, map[string][]string{"k1": {"a", "x", "b"}, "k2": {"c", "a", "x"}, "k3": {"x"}}[id]) {
						changed = append(changed, id)
					}
				}
				wantReport(t, rep, changed, 3-len(changed), nil)
				if by := e.sweepEvents(seq, board.EventLabels, tc.rsn); len(by) != len(changed) {
					t.Errorf("cards with a sweep event = %d, want %d", len(by), len(changed))
				}
			})
		}
	})

	t.Run("HotCardIsReportedWhileTheWalkCompletes", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		for _, id := range []string{"c1", "c2", "c3"} {
			e.create(board.CreateCardParams{ID: id, Labels: []string{"old"}})
		}
		var hot int
		_, a := e.admin(func(card string, attempt int) {
			if card != "c2" {
				return
			}
			hot++
			// Every attempt on c2 loses to another writer.
			if _, err := e.s.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "c2", Add: []string{fmt.Sprintf("hot-%d", attempt)}, Actor: "bot"}); err != nil {
				t.Errorf("contending AdjustLabels: %v", err)
			}
		})
		rep, err := a.RenameLabel(e.ctx, "old", "new")
		if err != nil {
			t.Fatalf("RenameLabel with one hot card: %v, want the walk to complete", err)
		}
		wantReport(t, rep, []string{"c1", "c3"}, 0, []string{"c2"})
		if hot != boardadmin.DefaultAttempts {
			t.Errorf("attempts on the hot card = %d, want %d", hot, boardadmin.DefaultAttempts)
		}
		if got := e.get("c2").Labels; !slices.Contains(got, "old") || slices.Contains(got, "new") {
			t.Errorf("labels of the hot card = %q, want it left as the contenders made it", got)
		}
		for _, id := range []string{"c1", "c3"} {
			if got := e.get(id).Labels; !sameLabels(got, []string{"new"}) {
				t.Errorf("labels of %s = %q, want [new]", id, got)
			}
		}
	})

	t.Run("StateRenameEmitsOneMachineEventPerCard", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		s, _ := e.admin(nil)
		e.card("r1", board.StateReady)
		e.card("r2", board.StateReady)
		e.card("b1", board.StateBacklog)
		e.claim("r2", markerA)
		// A dependent left waiting although its blocker is done: a move
		// into the completion column under machine provenance must not
		// promote it (a rename completes nothing).
		e.card("a", board.StateReady)
		e.create(board.CreateCardParams{ID: "d", DependsOn: []string{"a"}})
		e.setState("a", board.StateDone)
		e.setState("d", board.StateWaitingDeps)
		claimed := familyOf(e.get("r2"))

		var refused error
		_, a := e.admin(func(card string, attempt int) {
			if card == "r1" && attempt == 1 {
				// While the column is retiring, nothing may enter it.
				_, refused = e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "late", State: board.StateReady})
			}
		})
		seq := e.lastSeq()
		rep, err := a.RenameState(e.ctx, board.StateReady, "queued")
		if err != nil {
			t.Fatalf("RenameState: %v", err)
		}
		if !errors.Is(refused, board.ErrInvalidArgument) {
			t.Errorf("CreateCard into the retiring state: got %v, want ErrInvalidArgument", refused)
		}
		wantReport(t, rep, []string{"r1", "r2"}, 0, nil)
		by := e.sweepEvents(seq, board.EventState, board.ReasonStateRename)
		for _, id := range []string{"r1", "r2"} {
			if evs := by[id]; len(evs) != 1 || evs[0].Data.From != board.StateReady || evs[0].Data.To != "queued" {
				t.Errorf("events of %s = %s, want exactly one ready → queued", id, fmtEvents(evs))
			}
			if c := e.get(id); c.State != "queued" || c.StateReason != board.ReasonStateRename {
				t.Errorf("card %s after the rename: %s, want queued with reason state_rename", id, fmtCard(c))
			}
		}
		if len(by) != 2 {
			t.Errorf("cards with events = %d, want only the two cards of the renamed column", len(by))
		}
		if got := familyOf(e.get("r2")); !got.equal(claimed) {
			t.Errorf("the rename touched a claim: got %s, want %s", got, claimed)
		}
		stored, err := s.LoadBoard(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := e.b.Clone()
		for i := range want.States {
			if want.States[i].Name == board.StateReady {
				want.States[i].Name = "queued"
			}
		}
		if d := want.Diff(stored); len(d) != 0 {
			t.Errorf("stored board after the rename: %q", d)
		}
		if rep.Board == nil || !rep.Board.Equal(stored) {
			t.Errorf("report board = %v, want the stored %v", rep.Board, stored)
		}

		// The completion column: its cards move, nobody is promoted.
		seq = e.lastSeq()
		if _, err := a.RenameState(e.ctx, board.StateDone, "finished"); err != nil {
			t.Fatalf("RenameState done: %v", err)
		}
		if d := e.get("d"); d.State != board.StateWaitingDeps {
			t.Errorf("dependent after its blocker's column was renamed: %s, want still waiting (a rename promotes nobody)", fmtCard(d))
		}
		if by := e.sweepEvents(seq, board.EventState, board.ReasonStateRename); len(by) != 1 || len(by["a"]) != 1 {
			t.Errorf("events of the done rename by card = %v, want one for a", by)
		}
	})

	t.Run("BulkReopenWithPromotedDependentIsRefused", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		s, a := e.admin(nil)
		e.card("a", board.StateReady)
		e.create(board.CreateCardParams{ID: "b", DependsOn: []string{"a"}})
		e.setState("a", board.StateDone) // promotes b
		e.setState("a", board.StateCancelled)
		e.card("c", board.StateReady)
		e.setState("c", board.StateCancelled)
		e.deleteCancelledRefused(s, a, "a bulk reopen while a promoted dependent is outside waiting_deps", "a", "b", "c")

		// A dependent that has finished is still outside waiting_deps, and
		// still holds its blocker.
		e.setState("b", board.StateDone)
		e.deleteCancelledRefused(s, a, "a bulk reopen while a finished dependent is outside waiting_deps", "a", "b", "c")

		// Once the dependent is back in waiting_deps the reopen goes through.
		if err := e.s.Reopen(e.ctx, board.MoveParams{Card: "b", To: board.StateWaitingDeps, Actor: "uid:0"}); err != nil {
			t.Fatalf("Reopen the dependent into waiting_deps: %v", err)
		}
		seq := e.lastSeq()
		rep, err := a.DeleteState(e.ctx, board.StateCancelled, board.StateReady)
		if err != nil {
			t.Fatalf("DeleteState after the dependent went back to waiting_deps: %v", err)
		}
		wantReport(t, rep, []string{"a", "c"}, 0, nil)
		by := e.sweepEvents(seq, board.EventState, board.ReasonStateDelete)
		for _, id := range []string{"a", "c"} {
			if c := e.get(id); c.State != board.StateReady || len(by[id]) != 1 {
				t.Errorf("card %s after the delete: %s with events %s, want ready and one state_delete event", id, fmtCard(c), fmtEvents(by[id]))
			}
		}
		if now, _ := s.LoadBoard(e.ctx); now.Has(board.StateCancelled) {
			t.Errorf("board after deleting cancelled still has it: %v", now)
		}
	})

	// The bulk reopen follows the single-card rule to the letter: the
	// dependent was promoted when its other blocker completed, not this one.
	t.Run("BulkReopenOfAnEarlierBlockerIsRefused", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		s, a := e.admin(nil)
		e.card("a", board.StateReady)
		e.card("x", board.StateReady)
		e.create(board.CreateCardParams{ID: "d", DependsOn: []string{"a", "x"}})
		e.setState("a", board.StateDone)
		e.setState("x", board.StateDone) // promotes d, promoted_by x
		if d := e.get("d"); d.State != e.b.FirstPool() || d.PromotedBy != "x" {
			t.Fatalf("dependent after both blockers completed: %s, want %q promoted by x", fmtCard(d), e.b.FirstPool())
		}
		e.setState("a", board.StateCancelled)
		e.card("c", board.StateReady)
		e.setState("c", board.StateCancelled)
		e.deleteCancelledRefused(s, a, "a bulk reopen of the earlier blocker of a promoted dependent", "a", "c", "d")
	})

	t.Run("StateSweepRefusals", func(t *testing.T) {
		cases := []struct {
			name string
			run  func(a *boardadmin.Admin, e *env) error
		}{
			{"DeleteIntoCompletion", func(a *boardadmin.Admin, e *env) error {
				_, err := a.DeleteState(e.ctx, board.StateBacklog, board.StateDone)
				return err
			}},
			{"DeleteTheRunningColumn", func(a *boardadmin.Admin, e *env) error {
				_, err := a.DeleteState(e.ctx, board.StateInProgress, board.StateBacklog)
				return err
			}},
			{"RenameOntoAnExistingState", func(a *boardadmin.Admin, e *env) error {
				_, err := a.RenameState(e.ctx, board.StateBacklog, board.StateReady)
				return err
			}},
			{"RenameAnUnknownState", func(a *boardadmin.Admin, e *env) error {
				_, err := a.RenameState(e.ctx, "nope", "other")
				return err
			}},
			{"DeleteIntoAnUnknownState", func(a *boardadmin.Admin, e *env) error {
				_, err := a.DeleteState(e.ctx, board.StateBacklog, "nope")
				return err
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				s, a := e.admin(nil)
				e.card("k1", board.StateBacklog)
				e.card("k2", board.StateInProgress)
				before, _ := s.LoadBoard(e.ctx)
				b1, b2 := e.get("k1"), e.get("k2")
				seq := e.lastSeq()
				wantErr(t, tc.run(a, e), board.ErrInvalidArgument, tc.name)
				e.unchanged(b1, tc.name)
				e.unchanged(b2, tc.name)
				e.noEventsSince(seq, tc.name)
				if now, err := s.LoadBoard(e.ctx); err != nil || !now.Equal(before) {
					t.Errorf("board after a refused %s = %v, %v; want it unchanged", tc.name, now, err)
				}
			})
		}
	})
}

// deleteCancelledRefused deletes the cancelled state into ready and wants
// the sweep refused before it wrote anything: the board and the named
// cards unchanged, no event.
func (e *env) deleteCancelledRefused(s boardadmin.Store, a *boardadmin.Admin, what string, ids ...string) {
	e.t.Helper()
	boardBefore, err := s.LoadBoard(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	before := make([]board.Card, len(ids))
	for i, id := range ids {
		before[i] = e.get(id)
	}
	seq := e.lastSeq()
	_, err = a.DeleteState(e.ctx, board.StateCancelled, board.StateReady)
	wantErr(e.t, err, board.ErrTransitionRejected, what)
	for _, c := range before {
		e.unchanged(c, "a refused bulk reopen")
	}
	e.noEventsSince(seq, "a refused bulk reopen")
	if now, err := s.LoadBoard(e.ctx); err != nil || !now.Equal(boardBefore) {
		e.t.Errorf("board after a refused bulk reopen = %v, %v; want it unchanged", now, err)
	}
}
