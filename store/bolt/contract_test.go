package boltstore

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// The cross-twin rules live in board/boardtest; these pin what is specific
// to the local twin (DESIGN.md#twins) or to how this file stores things.

func TestSameMarkerReclaimWritesOnlyTheLease(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := t.Context()
	mustCreate(t, s, board.CreateCardParams{ID: "a"})
	tok := mustClaim(t, s, "a", "host-100")
	before, _ := s.GetCard(ctx, board.GetCardParams{ID: "a"})
	seq := lastSeq(t, s)

	clock.Advance(10 * time.Second)
	again := mustClaim(t, s, "a", "host-100")
	if again != tok {
		t.Errorf("re-claim token = %+v, want %+v", again, tok)
	}
	after, _ := s.GetCard(ctx, board.GetCardParams{ID: "a"})
	if want := clock.Now().Add(lease); !after.ClaimLeaseUntil.Equal(want) {
		t.Errorf("lease = %s, want %s", after.ClaimLeaseUntil, want)
	}
	after.ClaimLeaseUntil = before.ClaimLeaseUntil
	if !cardsEqual(after, before) {
		t.Errorf("re-claim changed more than the lease:\n%+v\nwant\n%+v", after, before)
	}
	if got := lastSeq(t, s); got != seq {
		t.Errorf("re-claim emitted events: last seq %d, want %d", got, seq)
	}
}

