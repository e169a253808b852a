package heartbeat

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// TestDisownedRemembersLossesTheStoreMayStillName: a claim the loop stops
// vouching for while the store may still name its token (no renewal
// confirmed in time, owner dead, keepalive missed, or handed to Disown) is
// reported by Disowned until the card is tracked again or released; a claim
// lost to another holder or to an operator's release is not, since the
// store no longer names it.
func TestDisownedRemembersLossesTheStoreMayStillName(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	me := self(t)
	flaky := h.claim("flaky", marker(700), me)
	h.claim("freed", marker(701), me)
	if err := h.store.Release(h.ctx, board.ReleaseParams{Card: "freed", Marker: marker(701), Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(testLease / 3)
	if res := h.loop.RunOnce(h.ctx); len(res.Lost) != 1 || res.Lost[0].Reason != LostReleased {
		t.Fatalf("first tick lost %+v, want freed released", res.Lost)
	}
	// The store stops answering: flaky's trusted deadline passes.
	h.spy.setFault(func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error) {
		return nil, errors.New("store unreachable")
	})
	h.clock.Advance(testLease)
	if res := h.loop.RunOnce(h.ctx); len(res.Lost) != 1 || res.Lost[0].Reason != LostUnconfirmed {
		t.Fatalf("second tick lost %+v, want flaky unconfirmed", res.Lost)
	}
	h.spy.setFault(nil)

	if got, ok := h.loop.Disowned("flaky"); !ok || got.Epoch != flaky.Token.Epoch || got.Marker != flaky.Token.Marker || got.Reason != LostUnconfirmed {
		t.Errorf("Disowned(flaky) = %+v, %v; want its lost token %+v, unconfirmed", got, ok, flaky.Token)
	}
	if got, ok := h.loop.Disowned("freed"); ok {
		t.Errorf("Disowned(freed) = %+v: an operator freed it, the store names no token", got)
	}

	// Tracked again (a fresh grant): the agent vouches for the card's claim.
	card, err := h.store.Claim(h.ctx, board.ClaimParams{Card: "freed", Marker: marker(702), Lease: testLease})
	tok := card.Token()
	if err != nil {
		t.Fatal(err)
	}
	h.loop.Disown(Lost{Card: "freed", Epoch: tok.Epoch - 1, Marker: marker(701), Reason: LostUnconfirmed})
	if _, ok := h.loop.Disowned("freed"); !ok {
		t.Errorf("Disown of an untracked card was not recorded")
	}
	if err := h.loop.Add(board.Hold{Card: "freed", Token: tok}, me, h.clock.Now(), testLease); err != nil {
		t.Fatal(err)
	}
	if got, ok := h.loop.Disowned("freed"); ok {
		t.Errorf("Disowned(freed) = %+v after a new grant was tracked", got)
	}
	h.loop.Disown(Lost{Card: "freed", Epoch: tok.Epoch, Marker: marker(702), Reason: LostUnconfirmed})
	if got, ok := h.loop.Disowned("freed"); ok {
		t.Errorf("Disown of a tracked card recorded %+v; the tracked claim is the one vouched for", got)
	}
	h.loop.Remove("flaky")
	if got, ok := h.loop.Disowned("flaky"); ok {
		t.Errorf("Disowned(flaky) = %+v after Remove", got)
	}
}
