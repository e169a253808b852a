package heartbeat

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
)

// wantLookupAgrees checks that Lookup answers exactly what Held holds, for
// every card in cards: the same snapshot for a tracked card, nothing for
// the others.
func wantLookupAgrees(t *testing.T, l *Loop, cards ...string) {
	t.Helper()
	held := map[string]Claim{}
	for _, c := range l.Held() {
		held[c.Hold.Card] = c
	}
	for _, card := range cards {
		got, ok := l.Lookup(card)
		want, wantOK := held[card]
		if ok != wantOK || !reflect.DeepEqual(got, want) {
			t.Errorf("Lookup(%q) = %+v, %v; want %+v, %v (as Held reports it)", card, got, ok, want, wantOK)
		}
	}
}

// Lookup is the one-claim view of Held: it follows adds, renewals, re-adds
// under a new token, removals and losses.
func TestLookupFollowsTheTracker(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	me := self(t)
	cards := []string{"a", "b", "c", "never"}

	if _, ok := h.loop.Lookup("a"); ok {
		t.Fatalf("Lookup on an empty tracker found a claim")
	}
	var holds []board.Hold
	for i, card := range cards[:3] {
		holds = append(holds, h.claim(card, marker(600+i), me))
	}
	wantLookupAgrees(t, h.loop, cards...)
	got, ok := h.loop.Lookup("b")
	if !ok || got.Hold != holds[1] || got.Owner != me {
		t.Errorf("Lookup(b) = %+v, %v; want hold %+v owned by %+v", got, ok, holds[1], me)
	}

	// A renewal moves the confirmation and the store's lease; Lookup sees
	// the new values, not the ones of the grant.
	h.clock.Advance(testLease / 3)
	renewedAt := h.clock.Now()
	if res := h.loop.RunOnce(h.ctx); res.Renewed != 3 {
		t.Fatalf("RunOnce = %+v, want 3 renewed", res)
	}
	got, _ = h.loop.Lookup("a")
	if !got.ConfirmedAt.Equal(renewedAt) || !got.LeaseUntil.Equal(renewedAt.Add(testLease)) {
		t.Errorf("after the tick Lookup(a) confirmed %v lease until %v; want %v and %v",
			got.ConfirmedAt, got.LeaseUntil, renewedAt, renewedAt.Add(testLease))
	}
	wantLookupAgrees(t, h.loop, cards...)

	// The worker released b; an operator force-released c, which the next
	// tick declares lost.
	if !h.loop.Remove("b") {
		t.Fatalf("Remove(b) = false, want true")
	}
	if err := h.store.Release(h.ctx, board.ReleaseParams{Card: "c", Marker: holds[2].Token.Marker, Actor: "operator"}); err != nil {
		t.Fatalf("force release: %v", err)
	}
	h.clock.Advance(testLease / 3)
	if res := h.loop.RunOnce(h.ctx); len(res.Lost) != 1 || res.Lost[0].Card != "c" {
		t.Fatalf("RunOnce lost %+v, want c", res.Lost)
	}
	for _, card := range []string{"b", "c"} {
		if got, ok := h.loop.Lookup(card); ok {
			t.Errorf("Lookup(%q) = %+v after it stopped being tracked", card, got)
		}
	}
	wantLookupAgrees(t, h.loop, cards...)

	// A re-grant of c under a new token replaces the record.
	h.clock.Advance(1)
	card, err := h.store.Claim(h.ctx, board.ClaimParams{Card: "c", Marker: marker(700), Lease: testLease})
	tok := card.Token()
	if err != nil {
		t.Fatalf("re-claim c: %v", err)
	}
	if err := h.loop.Add(board.Hold{Card: "c", Token: tok}, me, h.clock.Now(), testLease); err != nil {
		t.Fatalf("Add: %v", err)
	}
	if got, ok := h.loop.Lookup("c"); !ok || got.Hold.Token != tok {
		t.Errorf("Lookup(c) = %+v, %v; want the new token %+v", got, ok, tok)
	}
	wantLookupAgrees(t, h.loop, cards...)
}

// Lookup reads the tracker under its lock while ticks, adds and removals
// write it: run with -race.
func TestLookupIsSafeDuringTicks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	me := self(t)
	const n = 20
	for i := range n {
		h.claim(fmt.Sprintf("card-%02d", i), marker(800+i), me)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 5 {
			h.clock.Advance(testLease / 3)
			h.loop.RunOnce(h.ctx)
		}
		for i := range n / 2 {
			h.loop.Remove(fmt.Sprintf("card-%02d", i))
		}
	}()
	for {
		select {
		case <-done:
			for i := range n {
				_, ok := h.loop.Lookup(fmt.Sprintf("card-%02d", i))
				if want := i >= n/2; ok != want {
					t.Errorf("Lookup(card-%02d) found = %v, want %v", i, ok, want)
				}
			}
			return
		default:
			for i := range n {
				if got, ok := h.loop.Lookup(fmt.Sprintf("card-%02d", i)); ok && got.Hold.Card != fmt.Sprintf("card-%02d", i) {
					t.Fatalf("Lookup(card-%02d) returned the claim on %s", i, got.Hold.Card)
				}
			}
		}
	}
}

// RemoveHold removes only the claim it names: a release that read the card
// before another holder claimed it afresh must not stop the new holder's
// renewals.
func TestRemoveHoldRemovesOnlyThatToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	hold := h.claim("c", marker(600), self(t))
	stale := board.ClaimToken{Marker: hold.Token.Marker, Epoch: hold.Token.Epoch - 1}
	other := board.ClaimToken{Marker: marker(601), Epoch: hold.Token.Epoch}
	for _, tok := range []board.ClaimToken{stale, other} {
		if h.loop.RemoveHold("c", tok) {
			t.Errorf("RemoveHold(%+v) removed the claim held by %+v", tok, hold.Token)
		}
	}
	if _, ok := h.loop.Lookup("c"); !ok {
		t.Fatal("the claim stopped being tracked")
	}
	if !h.loop.RemoveHold("c", hold.Token) {
		t.Error("RemoveHold of the tracked token did not remove it")
	}
	if _, ok := h.loop.Lookup("c"); ok {
		t.Error("still tracked after RemoveHold of its token")
	}
}
