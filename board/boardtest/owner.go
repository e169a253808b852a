package boardtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// ownerVerb is one fenced owner write, called with a token.
type ownerVerb struct {
	name string
	call func(e *env, card string, tok board.ClaimToken) error
}

// ownerVerbs lists every fenced owner write of the contract (DESIGN.md#fence),
// the no-op variants included: a no-op still checks ownership.
var ownerVerbs = []ownerVerb{
	{"SetStateOwned", func(e *env, card string, tok board.ClaimToken) error {
		_, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: card, Token: tok, To: board.StateInProgress})
		return err
	}},
	{"SetStateOwnedToCurrentState", func(e *env, card string, tok board.ClaimToken) error {
		_, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: card, Token: tok, To: e.get(card).State})
		return err
	}},
	{"SetStateOwnedFrom", func(e *env, card string, tok board.ClaimToken) error {
		_, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: card, Token: tok, From: e.get(card).State, To: board.StateInProgress})
		return err
	}},
	{"SetLastRunOwned", func(e *env, card string, tok board.ClaimToken) error {
		return e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: card, Token: tok, RunID: "run-stale"})
	}},
	{"SetAwaitingInputOwned", func(e *env, card string, tok board.ClaimToken) error {
		return e.s.SetAwaitingInputOwned(e.ctx, board.SetAwaitingInputOwnedParams{Card: card, Token: tok, Awaiting: true})
	}},
	{"SetGaveUpOwned", func(e *env, card string, tok board.ClaimToken) error {
		return e.s.SetGaveUpOwned(e.ctx, board.SetGaveUpOwnedParams{Card: card, Token: tok, GaveUp: &board.GaveUp{RunID: "run-stale", Reason: "stale writer", At: e.clock.Now()}})
	}},
	{"ExpireClaimOwned", func(e *env, card string, tok board.ClaimToken) error {
		return e.s.ExpireClaimOwned(e.ctx, board.OwnedParams{Card: card, Token: tok})
	}},
	{"DisownClaimOwned", func(e *env, card string, tok board.ClaimToken) error {
		return e.s.DisownClaimOwned(e.ctx, board.OwnedParams{Card: card, Token: tok})
	}},
	{"ReleaseOwned", func(e *env, card string, tok board.ClaimToken) error {
		return e.s.ReleaseOwned(e.ctx, board.OwnedParams{Card: card, Token: tok})
	}},
	{"RenewClaims", func(e *env, card string, tok board.ClaimToken) error {
		return renewOne(e, card, tok, lease)
	}},
}

// renewOne renews a single hold and returns its per-hold error.
func renewOne(e *env, card string, tok board.ClaimToken, d time.Duration) error {
	res, err := e.s.RenewClaims(e.ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: card, Token: tok}}, Lease: d})
	if err != nil {
		return fmt.Errorf("batch error: %w", err)
	}
	if len(res) != 1 {
		return fmt.Errorf("RenewClaims returned %d results for one hold", len(res))
	}
	if res[0].Card != card {
		return fmt.Errorf("RenewClaims result names card %q, want %q", res[0].Card, card)
	}
	return res[0].Err
}

// staleScenario sets a card up so that stale is a superseded token and cur
// the card's current one (cur zero when the card is free).
type staleScenario struct {
	name  string
	setup func(e *env) (stale, cur board.ClaimToken)
}

var staleScenarios = []staleScenario{
	{"SameMarkerEarlierEpoch", func(e *env) (board.ClaimToken, board.ClaimToken) {
		// The realistic stale writer: one worker process held the card,
		// lost it, and holds it again under the same marker.
		t1 := e.claim("c1", markerA)
		e.release("c1", t1)
		return t1, e.claim("c1", markerA)
	}},
	{"OtherMarkerAfterHandover", func(e *env) (board.ClaimToken, board.ClaimToken) {
		t1 := e.claim("c1", markerA)
		e.release("c1", t1)
		return t1, e.claim("c1", markerB)
	}},
	{"CurrentMarkerFutureEpoch", func(e *env) (board.ClaimToken, board.ClaimToken) {
		// The CAS is on the exact epoch, not "at least".
		t1 := e.claim("c1", markerA)
		return board.ClaimToken{Marker: markerA, Epoch: t1.Epoch + 1}, t1
	}},
	{"AfterTransfer", func(e *env) (board.ClaimToken, board.ClaimToken) {
		t1 := e.claim("c1", markerA)
		c := e.expire("c1", t1)
		card, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: t1, RecoveryMarker: recovery, Cutoff: c.ClaimLeaseUntil, Lease: lease})
		t2 := card.Token()
		if err != nil {
			e.t.Fatalf("ReclaimExpired: %v", err)
		}
		return t1, t2
	}},
	{"FreeCard", func(e *env) (board.ClaimToken, board.ClaimToken) {
		t1 := e.claim("c1", markerA)
		e.release("c1", t1)
		return t1, board.ClaimToken{Epoch: t1.Epoch}
	}},
}

