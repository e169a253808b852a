package plugins

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
)

// allIdentities is every error identity that must survive the boundary.
var allIdentities = []error{
	board.ErrNotFound, board.ErrClaimConflict, board.ErrTransitionRejected,
	board.ErrTerminalStateExit, board.ErrWaitingOnBlockers, board.ErrInvalidArgument, board.ErrAlreadyExists,
	board.ErrOutcomeUnknown, context.Canceled, context.DeadlineExceeded,
}

// checkSameError fails t unless got carries exactly the message, the
// sentinel identities and the conflict details of want.
func checkSameError(t *testing.T, got, want error) {
	t.Helper()
	if got == nil {
		t.Fatalf("got nil error, want %q", want)
	}
	if got.Error() != want.Error() {
		t.Errorf("message: got %q, want %q", got.Error(), want.Error())
	}
	for _, s := range allIdentities {
		if g, w := errors.Is(got, s), errors.Is(want, s); g != w {
			t.Errorf("errors.Is(err, %q): got %v, want %v", s, g, w)
		}
	}
	gc, gok := board.AsClaimConflict(got)
	wc, wok := board.AsClaimConflict(want)
	if gok != wok {
		t.Fatalf("AsClaimConflict ok: got %v, want %v", gok, wok)
	}
	if wok && *gc != *wc {
		t.Errorf("conflict details: got %+v, want %+v", *gc, *wc)
	}
}

func TestErrorIdentityCrossesTheBoundary(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
	}{
		{"not found", board.NotFound("card", "c1")},
		{"claim conflict with holder and epoch", board.Conflict("c1", "worker-b-202", 7)},
		{"claim conflict on a free card", board.Conflict("c1", "", 3)},
		{"wrapped claim conflict", fmt.Errorf("set state owned: %w", board.Conflict("c1", "worker-a-101", 12))},
		{"bare claim conflict sentinel", fmt.Errorf("renew: %w", board.ErrClaimConflict)},
		{"transition rejected", fmt.Errorf("move c1 to launch: %w", board.ErrTransitionRejected)},
		{"terminal state exit", fmt.Errorf("move c1 from done to ready: %w", board.ErrTerminalStateExit)},
		{"waiting on blockers", fmt.Errorf("card %q waits in waiting_deps on blocker %q: %w", "d", "b", board.ErrWaitingOnBlockers)},
		{"invalid argument", board.Invalid("unknown state %q", "nope")},
		{"already exists", fmt.Errorf("create c1: %w", board.ErrAlreadyExists)},
		{"outcome unknown", fmt.Errorf("mongo write: connection reset: %w", board.ErrOutcomeUnknown)},
		{"joined sentinels", errors.Join(board.NotFound("run", "r1"), board.Conflict("c2", "worker-a-101", 4))},
		{"context deadline from the store", fmt.Errorf("bbolt: %w", context.DeadlineExceeded)},
		{"plain error", errors.New("disk full")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs := inProcess(t, &scripted{getCard: func(context.Context, string) (board.Card, error) {
				return board.Card{}, tc.err
			}})
			_, err := rs.GetCard(t.Context(), board.GetCardParams{ID: "c1"})
			checkSameError(t, err, tc.err)
		})
	}
}

