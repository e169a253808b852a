package boardtest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

func exerciseLabels(t *testing.T, h Harness) {
	t.Run("AdjustLabelsIsAtomicUnderConcurrency", func(t *testing.T) {
		// DESIGN.md#label-sweeps: the relative edit is one critical section, so no
		// concurrent caller's add is lost.
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		seq := e.lastSeq()
		const callers = 16
		var want []string
		for i := range callers {
			want = append(want, fmt.Sprintf("label-%02d", i))
		}
		start := make(chan struct{})
		errs := make(chan error, callers)
		var wg sync.WaitGroup
		for _, l := range want {
			wg.Go(func() {
				<-start
				_, err := e.s.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "c1", Add: []string{l}, Actor: "bot"})
				errs <- err
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("concurrent AdjustLabels: %v", err)
			}
		}
		got := slices.Clone(e.get("c1").Labels)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("labels after %d concurrent adds = %q, want %q", callers, got, want)
		}
		var n int
		for _, ev := range e.eventsAfter(seq) {
			if ev.Type == board.EventLabels {
				n++
			}
		}
		if n != callers {
			t.Errorf("labels events = %d, want one per add (%d)", n, callers)
		}
	})

	t.Run("AdjustLabels", func(t *testing.T) {
		cases := []struct {
			name        string
			start       []string
			add, remove []string
			want        []string
			added       []string
			removed     []string
		}{
			{name: "TrimsAndDeduplicates", start: nil, add: []string{" a ", "a", "b", "", "  "}, want: []string{"a", "b"}, added: []string{"a", "b"}},
			{name: "AddThenRemoveKeepsOrder", start: []string{"a", "b"}, add: []string{"c"}, remove: []string{"a"}, want: []string{"b", "c"}, added: []string{"c"}, removed: []string{"a"}},
			{name: "RemovesWin", start: []string{"a"}, add: []string{"x", "a"}, remove: []string{"x"}, want: []string{"a"}},
			{name: "AddExistingIsNoOp", start: []string{"a", "b"}, add: []string{"b", " a"}, want: []string{"a", "b"}},
			{name: "RemoveMissingIsNoOp", start: []string{"a"}, remove: []string{"zz"}, want: []string{"a"}},
			{name: "EmptyChangeIsNoOp", start: []string{"a"}, want: []string{"a"}},
			{name: "RemoveAll", start: []string{"a", "b"}, remove: []string{"b", "a"}, want: []string{}, removed: []string{"a", "b"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.create(board.CreateCardParams{ID: "c1", State: board.StateReady, Labels: tc.start})
				e.clock.Advance(time.Second)
				before := e.get("c1")
				seq := e.lastSeq()

				got, err := e.s.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "c1", Add: tc.add, Remove: tc.remove, Actor: "bot"})
				if err != nil {
					t.Fatalf("AdjustLabels: %v", err)
				}
				if !sameLabels(got.Labels, tc.want) {
					t.Errorf("returned labels = %q, want %q", got.Labels, tc.want)
				}
				if stored := e.get("c1").Labels; !sameLabels(stored, tc.want) {
					t.Errorf("stored labels = %q, want %q", stored, tc.want)
				}
				if len(tc.added) == 0 && len(tc.removed) == 0 {
					// A no-op writes nothing at all.
					e.noEventsSince(seq, "a no-op AdjustLabels")
					e.unchanged(before, "a no-op AdjustLabels")
					return
				}
				ev := e.oneEventSince(seq, board.EventLabels, "AdjustLabels")
				if !sameLabels(ev.Data.Added, tc.added) || !sameLabels(ev.Data.Removed, tc.removed) {
					t.Errorf("labels event added %q removed %q, want added %q removed %q", ev.Data.Added, ev.Data.Removed, tc.added, tc.removed)
				}
			})
		}
	})

	t.Run("SetLabelsIsAbsolute", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.create(board.CreateCardParams{ID: "c1", State: board.StateReady, Labels: []string{"a", "b"}})
		seq := e.lastSeq()
		got, err := e.s.SetLabels(e.ctx, board.SetLabelsParams{Card: "c1", Labels: []string{"c", " c ", "d"}, Actor: "bot"})
		if err != nil {
			t.Fatalf("SetLabels: %v", err)
		}
		want := []string{"c", "d"}
		if !sameLabels(got.Labels, want) || !sameLabels(e.get("c1").Labels, want) {
			t.Errorf("labels after SetLabels = %q (stored %q), want %q", got.Labels, e.get("c1").Labels, want)
		}
		e.oneEventSince(seq, board.EventLabels, "SetLabels")

		got, err = e.s.SetLabels(e.ctx, board.SetLabelsParams{Card: "c1", Labels: nil, Actor: "bot"})
		if err != nil || len(got.Labels) != 0 || len(e.get("c1").Labels) != 0 {
			t.Errorf("SetLabels(nil) = %q, %v; want no labels", got.Labels, err)
		}
	})

	t.Run("CreateCardNormalizesLabels", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		c := e.create(board.CreateCardParams{ID: "c1", Labels: []string{" x", "x ", "y", ""}})
		if want := []string{"x", "y"}; !sameLabels(c.Labels, want) || !sameLabels(e.get("c1").Labels, want) {
			t.Errorf("labels of a new card = %q, want %q", c.Labels, want)
		}
	})
}

// sameLabels compares label lists in order, a nil list equal to an empty one.
func sameLabels(got, want []string) bool { return slices.Equal(got, want) }