func TestEpochIsACounterThatReleasesNeverReset(t *testing.T) {
	s, _, _ := openTest(t)
	ctx := t.Context()
	mustCreate(t, s, board.CreateCardParams{ID: "a"})
	var got []int64
	tok := mustClaim(t, s, "a", "host-100")
	got = append(got, tok.Epoch)
	if err := s.ReleaseOwned(ctx, board.OwnedParams{Card: "a", Token: tok}); err != nil {
		t.Fatal(err)
	}
	tok = mustClaim(t, s, "a", "host-200")
	got = append(got, tok.Epoch)
	if err := s.Release(ctx, board.ReleaseParams{Card: "a", Marker: "host-200", Actor: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	c, _ := s.GetCard(ctx, board.GetCardParams{ID: "a"})
	if c.ClaimEpoch != tok.Epoch || c.Claimed() || !c.ClaimedAt.IsZero() || !c.ClaimLeaseUntil.IsZero() {
		t.Errorf("after release: claim %q epoch %d claimed_at %s lease %s, want free, epoch %d kept, times cleared",
			c.Claim, c.ClaimEpoch, c.ClaimedAt, c.ClaimLeaseUntil, tok.Epoch)
	}
	tok = mustClaim(t, s, "a", "host-100")
	got = append(got, tok.Epoch)
	if want := []int64{1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("epochs = %v, want %v (stored + 1 each time)", got, want)
	}
}

func TestClaimNextTakesOldestFreeCardAcrossPoolStates(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := t.Context()
	// in_progress is a pool state on the local twin (a re-claim resumes the
	// recorded run), so an older free card there wins over a newer ready one.
	mustCreate(t, s, board.CreateCardParams{ID: "held", State: board.StateReady})
	clock.Advance(time.Second)
	mustCreate(t, s, board.CreateCardParams{ID: "parked", State: board.StateBacklog})
	clock.Advance(time.Second)
	mustCreate(t, s, board.CreateCardParams{ID: "resume", State: board.StateInProgress})
	clock.Advance(time.Second)
	mustCreate(t, s, board.CreateCardParams{ID: "fresh", State: board.StateReady})
	mustClaim(t, s, "held", "host-100")

	var got []string
	for {
		c, err := s.ClaimNext(ctx, board.ClaimNextParams{Marker: "host-200", Lease: lease})
		if errors.Is(err, board.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		stored, err := s.GetCard(ctx, board.GetCardParams{ID: c.ID})
		if err != nil {
			t.Fatal(err)
		}
		if c.Claim != "host-200" || c.Token() != stored.Token() {
			t.Errorf("ClaimNext returned card %q held by %q@%d, want the new claim as stored %+v", c.ID, c.Claim, c.ClaimEpoch, stored.Token())
		}
		got = append(got, c.ID)
	}
	if want := []string{"resume", "fresh"}; !slices.Equal(got, want) {
		t.Errorf("ClaimNext order = %v, want %v", got, want)
	}
}

func TestListUnleasedRunningClaimsIsAlwaysEmptyLocally(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := t.Context()
	mustCreate(t, s, board.CreateCardParams{ID: "a", State: board.StateInProgress})
	tok := mustClaim(t, s, "a", "host-100")
	if err := s.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: "a", Token: tok, RunID: "r1"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(48 * time.Hour)
	got, err := s.ListUnleasedRunningClaims(ctx, board.ListUnleasedRunningClaimsParams{Cutoff: clock.Now(), Limit: 10})
	if err != nil || len(got) != 0 {
		t.Errorf("ListUnleasedRunningClaims = %v, %v; want none (DESIGN.md#twin-unleased)", ids(got), err)
	}
}

func TestReaperOwnedMovesAreStampedWatchdogExceptVerdicts(t *testing.T) {
	tests := []struct {
		name       string
		reason     board.Reason
		wantReason board.Reason
		wantActor  string
	}{
		{"no reason", board.ReasonNone, board.ReasonWatchdog, ""},
		{"unblocked is not a verdict", board.ReasonUnblocked, board.ReasonWatchdog, ""},
		{"run_finished kept", board.ReasonRunFinished, board.ReasonRunFinished, "reaper:agent-300"},
		{"run_failed kept", board.ReasonRunFailed, board.ReasonRunFailed, "reaper:agent-300"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clock, _ := openTest(t)
			ctx := t.Context()
			mustCreate(t, s, board.CreateCardParams{ID: "a", State: board.StateInProgress})
			prev := mustClaim(t, s, "a", "host-100")
			if err := s.ExpireClaimOwned(ctx, board.OwnedParams{Card: "a", Token: prev}); err != nil {
				t.Fatal(err)
			}
			observed, err := s.ReclaimExpired(ctx, board.ReclaimExpiredParams{Card: "a", Prev: prev, RecoveryMarker: "reaper:agent-300", Cutoff: clock.Now(), Lease: lease})
			tok := observed.Token()
			if err != nil {
				t.Fatal(err)
			}
			if tok.Epoch != prev.Epoch+1 || observed.Claim != "reaper:agent-300" || !observed.ClaimLeaseUntil.Equal(clock.Now().Add(lease)) {
				t.Fatalf("reclaim: token %+v, card %q@%d lease %s", tok, observed.Claim, observed.ClaimEpoch, observed.ClaimLeaseUntil)
			}
			seq := lastSeq(t, s)
			if _, err := s.SetStateOwned(ctx, board.SetStateOwnedParams{Card: "a", Token: tok, To: board.StateFailed, Reason: tt.reason}); err != nil {
				t.Fatal(err)
			}
			evs, err := s.Events(ctx, board.EventsParams{After: seq, Limit: 0})
			if err != nil || len(evs) != 1 {
				t.Fatalf("events after the move: %v, %v; want one", evs, err)
			}
			if evs[0].Reason != tt.wantReason || evs[0].Actor != tt.wantActor {
				t.Errorf("event reason %q actor %q, want %q and %q", evs[0].Reason, evs[0].Actor, tt.wantReason, tt.wantActor)
			}
		})
	}
}

func cardsEqual(a, b board.Card) bool {
	return a.ID == b.ID && a.State == b.State && a.Title == b.Title &&
		slices.Equal(a.Labels, b.Labels) && slices.Equal(a.DependsOn, b.DependsOn) && slices.Equal(a.Runs, b.Runs) &&
		a.LastRunID == b.LastRunID && a.AwaitingInput == b.AwaitingInput && (a.GaveUp == nil) == (b.GaveUp == nil) &&
		a.StateReason == b.StateReason && a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt) &&
		a.PromotedBy == b.PromotedBy && a.Claim == b.Claim && a.ClaimEpoch == b.ClaimEpoch &&
		a.ClaimedAt.Equal(b.ClaimedAt) && a.ClaimLeaseUntil.Equal(b.ClaimLeaseUntil)
}