func TestRenewResultErrorsCrossTheBoundary(t *testing.T) {
	t.Parallel()
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)
	want := []board.RenewResult{
		{Card: "c1", LeaseUntil: at},
		{Card: "c2", Err: board.Conflict("c2", "worker-b-202", 9)},
		{Card: "c3", Err: fmt.Errorf("renew c3: %w", board.NotFound("card", "c3"))},
	}
	var gotHolds []board.Hold
	var gotLease time.Duration
	rs := inProcess(t, &scripted{renewClaims: func(_ context.Context, holds []board.Hold, lease time.Duration) ([]board.RenewResult, error) {
		gotHolds, gotLease = holds, lease
		return want, nil
	}})
	holds := []board.Hold{
		{Card: "c1", Token: board.ClaimToken{Marker: "worker-a-101", Epoch: 1}},
		{Card: "c2", Token: board.ClaimToken{Marker: "worker-a-101", Epoch: 2}},
		{Card: "c3", Token: board.ClaimToken{Marker: "worker-a-101", Epoch: 3}},
	}
	got, err := rs.RenewClaims(t.Context(), board.RenewClaimsParams{Holds: holds, Lease: 30 * time.Second})
	if err != nil {
		t.Fatalf("RenewClaims: %v", err)
	}
	if !reflect.DeepEqual(gotHolds, holds) || gotLease != 30*time.Second {
		t.Errorf("plugin side got holds %+v lease %s, want %+v 30s", gotHolds, gotLease, holds)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d results, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Card != want[i].Card || !got[i].LeaseUntil.Equal(want[i].LeaseUntil) {
			t.Errorf("result %d: got %s %v, want %s %v", i, got[i].Card, got[i].LeaseUntil, want[i].Card, want[i].LeaseUntil)
		}
		if want[i].Err == nil {
			if got[i].Err != nil {
				t.Errorf("result %d: got error %v, want none", i, got[i].Err)
			}
			continue
		}
		checkSameError(t, got[i].Err, want[i].Err)
	}
}

