package boardadmin_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/boardadmin"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// The behaviour shared by both twins is pinned by the conformance suite
// (boardtest.Exercise). These tests cover the walker's own failure
// handling, injecting store failures through a thin wrapper around a real
// bbolt store: a card vanishing mid-walk, a failing write, a hung write,
// and a state move that never lands.

func openStore(t *testing.T) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// faulty overrides chosen verbs for chosen cards.
type faulty struct {
	boardadmin.Store
	setLabelsFrom func(ctx context.Context, l board.SetLabelsFromParams) (board.Card, bool, error, bool)
	setStateFrom  func(ctx context.Context, m board.MoveParams) (bool, error, bool)
}

func (f faulty) SetLabelsFrom(ctx context.Context, l board.SetLabelsFromParams) (board.SetLabelsFromResult, error) {
	if f.setLabelsFrom != nil {
		if c, ch, err, ok := f.setLabelsFrom(ctx, l); ok {
			return board.SetLabelsFromResult{Card: c, Changed: ch}, err
		}
	}
	return f.Store.SetLabelsFrom(ctx, l)
}

func (f faulty) SetStateFrom(ctx context.Context, m board.MoveParams) (board.MoveResult, error) {
	if f.setStateFrom != nil {
		if ch, err, ok := f.setStateFrom(ctx, m); ok {
			return board.MoveResult{Changed: ch}, err
		}
	}
	return f.Store.SetStateFrom(ctx, m)
}

