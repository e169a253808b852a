package boardtest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// exerciseExpired pins what the watchdog needs of a store beyond the
// transfer itself: its own clock, a resumable expired listing, a fenced
// release of an abandoned claim, and the epochs that tell which claim a
// run pointer belongs to.
func exerciseExpired(t *testing.T, h Harness) {
	t.Run("NowIsALowerBoundOfTheStoresStamps", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		before, err := e.s.Now(e.ctx)
		if err != nil {
			t.Fatalf("Now: %v", err)
		}
		e.claim("c1", markerA)
		if c := e.get("c1"); c.ClaimedAt.Before(before) {
			t.Errorf("claimed_at %s is before the store's earlier Now %s: Now is not the clock the store stamps with", fmtTime(c.ClaimedAt), fmtTime(before))
		}
		if e.local() && !before.Equal(e.clock.Now()) {
			t.Errorf("local Now = %s, want the store's clock %s", fmtTime(before), fmtTime(e.clock.Now()))
		}
	})

	t.Run("ExpiredListingPages", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		var want []string
		var last time.Time
		for i := range 5 {
			id := fmt.Sprintf("e%d", i)
			e.card(id, board.StateInProgress)
			e.clock.Advance(time.Second)
			last = e.expire(id, e.claim(id, markerA)).ClaimLeaseUntil
			want = append(want, id)
		}
		var got []string
		after := ""
		for page := 0; ; page++ {
			if page > len(want) {
				t.Fatalf("the listing did not end after %d pages (positions %q)", page, after)
			}
			p, err := e.s.ListExpiredClaimCandidates(e.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: last, Limit: 2, After: after})
			if err != nil {
				t.Fatalf("page %d: %v", page, err)
			}
			if len(p.Cards) > 2 {
				t.Errorf("page %d holds %d cards, over the limit 2", page, len(p.Cards))
			}
			got = append(got, ids(p.Cards)...)
			if p.Next == "" {
				break
			}
			after = p.Next
		}
		if sorted := slices.Sorted(slices.Values(got)); !slices.Equal(sorted, want) {
			t.Errorf("pages listed %q, want every expired claim once: %q", got, want)
		}
		if _, err := e.s.ListExpiredClaimCandidates(e.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: last, Limit: 2, After: "not a position"}); !errors.Is(err, board.ErrInvalidArgument) {
			t.Errorf("a forged position = %v, want ErrInvalidArgument", err)
		}
	})

	// DESIGN.md#reaper-shares: a reaper alone is given every expired
	// claim, on the twin that splits them as on the one that does not.
	t.Run("ALoneReapersShareIsEveryExpiredClaim", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		var want []string
		var last time.Time
		for i := range 4 {
			id := fmt.Sprintf("s%d", i)
			e.card(id, board.StateInProgress)
			e.clock.Advance(time.Second)
			last = e.expire(id, e.claim(id, markerA)).ClaimLeaseUntil
			want = append(want, id)
		}
		p, err := e.s.ListExpiredClaimCandidates(e.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: last,
			Share: &board.ReaperShare{Reaper: markerB, Interval: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Sorted(slices.Values(ids(p.Cards))); !slices.Equal(got, want) {
			t.Errorf("a lone reaper's share = %q, want every expired claim %q", got, want)
		}
		if p.Reapers > 1 {
			t.Errorf("a lone reaper's listing says %d reapers share it", p.Reapers)
		}
	})

	t.Run("ReleaseExpiredCarriesTheWholePrecondition", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		tok, expired := expiredHold(e)
		now, err := e.s.Now(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Still live at a cutoff before the lease ended.
		live := board.ReleaseExpiredParams{Card: "c1", Prev: tok, Cutoff: expired.ClaimLeaseUntil.Add(-time.Second), Actor: recovery}
		if err := e.s.ReleaseExpired(e.ctx, live); !errors.Is(err, board.ErrClaimConflict) {
			t.Errorf("release of a lease not yet ended at the cutoff = %v, want ErrClaimConflict", err)
		}
		// The owner re-takes the card (a new epoch, a fresh lease): the
		// release judged on the old token must not touch it.
		card, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: tok, RecoveryMarker: recovery, Cutoff: expired.ClaimLeaseUntil, Lease: lease})
		newTok := card.Token()
		if err != nil {
			t.Fatalf("ReclaimExpired: %v", err)
		}
		before := e.get("c1")
		seq := e.lastSeq()
		stale := board.ReleaseExpiredParams{Card: "c1", Prev: tok, Cutoff: now.Add(time.Hour), Actor: recovery}
		if err := e.s.ReleaseExpired(e.ctx, stale); !errors.Is(err, board.ErrClaimConflict) {
			t.Errorf("release on a superseded token = %v, want ErrClaimConflict", err)
		}
		e.unchanged(before, "a refused ReleaseExpired")
		e.noEventsSince(seq, "a refused ReleaseExpired")

		exact := board.ReleaseExpiredParams{Card: "c1", Prev: newTok, Cutoff: before.ClaimLeaseUntil, Actor: recovery}
		if err := e.s.ReleaseExpired(e.ctx, exact); err != nil {
			t.Fatalf("release of the exact, expired claim: %v", err)
		}
		after := e.get("c1")
		if after.Claimed() || after.ClaimEpoch != newTok.Epoch {
			t.Errorf("after ReleaseExpired: %s, want free at epoch %d", fmtCard(after), newTok.Epoch)
		}
		e.oneEventSince(seq, board.EventReleased, "ReleaseExpired")
		if err := e.s.ReleaseExpired(e.ctx, exact); !errors.Is(err, board.ErrClaimConflict) {
			t.Errorf("release of a free card = %v, want ErrClaimConflict (the judged claim is gone)", err)
		}
	})

	t.Run("ReleaseExpiredHoldsTheJudgedState", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		tok, expired := expiredHold(e)
		e.setState("c1", board.StateBacklog)
		before := e.get("c1")
		seq := e.lastSeq()
		judged := board.ReleaseExpiredParams{Card: "c1", Prev: tok, Cutoff: expired.ClaimLeaseUntil, State: board.StateInProgress, Actor: recovery}
		if err := e.s.ReleaseExpired(e.ctx, judged); !errors.Is(err, board.ErrTransitionRejected) {
			t.Errorf("release judged in in_progress of a card now in backlog = %v, want ErrTransitionRejected", err)
		}
		e.unchanged(before, "a release refused for a moved card")
		e.noEventsSince(seq, "a release refused for a moved card")
		judged.State = board.StateBacklog
		if err := e.s.ReleaseExpired(e.ctx, judged); err != nil {
			t.Errorf("release in the judged state: %v", err)
		}
	})

	t.Run("TransferRecordsTheJudgedEpoch", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		tok, expired := expiredHold(e)
		card, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: tok, RecoveryMarker: recovery, Cutoff: expired.ClaimLeaseUntil, Lease: time.Millisecond})
		first := card.Token()
		if err != nil {
			t.Fatalf("ReclaimExpired: %v", err)
		}
		c := e.get("c1")
		if c.RecoveredEpoch != tok.Epoch || c.JudgedEpoch() != tok.Epoch {
			t.Errorf("recovered epoch %d (judged %d), want the worker's %d", c.RecoveredEpoch, c.JudgedEpoch(), tok.Epoch)
		}
		// A recovery claim taken over from another keeps the worker epoch.
		e.clock.Advance(time.Second)
		c = e.expire("c1", first)
		c, err = e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: first, RecoveryMarker: recovery, Cutoff: c.ClaimLeaseUntil, Lease: lease})
		second := c.Token()
		if err != nil {
			t.Fatalf("ReclaimExpired of a recovery claim: %v", err)
		}
		if c := e.get("c1"); c.RecoveredEpoch != tok.Epoch {
			t.Errorf("after a recovery-to-recovery transfer, recovered epoch %d, want %d", c.RecoveredEpoch, tok.Epoch)
		}
		e.release("c1", second)
		if c := e.get("c1"); c.RecoveredEpoch != 0 {
			t.Errorf("after the release, recovered epoch %d, want 0", c.RecoveredEpoch)
		}
	})

	t.Run("RunPointerRecordsItsClaimsEpoch", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		tok := e.claim("c1", markerA)
		if err := e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "r1"}); err != nil {
			t.Fatal(err)
		}
		if c := e.get("c1"); c.LastRunEpoch != tok.Epoch {
			t.Errorf("last_run_epoch %d, want the stamping claim's %d", c.LastRunEpoch, tok.Epoch)
		}
		e.release("c1", tok)
		again := e.claim("c1", markerA)
		if c := e.get("c1"); c.LastRunEpoch != tok.Epoch {
			t.Errorf("a new claim moved last_run_epoch to %d before stamping anything", c.LastRunEpoch)
		}
		seq := e.lastSeq()
		// Resuming the recorded run under the new claim makes the pointer
		// the new claim's.
		if err := e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: again, RunID: "r1"}); err != nil {
			t.Fatal(err)
		}
		if c := e.get("c1"); c.LastRunEpoch != again.Epoch || c.LastRunID != "r1" || len(c.Runs) != 1 {
			t.Errorf("re-stamped pointer: %s epoch %d runs %q, want r1 at epoch %d, one run", c.LastRunID, c.LastRunEpoch, c.Runs, again.Epoch)
		}
		e.oneEventSince(seq, board.EventLastRun, "re-stamping the pointer under a new claim")
	})
}