// TestRealStoreErrorsCrossTheBoundary compares the errors a real bbolt
// store returns directly with the ones the agent sees through the plugin.
func TestRealStoreErrorsCrossTheBoundary(t *testing.T) {
	t.Parallel()
	clock := boardtest.NewManualClock(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC))
	direct := openBolt(t, board.DefaultBoard(true), clock)
	remote := inProcess(t, direct)
	ctx := t.Context()
	const a, b = "worker-a-101", "worker-b-202"

	if _, err := remote.CreateCard(ctx, board.CreateCardParams{ID: "c1", Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.CreateCard(ctx, board.CreateCardParams{ID: "done1", State: board.StateDone, Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	card, err := remote.Claim(ctx, board.ClaimParams{Card: "c1", Marker: a, Lease: 30 * time.Second})
	tok := card.Token()
	if err != nil {
		t.Fatal(err)
	}
	stale := board.ClaimToken{Marker: a, Epoch: tok.Epoch - 1 + 100}

	cases := []struct {
		name string
		call func(s board.Store) error
	}{
		{"claim held by another", func(s board.Store) error {
			_, err := s.Claim(ctx, board.ClaimParams{Card: "c1", Marker: b, Lease: 30 * time.Second})
			return err
		}},
		{"stale token", func(s board.Store) error {
			return s.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: "c1", Token: stale, RunID: "r1"})
		}},
		{"unknown card", func(s board.Store) error { _, err := s.GetCard(ctx, board.GetCardParams{ID: "nope"}); return err }},
		{"unknown run", func(s board.Store) error { _, err := s.GetRun(ctx, board.GetRunParams{ID: "nope"}); return err }},
		{"duplicate card", func(s board.Store) error {
			_, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c1", Actor: "cli"})
			return err
		}},
		{"bad marker", func(s board.Store) error {
			_, err := s.Claim(ctx, board.ClaimParams{Card: "c1", Marker: "no-pid-", Lease: time.Second})
			return err
		}},
		{"leaving a sink", func(s board.Store) error {
			return s.SetState(ctx, board.MoveParams{Card: "done1", To: board.StateReady, Actor: "cli"})
		}},
		{"reopen to a terminal target", func(s board.Store) error {
			return s.Reopen(ctx, board.MoveParams{Card: "done1", To: board.StateFailed, Actor: "cli"})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.call(direct)
			if want == nil {
				t.Fatal("the direct call succeeded; the case does not test an error")
			}
			checkSameError(t, tc.call(remote), want)
		})
	}

	t.Run("renew results", func(t *testing.T) {
		holds := []board.Hold{{Card: "c1", Token: tok}, {Card: "c1", Token: stale}, {Card: "nope", Token: tok}}
		want, werr := direct.RenewClaims(ctx, board.RenewClaimsParams{Holds: holds, Lease: 30 * time.Second})
		got, gerr := remote.RenewClaims(ctx, board.RenewClaimsParams{Holds: holds, Lease: 30 * time.Second})
		if werr != nil || gerr != nil {
			t.Fatalf("RenewClaims: direct %v, remote %v", werr, gerr)
		}
		if len(got) != len(want) {
			t.Fatalf("got %d results, want %d", len(got), len(want))
		}
		for i := range want {
			if !got[i].LeaseUntil.Equal(want[i].LeaseUntil) {
				t.Errorf("result %d lease: got %v, want %v", i, got[i].LeaseUntil, want[i].LeaseUntil)
			}
			if want[i].Err == nil {
				if got[i].Err != nil {
					t.Errorf("result %d: got %v, want no error", i, got[i].Err)
				}
				continue
			}
			checkSameError(t, got[i].Err, want[i].Err)
		}
		if want[1].Err == nil {
			t.Error("the stale hold was renewed directly; the case does not test a per-hold error")
		}
	})
}

// TestContextCrossesTheBoundary checks the plugin's store sees the agent's
// deadline, and that cancelling the agent's ctx cancels the plugin's.
func TestContextCrossesTheBoundary(t *testing.T) {
	t.Parallel()
	type seen struct {
		deadline time.Time
		has      bool
	}
	entered := make(chan seen, 1)
	ended := make(chan error, 1)
	rs := inProcess(t, &scripted{getCard: func(ctx context.Context, id string) (board.Card, error) {
		dl, ok := ctx.Deadline()
		entered <- seen{deadline: dl, has: ok}
		if id == "no-block" {
			return board.Card{ID: id}, nil
		}
		<-ctx.Done()
		ended <- ctx.Err()
		return board.Card{}, ctx.Err()
	}})

	t.Run("no deadline stays none", func(t *testing.T) {
		if _, err := rs.GetCard(t.Context(), board.GetCardParams{ID: "no-block"}); err != nil {
			t.Fatal(err)
		}
		if s := <-entered; s.has {
			t.Errorf("plugin saw deadline %v, want none", s.deadline)
		}
	})

	t.Run("deadline and cancellation", func(t *testing.T) {
		want := time.Now().Add(time.Hour)
		ctx, cancel := context.WithDeadline(t.Context(), want)
		errc := make(chan error, 1)
		go func() {
			_, err := rs.GetCard(ctx, board.GetCardParams{ID: "block"})
			errc <- err
		}()
		s := <-entered
		if !s.has {
			t.Fatal("plugin saw no deadline")
		}
		// gRPC sends the remaining time, so the plugin's deadline is the
		// agent's give or take the transit.
		if d := s.deadline.Sub(want); d < -5*time.Second || d > 5*time.Second {
			t.Errorf("plugin deadline %v is %v away from the agent's %v", s.deadline, d, want)
		}
		cancel()
		select {
		case perr := <-ended:
			if !errors.Is(perr, context.Canceled) {
				t.Errorf("plugin ctx ended with %v, want context.Canceled", perr)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("cancelling the agent's ctx did not cancel the plugin's within 10s")
		}
		err := <-errc
		if !errors.Is(err, context.Canceled) || !errors.Is(err, board.ErrOutcomeUnknown) {
			t.Errorf("agent got %v, want context.Canceled and ErrOutcomeUnknown", err)
		}
	})

	t.Run("deadline expiry", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		_, err := rs.GetCard(ctx, board.GetCardParams{ID: "block"})
		<-entered
		// The plugin's ctx ends by its own copy of the deadline or by the
		// agent's cancellation when the agent's fires first: either way it
		// ends, and the agent is told the deadline passed.
		if perr := <-ended; !errors.Is(perr, context.DeadlineExceeded) && !errors.Is(perr, context.Canceled) {
			t.Errorf("plugin ctx ended with %v, want it ended", perr)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("agent got %v, want context.DeadlineExceeded", err)
		}
	})
}

// TestValuesCrossTheBoundary pins the distinctions a naive mapping loses:
// nil against empty slices, and the zero time.
func TestValuesCrossTheBoundary(t *testing.T) {
	t.Parallel()
	at := time.Date(2031, 5, 6, 7, 8, 9, 1, time.UTC)
	cards := map[string]board.Card{
		"nil-slices":   {ID: "nil-slices", State: "ready"},
		"empty-slices": {ID: "empty-slices", State: "ready", Labels: []string{}, DependsOn: []string{}, Runs: []string{}},
		"full": {
			ID: "full", Title: "t", State: board.StateInProgress, Labels: []string{"a", "b"}, DependsOn: []string{"x"},
			LastRunID: "r2", Runs: []string{"r1", "r2"}, AwaitingInput: true,
			GaveUp:      &board.GaveUp{RunID: "r1", State: "failed", Attempts: 3, Reason: "gone", At: at},
			StateReason: board.ReasonWatchdog, CreatedAt: at, UpdatedAt: at.Add(time.Second), PromotedBy: "x",
			Claim: "worker-a-101", ClaimEpoch: 42, ClaimedAt: at, ClaimLeaseUntil: at.Add(30 * time.Second),
		},
	}
	lists := map[string][]board.Card{"nil": nil, "empty": {}, "one": {cards["full"]}}
	rs := inProcess(t, &scripted{
		getCard: func(_ context.Context, id string) (board.Card, error) { return cards[id], nil },
		listCards: func(_ context.Context, f board.ListCardsParams) ([]board.Card, error) {
			return lists[f.State], nil
		},
	})
	for id, want := range cards {
		t.Run("card "+id, func(t *testing.T) {
			got, err := rs.GetCard(t.Context(), board.GetCardParams{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
		})
	}
	for name, want := range lists {
		t.Run("list "+name, func(t *testing.T) {
			got, err := rs.ListCards(t.Context(), board.ListCardsParams{State: name})
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (want == nil) || !reflect.DeepEqual(got, want) {
				t.Errorf("got %#v, want %#v", got, want)
			}
		})
	}
}

// TestCardFilterCrossesTheBoundary pins every field of the listing filter:
// a field the mapping drops would turn a narrow listing (the recovery
// sweep's RecoveryOnly) into a wider one on the plugin side.
func TestCardFilterCrossesTheBoundary(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen board.ListCardsParams
	)
	rs := inProcess(t, &scripted{
		listCards: func(_ context.Context, f board.ListCardsParams) ([]board.Card, error) {
			mu.Lock()
			defer mu.Unlock()
			seen = f
			return nil, nil
		},
	})
	tests := []struct {
		name string
		f    board.ListCardsParams
	}{
		{"zero", board.ListCardsParams{}},
		{"state and limit", board.ListCardsParams{State: board.StateReady, Limit: 7}},
		{"claimed only", board.ListCardsParams{ClaimedOnly: true}},
		{"recovery only", board.ListCardsParams{RecoveryOnly: true}},
		{"claim hosts", board.ListCardsParams{ClaimHosts: []string{"alpha", "beta"}}},
		{"every field", board.ListCardsParams{State: board.StateInProgress, Limit: 3, ClaimedOnly: true, RecoveryOnly: true, ClaimHosts: []string{"alpha"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := rs.ListCards(t.Context(), tc.f); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			got := seen
			mu.Unlock()
			if !reflect.DeepEqual(got, tc.f) {
				t.Errorf("the plugin saw %+v, want %+v", got, tc.f)
			}
		})
	}
}
