package boltstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
)

// TestBadInputWritesNothing checks each refusal at the byte level: every
// bucket, every key and every bucket sequence (the event seq and the card
// creation seq) is exactly as before, so not even a counter moved.
func TestBadInputWritesNothing(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := t.Context()
	mustCreate(t, s, board.CreateCardParams{ID: "a", Labels: []string{"keep"}})
	mustCreate(t, s, board.CreateCardParams{ID: "b", DependsOn: []string{"a"}})
	mustCreate(t, s, board.CreateCardParams{ID: "sink", State: board.StateDone})
	tok := mustClaim(t, s, "a", "host-100")
	if _, err := s.CreateRun(ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "r1", Card: "a"}}); err != nil {
		t.Fatal(err)
	}
	stale := board.ClaimToken{Marker: tok.Marker, Epoch: tok.Epoch + 7}
	longLabel := strings.Repeat("x", board.MaxLabelBytes+1)
	finished := board.RunFinished

	tests := []struct {
		name string
		do   func() error
		want error
	}{
		{"create duplicate id", func() error { _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "a"}); return err }, board.ErrAlreadyExists},
		{"create empty id", func() error { _, err := s.CreateCard(ctx, board.CreateCardParams{}); return err }, board.ErrInvalidArgument},
		{"create id with control char", func() error { _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "a\nb"}); return err }, board.ErrInvalidArgument},
		{"create self cycle", func() error {
			_, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c", DependsOn: []string{"c"}})
			return err
		}, board.ErrInvalidArgument},
		{"create unknown blocker", func() error {
			_, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c", DependsOn: []string{"a", "ghost"}})
			return err
		}, board.ErrInvalidArgument},
		{"create unknown state", func() error { _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c", State: "limbo"}); return err }, board.ErrInvalidArgument},
		{"create label with control char", func() error {
			_, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c", Labels: []string{"ok", "bad\x01"}})
			return err
		}, board.ErrInvalidArgument},
		{"create label too long", func() error {
			_, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c", Labels: []string{longLabel}})
			return err
		}, board.ErrInvalidArgument},
		{"claim unknown card", func() error {
			_, err := s.Claim(ctx, board.ClaimParams{Card: "ghost", Marker: "host-100", Lease: lease})
			return err
		}, board.ErrNotFound},
		{"claim empty marker", func() error { _, err := s.Claim(ctx, board.ClaimParams{Card: "b", Lease: lease}); return err }, board.ErrInvalidArgument},
		{"claim malformed marker", func() error {
			_, err := s.Claim(ctx, board.ClaimParams{Card: "b", Marker: "host", Lease: lease})
			return err
		}, board.ErrInvalidArgument},
		{"claim zero lease", func() error { _, err := s.Claim(ctx, board.ClaimParams{Card: "b", Marker: "host-100"}); return err }, board.ErrInvalidArgument},
		{"claim held by another", func() error {
			_, err := s.Claim(ctx, board.ClaimParams{Card: "a", Marker: "host-200", Lease: lease})
			return err
		}, board.ErrClaimConflict},
		{"claim next malformed marker", func() error {
			_, err := s.ClaimNext(ctx, board.ClaimNextParams{Marker: "x-1", Lease: lease})
			return err
		}, board.ErrInvalidArgument},
		{"renew zero lease", func() error {
			_, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "a", Token: tok}}, Lease: 0})
			return err
		}, board.ErrInvalidArgument},
		{"owned move zero token", func() error {
			_, err := s.SetStateOwned(ctx, board.SetStateOwnedParams{Card: "a", To: board.StateDone})
			return err
		}, board.ErrInvalidArgument},
		{"owned move stale token", func() error {
			_, err := s.SetStateOwned(ctx, board.SetStateOwnedParams{Card: "a", Token: stale, To: board.StateDone})
			return err
		}, board.ErrClaimConflict},
		{"owned no-op with stale token", func() error {
			_, err := s.SetStateOwned(ctx, board.SetStateOwnedParams{Card: "a", Token: stale, To: board.StateReady})
			return err
		}, board.ErrClaimConflict},
		{"owned move unknown state", func() error {
			_, err := s.SetStateOwned(ctx, board.SetStateOwnedParams{Card: "a", Token: tok, To: "limbo"})
			return err
		}, board.ErrInvalidArgument},
		{"last run empty id", func() error {
			return s.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: "a", Token: tok, RunID: ""})
		}, board.ErrInvalidArgument},
		{"last run stale token", func() error {
			return s.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: "a", Token: stale, RunID: "r9"})
		}, board.ErrClaimConflict},
		{"awaiting stale token", func() error {
			return s.SetAwaitingInputOwned(ctx, board.SetAwaitingInputOwnedParams{Card: "a", Token: stale, Awaiting: true})
		}, board.ErrClaimConflict},
		{"gave up without reason", func() error {
			return s.SetGaveUpOwned(ctx, board.SetGaveUpOwnedParams{Card: "a", Token: tok, GaveUp: &board.GaveUp{}})
		}, board.ErrInvalidArgument},
		{"expire stale token", func() error { return s.ExpireClaimOwned(ctx, board.OwnedParams{Card: "a", Token: stale}) }, board.ErrClaimConflict},
		{"release owned stale token", func() error { return s.ReleaseOwned(ctx, board.OwnedParams{Card: "a", Token: stale}) }, board.ErrClaimConflict},
		{"release other marker", func() error {
			return s.Release(ctx, board.ReleaseParams{Card: "a", Marker: "host-200", Actor: "uid:0"})
		}, board.ErrClaimConflict},
		{"release malformed marker", func() error { return s.Release(ctx, board.ReleaseParams{Card: "a", Marker: "", Actor: "uid:0"}) }, board.ErrInvalidArgument},
		{"set state unknown card", func() error { return s.SetState(ctx, board.MoveParams{Card: "ghost", To: board.StateReady}) }, board.ErrNotFound},
		{"set state unknown state", func() error { return s.SetState(ctx, board.MoveParams{Card: "a", To: "limbo"}) }, board.ErrInvalidArgument},
		{"set state out of a sink", func() error { return s.SetState(ctx, board.MoveParams{Card: "sink", To: board.StateReady}) }, board.ErrTerminalStateExit},
		{"set state from a terminal source", func() error {
			_, err := s.SetStateFrom(ctx, board.MoveParams{Card: "a", From: board.StateDone, To: board.StateReady})
			return err
		}, board.ErrTerminalStateExit},
		{"set state from without source", func() error {
			_, err := s.SetStateFrom(ctx, board.MoveParams{Card: "a", To: board.StateBacklog})
			return err
		}, board.ErrInvalidArgument},
		{"reopen into a terminal state", func() error { return s.Reopen(ctx, board.MoveParams{Card: "sink", To: board.StateFailed}) }, board.ErrTransitionRejected},
		{"reopen a working card", func() error { return s.Reopen(ctx, board.MoveParams{Card: "a", To: board.StateBacklog}) }, board.ErrTransitionRejected},
		{"adjust labels bad add", func() error {
			_, err := s.AdjustLabels(ctx, board.AdjustLabelsParams{Card: "a", Add: []string{"ok", "bad\x7f"}})
			return err
		}, board.ErrInvalidArgument},
		{"adjust labels bad remove on a no-op", func() error {
			_, err := s.AdjustLabels(ctx, board.AdjustLabelsParams{Card: "a", Remove: []string{longLabel}})
			return err
		}, board.ErrInvalidArgument},
		{"set labels too long", func() error {
			_, err := s.SetLabels(ctx, board.SetLabelsParams{Card: "a", Labels: []string{"new", longLabel}, Actor: ""})
			return err
		}, board.ErrInvalidArgument},
		{"create run duplicate", func() error {
			_, err := s.CreateRun(ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "r1", Card: "a"}})
			return err
		}, board.ErrAlreadyExists},
		{"create run unknown card", func() error {
			_, err := s.CreateRun(ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "r2", Card: "ghost"}})
			return err
		}, board.ErrNotFound},
		{"create run unknown status", func() error {
			_, err := s.CreateRun(ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "r2", Card: "a", Status: "sleeping"}})
			return err
		}, board.ErrInvalidArgument},
		{"update run status drifted", func() error {
			_, err := s.UpdateRun(ctx, board.UpdateRunParams{ID: "r1", Token: tok, IfStatus: &finished, Status: &finished})
			return err
		}, board.ErrTransitionRejected},
		{"update run unknown", func() error {
			_, err := s.UpdateRun(ctx, board.UpdateRunParams{ID: "ghost", Token: tok, Status: &finished})
			return err
		}, board.ErrNotFound},
		{"reclaim a live lease", func() error {
			_, err := s.ReclaimExpired(ctx, board.ReclaimExpiredParams{Card: "a", Prev: tok, RecoveryMarker: "reaper:agent-300", Cutoff: clock.Now(), Lease: lease})
			return err
		}, board.ErrClaimConflict},
		{"reclaim to a worker marker", func() error {
			_, err := s.ReclaimExpired(ctx, board.ReclaimExpiredParams{Card: "a", Prev: tok, RecoveryMarker: "agent-300", Cutoff: clock.Now().Add(lease), Lease: lease})
			return err
		}, board.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := dump(t, s)
			err := tt.do()
			if !errors.Is(err, tt.want) {
				t.Fatalf("error = %v, want %v", err, tt.want)
			}
			if after := dump(t, s); after != before {
				t.Errorf("a refused call changed the file:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestErrorsNameTheCard: a caller logging an error must learn which card.
func TestErrorsNameTheCard(t *testing.T) {
	s, _, _ := openTest(t)
	ctx := t.Context()
	mustCreate(t, s, board.CreateCardParams{ID: "named-card", State: board.StateDone})
	errs := map[string]error{}
	errs["unknown"] = s.SetState(ctx, board.MoveParams{Card: "missing-card", To: board.StateReady})
	errs["sink"] = s.SetState(ctx, board.MoveParams{Card: "named-card", To: board.StateReady})
	_, errs["label"] = s.AdjustLabels(ctx, board.AdjustLabelsParams{Card: "named-card", Add: []string{"\x00"}})
	_, errs["claim"] = s.Claim(ctx, board.ClaimParams{Card: "named-card", Marker: "bad", Lease: lease})
	for name, err := range errs {
		want := "named-card"
		if name == "unknown" {
			want = "missing-card"
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v does not name %q", name, err, want)
		}
	}
}