func seed(t *testing.T, s board.Store, state string, labels []string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := s.CreateCard(t.Context(), board.CreateCardParams{ID: id, State: state, Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
}

func newAdmin(t *testing.T, cfg boardadmin.Config) *boardadmin.Admin {
	t.Helper()
	a, err := boardadmin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	cases := []struct {
		name string
		cfg  boardadmin.Config
	}{
		{"NoStore", boardadmin.Config{}},
		{"NegativeAttempts", boardadmin.Config{Store: s, Attempts: -1}},
		{"NegativeTimeout", boardadmin.Config{Store: s, WriteTimeout: -time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := boardadmin.New(tc.cfg); !errors.Is(err, board.ErrInvalidArgument) {
				t.Errorf("New(%+v) = %v, want ErrInvalidArgument", tc.cfg, err)
			}
		})
	}
}

func TestCardGoneMidWalkIsBenign(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	seed(t, s, "", []string{"old"}, "c1", "c2", "c3")
	f := faulty{Store: s, setLabelsFrom: func(_ context.Context, l board.SetLabelsFromParams) (board.Card, bool, error, bool) {
		if l.Card == "c2" {
			return board.Card{}, false, board.NotFound("card", l.Card), true
		}
		return board.Card{}, false, nil, false
	}}
	rep, err := newAdmin(t, boardadmin.Config{Store: f}).RenameLabel(t.Context(), "old", "new")
	if err != nil {
		t.Fatalf("RenameLabel with a card gone mid-walk: %v, want nil", err)
	}
	if !slices.Equal(rep.Changed, []string{"c1", "c3"}) || !slices.Equal(rep.Gone, []string{"c2"}) || len(rep.Contended) != 0 {
		t.Errorf("report %+v, want changed [c1 c3], gone [c2]", rep)
	}
}

func TestErrorNamesOperationAndProgress(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	seed(t, s, "", []string{"old"}, "c1", "c2", "c3")
	broken := errors.New("disk on fire")
	f := faulty{Store: s, setLabelsFrom: func(_ context.Context, l board.SetLabelsFromParams) (board.Card, bool, error, bool) {
		if l.Card == "c2" {
			return board.Card{}, false, broken, true
		}
		return board.Card{}, false, nil, false
	}}
	rep, err := newAdmin(t, boardadmin.Config{Store: f}).RenameLabel(t.Context(), "old", "new")
	if !errors.Is(err, broken) {
		t.Fatalf("got %v, want the store's error", err)
	}
	for _, want := range []string{`label rename "old" → "new"`, `card "c2"`, "(2 of 3)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if !slices.Equal(rep.Changed, []string{"c1"}) {
		t.Errorf("report changed %q, want [c1] (the walk got that far)", rep.Changed)
	}
}

func TestEachWriteHasItsOwnBudget(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	seed(t, s, "", []string{"old"}, "c1", "c2")
	var deadlines int
	f := faulty{Store: s, setLabelsFrom: func(ctx context.Context, l board.SetLabelsFromParams) (board.Card, bool, error, bool) {
		if _, ok := ctx.Deadline(); ok {
			deadlines++
		}
		if l.Card == "c2" {
			<-ctx.Done() // a hung store: only the write's own budget ends it
			return board.Card{}, false, ctx.Err(), true
		}
		return board.Card{}, false, nil, false
	}}
	a := newAdmin(t, boardadmin.Config{Store: f, WriteTimeout: 50 * time.Millisecond})
	_, err := a.RenameLabel(t.Context(), "old", "new")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "(2 of 2)") {
		t.Errorf("got %v, want the hung write's deadline, naming card 2 of 2", err)
	}
	if deadlines != 2 {
		t.Errorf("writes carrying a deadline = %d, want every write (2)", deadlines)
	}
	if err := t.Context().Err(); err != nil {
		t.Errorf("the caller's context ended: %v", err)
	}
}

func TestStateLeftRetiringIsFinishedByARerun(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	seed(t, s, board.StateBacklog, nil, "c1", "c2")
	stuck := faulty{Store: s, setStateFrom: func(_ context.Context, m board.MoveParams) (bool, error, bool) {
		if m.Card == "c2" {
			return false, nil, true // never lands, card stays in the source
		}
		return false, nil, false
	}}
	rep, err := newAdmin(t, boardadmin.Config{Store: stuck}).RenameState(t.Context(), board.StateBacklog, "icebox")
	if err != nil {
		t.Fatalf("RenameState with a stuck card: %v", err)
	}
	if !slices.Equal(rep.Changed, []string{"c1"}) || !slices.Equal(rep.Contended, []string{"c2"}) || len(rep.Notes) == 0 {
		t.Errorf("report %+v, want changed [c1], contended [c2] and a note", rep)
	}
	b := mustLoadBoard(t, s)
	if st, ok := b.State(board.StateBacklog); !ok || st.RetiringInto != "icebox" || !b.Has("icebox") {
		t.Fatalf("board after an unfinished rename = %s, want backlog retiring into icebox", b)
	}
	if _, err := s.CreateCard(t.Context(), board.CreateCardParams{ID: "late", State: board.StateBacklog}); !errors.Is(err, board.ErrInvalidArgument) {
		t.Errorf("CreateCard into a retiring state: got %v, want ErrInvalidArgument", err)
	}

	rep, err = newAdmin(t, boardadmin.Config{Store: s}).RenameState(t.Context(), board.StateBacklog, "icebox")
	if err != nil {
		t.Fatalf("re-run: %v", err)
	}
	if !slices.Equal(rep.Changed, []string{"c2"}) || len(rep.Contended) != 0 {
		t.Errorf("re-run report %+v, want changed [c2]", rep)
	}
	if b := mustLoadBoard(t, s); b.Has(board.StateBacklog) || !b.Has("icebox") {
		t.Errorf("board after the re-run = %s, want icebox in backlog's place", b)
	}
	if _, err := newAdmin(t, boardadmin.Config{Store: s}).RenameState(t.Context(), board.StateBacklog, "other"); !errors.Is(err, board.ErrInvalidArgument) {
		t.Errorf("renaming a state that no longer exists: got %v, want ErrInvalidArgument", err)
	}
}

func mustLoadBoard(t *testing.T, s board.Store) board.Board {
	t.Helper()
	b, err := s.LoadBoard(t.Context())
	if err != nil {
		t.Fatalf("LoadBoard: %v", err)
	}
	return b
}

// TestDryRunWritesNothing: with DryRun every operation decides as it
// would and writes nothing — no card, no board change, no event — and its
// report lists the cards it would change; Progress hears every card.
func TestDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	seed(t, s, board.StateBacklog, []string{"old", "x"}, "c1", "c2")
	seed(t, s, "", []string{"x"}, "c3")
	head := func() int64 {
		evs, err := s.Events(t.Context(), board.EventsParams{After: 0, Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		return evs[len(evs)-1].Seq
	}
	seq := head()
	b0, err := s.LoadBoard(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var progress []string
	a := newAdmin(t, boardadmin.Config{Store: s, DryRun: true, Progress: func(done, total int) {
		progress = append(progress, fmt.Sprintf("%d/%d", done, total))
	}})
	for _, tc := range []struct {
		name     string
		op       func() (board.SweepReport, error)
		changed  []string
		progress []string
	}{
		{"RenameLabel", func() (board.SweepReport, error) { return a.RenameLabel(t.Context(), "old", "new") }, []string{"c1", "c2"}, []string{"1/3", "2/3", "3/3"}},
		{"MergeLabels", func() (board.SweepReport, error) { return a.MergeLabels(t.Context(), []string{"x"}, "y") }, []string{"c1", "c2", "c3"}, []string{"1/3", "2/3", "3/3"}},
		{"DeleteLabel", func() (board.SweepReport, error) { return a.DeleteLabel(t.Context(), "nope") }, []string{}, []string{"1/3", "2/3", "3/3"}},
		{"RenameState", func() (board.SweepReport, error) { return a.RenameState(t.Context(), board.StateBacklog, "icebox") }, []string{"c1", "c2"}, []string{"1/2", "2/2"}},
		{"DeleteState", func() (board.SweepReport, error) {
			return a.DeleteState(t.Context(), board.StateBacklog, board.StateReady)
		}, []string{"c1", "c2"}, []string{"1/2", "2/2"}},
	} {
		progress = nil
		rep, err := tc.op()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !rep.DryRun || !slices.Equal(rep.Changed, tc.changed) {
			t.Errorf("%s: report %+v, want a dry run changing %v", tc.name, rep, tc.changed)
		}
		if !slices.Equal(progress, tc.progress) {
			t.Errorf("%s: progress %v, want %v", tc.name, progress, tc.progress)
		}
		if strings.HasSuffix(tc.name, "State") && (rep.Board == nil || rep.Board.Has(board.StateBacklog)) {
			t.Errorf("%s: report's board %v, want the board without backlog", tc.name, rep.Board)
		}
	}
	// A refusal is the real operation's.
	if _, err := a.DeleteState(t.Context(), board.StateBacklog, board.StateDone); !errors.Is(err, board.ErrInvalidArgument) {
		t.Errorf("dry run of a delete into a completion state: %v, want ErrInvalidArgument", err)
	}
	if got := head(); got != seq {
		t.Errorf("the dry runs logged events up to %d, want none after %d", got, seq)
	}
	if b, err := s.LoadBoard(t.Context()); err != nil || !b.Equal(b0) {
		t.Errorf("the dry runs changed the board: %v (%v)", b, err)
	}
	for _, id := range []string{"c1", "c2"} {
		if c, err := s.GetCard(t.Context(), board.GetCardParams{ID: id}); err != nil || c.State != board.StateBacklog || !slices.Equal(c.Labels, []string{"old", "x"}) {
			t.Errorf("%s after the dry runs: %+v (%v)", id, c, err)
		}
	}
}