func exerciseOwner(t *testing.T, h Harness) {
	t.Run("StaleTokenRefused", func(t *testing.T) {
		for _, sc := range staleScenarios {
			for _, v := range ownerVerbs {
				t.Run(sc.name+"/"+v.name, func(t *testing.T) {
					t.Parallel()
					e := open(t, h)
					e.card("c1", board.StateReady)
					stale, cur := sc.setup(e)
					// Move time on so that any write, even one that changes
					// nothing else, would show in updated_at.
					e.clock.Advance(5 * time.Second)
					before := e.get("c1")
					seq := e.lastSeq()

					err := v.call(e, "c1", stale)
					if sc.name == "FreeCard" && v.name == "ReleaseOwned" {
						// Releasing a free card is nil (the release already
						// happened, or someone else's did).
						if err != nil {
							t.Errorf("ReleaseOwned on a free card: %v, want nil", err)
						}
					} else {
						wantConflict(t, err, cur.Marker, cur.Epoch, v.name+" with a superseded token")
					}
					e.unchanged(before, v.name+" with a superseded token")
					e.noEventsSince(seq, v.name+" with a superseded token")
				})
			}
		}
	})

	t.Run("CurrentTokenWrites", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		tok := e.claim("c1", markerA)
		fam := familyOf(e.get("c1"))
		keepsClaim := func(what string) {
			t.Helper()
			if got := familyOf(e.get("c1")); !got.equal(fam) {
				t.Errorf("%s changed the claim family: got %s, want %s", what, got, fam)
			}
		}

		e.clock.Advance(time.Second)
		seq := e.lastSeq()
		changed, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, To: board.StateInProgress})
		if err != nil || !changed.Changed {
			t.Fatalf("SetStateOwned ready → in_progress = %v, %v; want true, nil", changed.Changed, err)
		}
		ev := e.oneEventSince(seq, board.EventState, "SetStateOwned")
		if ev.Data.From != board.StateReady || ev.Data.To != board.StateInProgress || ev.Card != "c1" {
			t.Errorf("state event = card %q %q → %q, want c1 ready → in_progress", ev.Card, ev.Data.From, ev.Data.To)
		}
		if ev.Reason != board.ReasonNone {
			t.Errorf("a worker's owned move without a reason logged reason %q, want none", ev.Reason)
		}
		if c := e.get("c1"); c.State != board.StateInProgress {
			t.Errorf("state = %q, want in_progress", c.State)
		}
		keepsClaim("SetStateOwned")

		seq = e.lastSeq()
		before := e.get("c1")
		changed, err = e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, To: board.StateInProgress})
		if err != nil || changed.Changed {
			t.Errorf("SetStateOwned to the current state = %v, %v; want false, nil", changed.Changed, err)
		}
		e.noEventsSince(seq, "a no-op SetStateOwned")
		e.unchanged(before, "a no-op SetStateOwned")

		changed, err = e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, From: board.StateBacklog, To: board.StateAwaitingInput})
		if err != nil || changed.Changed {
			t.Errorf("SetStateOwned from a drifted source = %v, %v; want false, nil", changed.Changed, err)
		}
		e.noEventsSince(seq, "a drifted SetStateOwned")
		e.unchanged(before, "a drifted SetStateOwned")

		changed, err = e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, From: board.StateInProgress, To: board.StateAwaitingInput})
		if err != nil || !changed.Changed {
			t.Errorf("SetStateOwned from the declared source = %v, %v; want true, nil", changed.Changed, err)
		}
		e.oneEventSince(seq, board.EventState, "SetStateOwned with From")
		keepsClaim("SetStateOwned with From")

		seq = e.lastSeq()
		if err := e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "run-1"}); err != nil {
			t.Fatalf("SetLastRunOwned: %v", err)
		}
		if ev := e.oneEventSince(seq, board.EventLastRun, "SetLastRunOwned"); ev.Data.RunID != "run-1" {
			t.Errorf("last_run event run id = %q, want run-1", ev.Data.RunID)
		}
		if c := e.get("c1"); c.LastRunID != "run-1" {
			t.Errorf("last_run_id = %q, want run-1", c.LastRunID)
		}
		keepsClaim("SetLastRunOwned")

		seq = e.lastSeq()
		if err := e.s.SetAwaitingInputOwned(e.ctx, board.SetAwaitingInputOwnedParams{Card: "c1", Token: tok, Awaiting: true}); err != nil {
			t.Fatalf("SetAwaitingInputOwned: %v", err)
		}
		if ev := e.oneEventSince(seq, board.EventAwaitingInput, "SetAwaitingInputOwned"); !ev.Data.Value {
			t.Errorf("awaiting_input event value = false, want true")
		}
		if c := e.get("c1"); !c.AwaitingInput {
			t.Errorf("awaiting_input = false, want true")
		}
		keepsClaim("SetAwaitingInputOwned")

		seq = e.lastSeq()
		g := &board.GaveUp{RunID: "run-1", State: board.StateInProgress, Attempts: 2, Reason: "run pruned", At: e.clock.Now()}
		if err := e.s.SetGaveUpOwned(e.ctx, board.SetGaveUpOwnedParams{Card: "c1", Token: tok, GaveUp: g}); err != nil {
			t.Fatalf("SetGaveUpOwned: %v", err)
		}
		e.oneEventSince(seq, board.EventGaveUp, "SetGaveUpOwned")
		if c := e.get("c1"); !gaveUpEqual(c.GaveUp, g) {
			t.Errorf("gave_up = %s, want %s", fmtGaveUp(c.GaveUp), fmtGaveUp(g))
		}
		keepsClaim("SetGaveUpOwned")

		e.clock.Advance(time.Second)
		before = e.get("c1")
		if err := e.s.ExpireClaimOwned(e.ctx, board.OwnedParams{Card: "c1", Token: tok}); err != nil {
			t.Fatalf("ExpireClaimOwned: %v", err)
		}
		c := e.get("c1")
		if c.Token() != tok || !c.ClaimedAt.Equal(before.ClaimedAt) {
			t.Errorf("ExpireClaimOwned changed the claim itself: %s, was %s", familyOf(c), familyOf(before))
		}
		if c.ClaimLeaseUntil.After(before.ClaimLeaseUntil) || c.ClaimLeaseUntil.Before(c.ClaimedAt) {
			t.Errorf("lease after ExpireClaimOwned = %s, want between claimed_at %s and the old lease %s",
				fmtTime(c.ClaimLeaseUntil), fmtTime(c.ClaimedAt), fmtTime(before.ClaimLeaseUntil))
		}
		if e.local() && (!c.ClaimLeaseUntil.Equal(e.clock.Now()) || !c.LeaseExpired(e.clock.Now())) {
			t.Errorf("lease after ExpireClaimOwned = %s, want now = %s (expired)", fmtTime(c.ClaimLeaseUntil), fmtTime(e.clock.Now()))
		}

		seq = e.lastSeq()
		if err := e.s.ReleaseOwned(e.ctx, board.OwnedParams{Card: "c1", Token: tok}); err != nil {
			t.Fatalf("ReleaseOwned: %v", err)
		}
		c = e.get("c1")
		if want := (claimFamily{Epoch: tok.Epoch}); !familyOf(c).equal(want) {
			t.Errorf("claim family after ReleaseOwned = %s, want %s (cleared, epoch kept)", familyOf(c), want)
		}
		if ev := e.oneEventSince(seq, board.EventReleased, "ReleaseOwned"); ev.Card != "c1" || ev.Data.Marker != markerA {
			t.Errorf("released event = card %q marker %q, want c1 %q", ev.Card, ev.Data.Marker, markerA)
		}
		if c.State != board.StateAwaitingInput || c.LastRunID != "run-1" || !c.AwaitingInput {
			t.Errorf("release touched the card's other fields: %s", fmtCard(c))
		}

		seq = e.lastSeq()
		before = e.get("c1")
		if err := e.s.ReleaseOwned(e.ctx, board.OwnedParams{Card: "c1", Token: tok}); err != nil {
			t.Errorf("ReleaseOwned on a free card = %v, want nil", err)
		}
		e.unchanged(before, "ReleaseOwned on a free card")
		e.noEventsSince(seq, "ReleaseOwned on a free card")
	})

	// A claim its agent gave up on is marked and nothing else: the lease
	// runs on for the silent holder's deadline, the card is not changed in
	// the eyes of a reader of the log, and the mark names that claim only,
	// never the next one (DESIGN.md#keepalive).
	t.Run("DisownMarksTheClaimAlone", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		tok := e.claim("c1", markerA)
		before := e.get("c1")
		if before.Disowned() {
			t.Fatalf("a fresh claim reads as disowned: %s", fmtCard(before))
		}
		e.clock.Advance(time.Second)
		seq := e.lastSeq()
		for i := range 2 { // the second time is a no-op
			if err := e.s.DisownClaimOwned(e.ctx, board.OwnedParams{Card: "c1", Token: tok}); err != nil {
				t.Fatalf("DisownClaimOwned #%d: %v", i+1, err)
			}
		}
		e.noEventsSince(seq, "DisownClaimOwned")
		c := e.get("c1")
		if !c.Disowned() || c.DisownedEpoch != tok.Epoch {
			t.Errorf("after DisownClaimOwned: disowned %v, disowned_epoch %d; want true, the claim's epoch %d", c.Disowned(), c.DisownedEpoch, tok.Epoch)
		}
		want := before
		want.DisownedEpoch = tok.Epoch
		if d := diffCards(c, want); d != "" {
			t.Errorf("DisownClaimOwned changed more than the mark: %s", d)
		}
		if _, err := e.s.Claim(e.ctx, board.ClaimParams{Card: "c1", Marker: markerA, Lease: lease}); err != nil {
			t.Fatalf("the holder's re-claim: %v", err)
		}
		if c := e.get("c1"); !c.Disowned() {
			t.Errorf("the same claim refreshed by its holder lost the mark: %s", fmtCard(c))
		}
		e.release("c1", tok)
		if c := e.get("c1"); c.Disowned() {
			t.Errorf("a free card reads as disowned: %s", fmtCard(c))
		}
		next := e.claim("c1", markerA)
		if c := e.get("c1"); c.Disowned() || next.Epoch <= tok.Epoch {
			t.Errorf("the next claim (epoch %d, after %d) reads as disowned %v: %s", next.Epoch, tok.Epoch, c.Disowned(), fmtCard(c))
		}
	})

	t.Run("RenewPushesLeaseWithoutEvent", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		tok := e.claim("c1", markerA)
		first := e.get("c1")
		seq := e.lastSeq()

		e.clock.Advance(10 * time.Second)
		res, err := e.s.RenewClaims(e.ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "c1", Token: tok}}, Lease: lease})
		if err != nil || len(res) != 1 || res[0].Err != nil {
			t.Fatalf("RenewClaims = %+v, %v; want one success", res, err)
		}
		c := e.get("c1")
		if !res[0].LeaseUntil.Equal(c.ClaimLeaseUntil) {
			t.Errorf("renew result lease %s, stored lease %s: want equal", fmtTime(res[0].LeaseUntil), fmtTime(c.ClaimLeaseUntil))
		}
		if c.ClaimLeaseUntil.Before(first.ClaimLeaseUntil) {
			t.Errorf("renew moved the lease back: %s, was %s", fmtTime(c.ClaimLeaseUntil), fmtTime(first.ClaimLeaseUntil))
		}
		if e.local() && !c.ClaimLeaseUntil.Equal(e.clock.Now().Add(lease)) {
			t.Errorf("renewed lease = %s, want now+lease = %s", fmtTime(c.ClaimLeaseUntil), fmtTime(e.clock.Now().Add(lease)))
		}
		if c.Token() != tok || !c.ClaimedAt.Equal(first.ClaimedAt) {
			t.Errorf("renew changed the claim: %s, was %s", familyOf(c), familyOf(first))
		}
		e.noEventsSince(seq, "RenewClaims")
	})

	t.Run("RenewNeverMovesLeaseBack", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		card, err := e.s.Claim(e.ctx, board.ClaimParams{Card: "c1", Marker: markerA, Lease: time.Hour})
		tok := card.Token()
		if err != nil {
			t.Fatal(err)
		}
		before := e.get("c1")
		e.clock.Advance(time.Second)
		res, err := e.s.RenewClaims(e.ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "c1", Token: tok}}, Lease: time.Second})
		if err != nil || len(res) != 1 || res[0].Err != nil {
			t.Fatalf("RenewClaims with a shorter lease = %+v, %v; want one success", res, err)
		}
		c := e.get("c1")
		if !c.ClaimLeaseUntil.Equal(before.ClaimLeaseUntil) {
			t.Errorf("renew with a shorter lease set lease_until %s, want it left at %s", fmtTime(c.ClaimLeaseUntil), fmtTime(before.ClaimLeaseUntil))
		}
		if !res[0].LeaseUntil.Equal(before.ClaimLeaseUntil) {
			t.Errorf("renew result lease = %s, want the unchanged %s", fmtTime(res[0].LeaseUntil), fmtTime(before.ClaimLeaseUntil))
		}
	})

	t.Run("RenewBatchOneResultPerHoldInOrder", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		for _, id := range []string{"c1", "c2", "c3"} {
			e.card(id, board.StateReady)
		}
		t1 := e.claim("c1", markerA)
		stale := e.claim("c2", markerA)
		e.release("c2", stale)
		cur2 := e.claim("c2", markerB)
		t3 := e.claim("c3", markerA)
		before2 := e.get("c2")
		e.clock.Advance(10 * time.Second)

		holds := []board.Hold{{Card: "c3", Token: t3}, {Card: "c2", Token: stale}, {Card: "c1", Token: t1}}
		res, err := e.s.RenewClaims(e.ctx, board.RenewClaimsParams{Holds: holds, Lease: lease})
		if err != nil {
			t.Fatalf("RenewClaims batch error: %v", err)
		}
		if len(res) != len(holds) {
			t.Fatalf("RenewClaims returned %d results, want %d", len(res), len(holds))
		}
		for i, hd := range holds {
			if res[i].Card != hd.Card {
				t.Errorf("result %d names card %q, want %q (one result per hold, in order)", i, res[i].Card, hd.Card)
			}
		}
		if res[0].Err != nil || res[2].Err != nil {
			t.Errorf("live holds in a batch with a stale one: errors %v, %v; want nil", res[0].Err, res[2].Err)
		}
		wantConflict(t, res[1].Err, markerB, cur2.Epoch, "the stale hold of a batch")
		e.unchanged(before2, "renewing a stale hold")
		for _, id := range []string{"c1", "c3"} {
			c := e.get(id)
			if e.local() && !c.ClaimLeaseUntil.Equal(e.clock.Now().Add(lease)) {
				t.Errorf("%s lease = %s, want renewed to %s", id, fmtTime(c.ClaimLeaseUntil), fmtTime(e.clock.Now().Add(lease)))
			}
		}
	})

	t.Run("ReleaseByMarker", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		t1 := e.claim("c1", markerA)
		e.release("c1", t1)
		tok := e.claim("c1", markerA)
		before := e.get("c1")
		seq := e.lastSeq()

		wantConflict(t, e.s.Release(e.ctx, board.ReleaseParams{Card: "c1", Marker: markerB, Actor: "uid:0"}), markerA, tok.Epoch, "Release by the wrong marker")
		e.unchanged(before, "Release by the wrong marker")
		e.noEventsSince(seq, "Release by the wrong marker")

		// Release matches the marker at any epoch: it is the operator's
		// force-release and the sweeps' tool, not a fenced owner write.
		if err := e.s.Release(e.ctx, board.ReleaseParams{Card: "c1", Marker: markerA, Actor: "uid:0"}); err != nil {
			t.Fatalf("Release by the holding marker: %v", err)
		}
		c := e.get("c1")
		if want := (claimFamily{Epoch: tok.Epoch}); !familyOf(c).equal(want) {
			t.Errorf("claim family after Release = %s, want %s", familyOf(c), want)
		}
		e.oneEventSince(seq, board.EventReleased, "Release")

		seq = e.lastSeq()
		before = e.get("c1")
		if err := e.s.Release(e.ctx, board.ReleaseParams{Card: "c1", Marker: markerA, Actor: "uid:0"}); err != nil {
			t.Errorf("Release of a free card = %v, want nil", err)
		}
		e.unchanged(before, "Release of a free card")
		e.noEventsSince(seq, "Release of a free card")

		// The epoch survives the release: the next holder's fence is higher.
		if next := e.claim("c1", markerB); next.Epoch <= tok.Epoch {
			t.Errorf("epoch after Release and a new claim = %d, want above %d", next.Epoch, tok.Epoch)
		}
	})
}
