package boardtest

import (
	"slices"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// expiredHold claims c1 for markerA and ends the lease, returning the token
// and the card as stored afterwards.
func expiredHold(e *env) (board.ClaimToken, board.Card) {
	e.t.Helper()
	e.card("c1", board.StateInProgress)
	tok := e.claim("c1", markerA)
	e.clock.Advance(time.Second)
	return tok, e.expire("c1", tok)
}

func exerciseWatchdog(t *testing.T, h Harness) {
	t.Run("TransferRaisesEpochAndReturnsObservedCard", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		tok, expired := expiredHold(e)
		e.clock.Advance(time.Second)
		seq := e.lastSeq()

		observed, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: tok, RecoveryMarker: recovery, Cutoff: expired.ClaimLeaseUntil, Lease: lease})
		newTok := observed.Token()
		if err != nil {
			t.Fatalf("ReclaimExpired of an expired claim: %v", err)
		}
		if newTok.Marker != recovery || newTok.Epoch <= tok.Epoch {
			t.Errorf("transfer token = %+v, want marker %q and an epoch above %d", newTok, recovery, tok.Epoch)
		}
		if e.local() && newTok.Epoch != tok.Epoch+1 {
			t.Errorf("local transfer epoch = %d, want %d", newTok.Epoch, tok.Epoch+1)
		}
		stored := e.get("c1")
		if d := diffCards(observed, stored); d != "" {
			t.Errorf("the observed card is not the card after the transfer: %s", d)
		}
		if stored.Token() != newTok {
			t.Errorf("stored token after transfer = %+v, want %+v", stored.Token(), newTok)
		}
		if !stored.ClaimLeaseUntil.After(expired.ClaimLeaseUntil) {
			t.Errorf("recovery lease %s, want a fresh lease after the expired %s", fmtTime(stored.ClaimLeaseUntil), fmtTime(expired.ClaimLeaseUntil))
		}
		if e.local() && !stored.ClaimLeaseUntil.Equal(e.clock.Now().Add(lease)) {
			t.Errorf("recovery lease = %s, want now+lease = %s", fmtTime(stored.ClaimLeaseUntil), fmtTime(e.clock.Now().Add(lease)))
		}
		// The transfer changes the claim family only.
		want := expired
		want.Claim, want.ClaimEpoch, want.ClaimedAt, want.ClaimLeaseUntil = stored.Claim, stored.ClaimEpoch, stored.ClaimedAt, stored.ClaimLeaseUntil
		want.RecoveredEpoch = tok.Epoch
		want.UpdatedAt = stored.UpdatedAt
		if d := diffCards(stored, want); d != "" {
			t.Errorf("the transfer changed more than the claim: %s", d)
		}
		ev := e.oneEventSince(seq, board.EventClaimed, "ReclaimExpired")
		if ev.Data.Marker != recovery || ev.Data.Epoch != newTok.Epoch {
			t.Errorf("reclaim event data %+v, want marker %q epoch %d", ev.Data, recovery, newTok.Epoch)
		}
	})

	t.Run("TransferRefused", func(t *testing.T) {
		cases := []struct {
			name   string
			reclam func(tok board.ClaimToken, c board.Card) board.ReclaimExpiredParams
		}{
			{"WrongPrevMarker", func(tok board.ClaimToken, c board.Card) board.ReclaimExpiredParams {
				return board.ReclaimExpiredParams{Card: "c1", Prev: board.ClaimToken{Marker: markerB, Epoch: tok.Epoch}, RecoveryMarker: recovery, Cutoff: c.ClaimLeaseUntil, Lease: lease}
			}},
			{"OlderPrevEpoch", func(tok board.ClaimToken, c board.Card) board.ReclaimExpiredParams {
				return board.ReclaimExpiredParams{Card: "c1", Prev: board.ClaimToken{Marker: markerA, Epoch: tok.Epoch - 1}, RecoveryMarker: recovery, Cutoff: c.ClaimLeaseUntil, Lease: lease}
			}},
			{"NewerPrevEpoch", func(tok board.ClaimToken, c board.Card) board.ReclaimExpiredParams {
				return board.ReclaimExpiredParams{Card: "c1", Prev: board.ClaimToken{Marker: markerA, Epoch: tok.Epoch + 1}, RecoveryMarker: recovery, Cutoff: c.ClaimLeaseUntil, Lease: lease}
			}},
			{"CutoffBeforeLease", func(tok board.ClaimToken, c board.Card) board.ReclaimExpiredParams {
				return board.ReclaimExpiredParams{Card: "c1", Prev: tok, RecoveryMarker: recovery, Cutoff: c.ClaimLeaseUntil.Add(-time.Millisecond), Lease: lease}
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.card("c1", board.StateInProgress)
				// Acquire twice so an "older epoch" exists and is > 0.
				t0 := e.claim("c1", markerA)
				e.release("c1", t0)
				tok := e.claim("c1", markerA)
				c := e.expire("c1", tok)
				seq := e.lastSeq()
				_, err := e.s.ReclaimExpired(e.ctx, tc.reclam(tok, c))
				wantConflict(t, err, markerA, tok.Epoch, "ReclaimExpired "+tc.name)
				e.unchanged(c, "a refused transfer")
				e.noEventsSince(seq, "a refused transfer")
			})
		}
	})

	t.Run("TransferRefusedForLiveLease", func(t *testing.T) {
		// A renewal between the listing and the transfer makes the lease
		// live again: the CAS carries "still expired" (DESIGN.md#transfer-first).
		t.Parallel()
		e := open(t, h)
		tok, expired := expiredHold(e)
		e.clock.Advance(time.Second)
		if err := renewOne(e, "c1", tok, lease); err != nil {
			t.Fatalf("renew: %v", err)
		}
		renewed := e.get("c1")
		seq := e.lastSeq()
		_, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: tok, RecoveryMarker: recovery, Cutoff: expired.ClaimLeaseUntil, Lease: lease})
		wantConflict(t, err, markerA, tok.Epoch, "ReclaimExpired after a renewal")
		e.unchanged(renewed, "a refused transfer")
		e.noEventsSince(seq, "a refused transfer")
	})

	t.Run("TransferRefusedForFreeCard", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		tok, _ := expiredHold(e)
		e.release("c1", tok)
		free := e.get("c1")
		seq := e.lastSeq()
		_, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: tok, RecoveryMarker: recovery, Cutoff: e.clock.Now().Add(time.Hour), Lease: lease})
		wantConflict(t, err, "", tok.Epoch, "ReclaimExpired of a released card")
		e.unchanged(free, "a refused transfer")
		e.noEventsSince(seq, "a refused transfer")
	})

	t.Run("SecondTransferOfSamePrevLoses", func(t *testing.T) {
		// Two reapers race with the same listing: exactly one wins.
		t.Parallel()
		e := open(t, h)
		tok, expired := expiredHold(e)
		r := board.ReclaimExpiredParams{Card: "c1", Prev: tok, RecoveryMarker: recovery, Cutoff: expired.ClaimLeaseUntil, Lease: lease}
		card, err := e.s.ReclaimExpired(e.ctx, r)
		won := card.Token()
		if err != nil {
			t.Fatal(err)
		}
		after := e.get("c1")
		r.RecoveryMarker = recovery2
		_, err = e.s.ReclaimExpired(e.ctx, r)
		wantConflict(t, err, recovery, won.Epoch, "the second transfer of the same claim")
		e.unchanged(after, "the losing transfer")
	})

	t.Run("AfterTransferRecoveryOwnsTheCard", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		dead, expired := expiredHold(e)
		card, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: dead, RecoveryMarker: recovery, Cutoff: expired.ClaimLeaseUntil, Lease: lease})
		rec := card.Token()
		if err != nil {
			t.Fatal(err)
		}
		if err := renewOne(e, "c1", rec, lease); err != nil {
			t.Errorf("recovery owner renew: %v", err)
		}
		if err := e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: rec, RunID: "run-r"}); err != nil {
			t.Errorf("recovery owner SetLastRunOwned: %v", err)
		}
		seq := e.lastSeq()
		changed, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: rec, To: board.StateReady})
		if err != nil || !changed.Changed {
			t.Fatalf("recovery owner SetStateOwned = %v, %v", changed.Changed, err)
		}
		ev := e.oneEventSince(seq, board.EventState, "the recovery owner's move")
		if ev.Reason != board.ReasonWatchdog || ev.Actor != "" {
			t.Errorf("recovery move event reason %q actor %q, want reason watchdog and a blank actor", ev.Reason, ev.Actor)
		}
		// The dead owner's release is refused too: it cannot free a card
		// the watchdog now holds.
		wantConflict(t, e.s.ReleaseOwned(e.ctx, board.OwnedParams{Card: "c1", Token: dead}), recovery, rec.Epoch, "the dead owner's release")
		if err := e.s.ReleaseOwned(e.ctx, board.OwnedParams{Card: "c1", Token: rec}); err != nil {
			t.Errorf("recovery owner release: %v", err)
		}
		if c := e.get("c1"); c.Claimed() || c.ClaimEpoch != rec.Epoch || c.LastRunID != "run-r" || c.State != board.StateReady {
			t.Errorf("card after the recovery owner released it: %s, want free at epoch %d", fmtCard(c), rec.Epoch)
		}
	})

	t.Run("RecoveryMoveReason", func(t *testing.T) {
		cases := []struct {
			name   string
			to     string
			reason board.Reason
			want   board.Reason
		}{
			{"EmptyBecomesWatchdog", board.StateFailed, board.ReasonNone, board.ReasonWatchdog},
			{"PersonalBecomesWatchdog", board.StateReady, board.ReasonUnblocked, board.ReasonWatchdog},
			{"RunFinishedKept", board.StateDone, board.ReasonRunFinished, board.ReasonRunFinished},
			{"RunFailedKept", board.StateFailed, board.ReasonRunFailed, board.ReasonRunFailed},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				dead, expired := expiredHold(e)
				card, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: dead, RecoveryMarker: recovery, Cutoff: expired.ClaimLeaseUntil, Lease: lease})
				rec := card.Token()
				if err != nil {
					t.Fatal(err)
				}
				seq := e.lastSeq()
				if _, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: rec, To: tc.to, Reason: tc.reason}); err != nil {
					t.Fatalf("SetStateOwned by the recovery owner: %v", err)
				}
				if c := e.get("c1"); c.StateReason != tc.want {
					t.Errorf("state_reason = %q, want %q", c.StateReason, tc.want)
				}
				var got *board.Event
				for _, ev := range e.eventsAfter(seq) {
					if ev.Type == board.EventState && ev.Card == "c1" {
						got = &ev
						break
					}
				}
				if got == nil || got.Reason != tc.want {
					t.Fatalf("state event of the recovery move = %v, want reason %q", got, tc.want)
				}
				if board.IsMachineReason(got.Reason) && got.Actor != "" {
					t.Errorf("machine-reason event actor = %q, want blank", got.Actor)
				}
			})
		}
	})

	t.Run("WorkerMoveKeepsItsReason", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateInProgress)
		tok := e.claim("c1", markerA)
		if _, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, To: board.StateDone, Reason: board.ReasonRunFinished}); err != nil {
			t.Fatal(err)
		}
		if c := e.get("c1"); c.StateReason != board.ReasonRunFinished {
			t.Errorf("state_reason of a worker's filing = %q, want run_finished", c.StateReason)
		}
	})

	t.Run("ListExpiredClaimCandidates", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		for _, id := range []string{"e1", "e2", "e3", "live", "free"} {
			e.card(id, board.StateInProgress)
		}
		// Expire in the order e2, e3, e1 so lease order differs from
		// creation order.
		var last time.Time
		for _, id := range []string{"e2", "e3", "e1"} {
			e.clock.Advance(time.Second)
			c := e.expire(id, e.claim(id, markerA))
			last = c.ClaimLeaseUntil
		}
		e.claim("live", markerB)
		e.release("free", e.claim("free", markerB))

		got, err := PageCards(e.s.ListExpiredClaimCandidates(e.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: last, Limit: 10}))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSortedFunc(got, func(a, b board.Card) int { return a.ClaimLeaseUntil.Compare(b.ClaimLeaseUntil) }) {
			t.Errorf("candidates not sorted by lease ascending: %q", ids(got))
		}
		gotIDs := ids(got)
		if e.local() {
			if want := []string{"e2", "e3", "e1"}; !slices.Equal(gotIDs, want) {
				t.Errorf("candidates = %q, want %q (lease ascending, live and free cards excluded)", gotIDs, want)
			}
		} else {
			sorted := slices.Sorted(slices.Values(gotIDs))
			if want := []string{"e1", "e2", "e3"}; !slices.Equal(sorted, want) {
				t.Errorf("candidates = %q, want e1 e2 e3 in lease order (live and free cards excluded)", gotIDs)
			}
		}
		limited, err := PageCards(e.s.ListExpiredClaimCandidates(e.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: last, Limit: 2}))
		if err != nil {
			t.Fatal(err)
		}
		if want := gotIDs[:min(2, len(gotIDs))]; !slices.Equal(ids(limited), want) {
			t.Errorf("candidates with limit 2 = %q, want the first two %q", ids(limited), want)
		}
		if e.local() {
			// The cutoff is inclusive and applies exactly.
			early, err := PageCards(e.s.ListExpiredClaimCandidates(e.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: got[0].ClaimLeaseUntil, Limit: 10}))
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"e2"}; !slices.Equal(ids(early), want) {
				t.Errorf("candidates at the earliest lease = %q, want %q", ids(early), want)
			}
			none, err := PageCards(e.s.ListExpiredClaimCandidates(e.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: got[0].ClaimLeaseUntil.Add(-time.Millisecond), Limit: 10}))
			if err != nil || len(none) != 0 {
				t.Errorf("candidates before every lease = %q, %v; want none", ids(none), err)
			}
		}
		for _, c := range got {
			if !c.Claimed() || c.ClaimLeaseUntil.After(last) {
				t.Errorf("candidate %s is not an expired claim at cutoff %s", fmtCard(c), fmtTime(last))
			}
		}
	})

	t.Run("RecoveryOnlyListing", func(t *testing.T) { exerciseRecoveryListing(t, h) })
	t.Run("CountCards", func(t *testing.T) { exerciseCountCards(t, h) })
	t.Run("ClaimHostsListing", func(t *testing.T) { exerciseClaimHostsListing(t, h) })

	t.Run("ListUnleasedRunningClaimsHoldsNoLeasedClaim", func(t *testing.T) {
		// The un-leased arm only ever lists claims with no lease; a
		// leased claim, expired or not, is the lease arm's business.
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateInProgress)
		tok := e.claim("c1", markerA)
		if err := e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "run-1"}); err != nil {
			t.Fatal(err)
		}
		e.expire("c1", tok)
		got, err := e.s.ListUnleasedRunningClaims(e.ctx, board.ListUnleasedRunningClaimsParams{Cutoff: e.clock.Now().Add(48 * time.Hour), Limit: 10})
		if err != nil || len(got) != 0 {
			t.Errorf("ListUnleasedRunningClaims = %q, %v; want none", ids(got), err)
		}
	})
}
