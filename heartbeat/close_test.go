package heartbeat

import (
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
)

// TestATickRacingTheHoldersOwnCloseLosesNothing: the holder's Finish (or
// release) frees the card in the store while a tick that batched the claim
// is renewing it. The renewal finds the card free; with the close begun
// (BeginClose) that is the close's own write, so the claim is dropped and
// not reported lost — a worker told "claim lost" would take a Finish that
// landed for one that did not. Without a close in flight the same tick is a
// loss, a close does not hide a claim taken by another holder, and a close
// that fails after the tick dropped its claim reports the loss then: the
// card was freed by someone else.
func TestATickRacingTheHoldersOwnCloseLosesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	me := self(t)
	finishing := h.claim("finishing", marker(800), me)
	freed := h.claim("freed", marker(801), me)
	taken := h.claim("taken", marker(802), me)
	failing := h.claim("failing", marker(804), me)

	end := h.loop.BeginClose("finishing", finishing.Token)
	endTaken := h.loop.BeginClose("taken", taken.Token)
	endFailing := h.loop.BeginClose("failing", failing.Token)
	// The holder's own write frees "finishing"; an operator frees "freed";
	// "taken" goes to another holder.
	if err := h.store.ReleaseOwned(h.ctx, board.OwnedParams{Card: "finishing", Token: finishing.Token}); err != nil {
		t.Fatal(err)
	}
	if err := h.store.Release(h.ctx, board.ReleaseParams{Card: "freed", Marker: freed.Token.Marker, Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	// An operator frees "failing" while its holder's close is in flight;
	// that close will fail.
	if err := h.store.Release(h.ctx, board.ReleaseParams{Card: "failing", Marker: failing.Token.Marker, Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	if err := h.store.Release(h.ctx, board.ReleaseParams{Card: "taken", Marker: taken.Token.Marker, Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Claim(h.ctx, board.ClaimParams{Card: "taken", Marker: marker(803), Lease: testLease}); err != nil {
		t.Fatal(err)
	}

	h.clock.Advance(testLease / 3)
	res := h.loop.RunOnce(h.ctx)
	lost := map[string]LostReason{}
	for _, l := range res.Lost {
		lost[l.Card] = l.Reason
	}
	if r, ok := lost["finishing"]; ok {
		t.Errorf("the claim its holder was closing was reported lost (%s)", r)
	}
	if res.Closed != 2 {
		t.Errorf("tick closed %d claims, want 2 (finishing, failing)", res.Closed)
	}
	if _, ok := h.loop.Lookup("finishing"); ok {
		t.Error("the closed claim is still tracked")
	}
	if lost["freed"] != LostReleased {
		t.Errorf("an operator's release with no close in flight: lost %q, want released", lost["freed"])
	}
	if lost["taken"] != LostSuperseded {
		t.Errorf("a claim taken by another holder while closing: lost %q, want superseded", lost["taken"])
	}

	h.mu.Lock()
	before := len(h.lost)
	h.mu.Unlock()
	end(true)
	endTaken(false)
	endFailing(false)
	h.mu.Lock()
	late := append([]Lost(nil), h.lost[before:]...)
	h.mu.Unlock()
	if len(late) != 1 || late[0].Card != "failing" || late[0].Reason != LostReleased {
		t.Errorf("reported after the closes ended: %+v, want only failing, released", late)
	}
}
