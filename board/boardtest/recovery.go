package boardtest

import (
	"slices"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
)

// exerciseRecoveryListing pins ListCards with RecoveryOnly: exactly the
// cards held by a recovery (reaper:) claim, in creation order, whatever
// the lease says, kept in step by every claim change — a worker's claim, a
// reclaim, the holder's release, a release by marker and a worker's claim
// after it. It is the recovery sweep's population, read on every watchdog
// pass (DESIGN.md#recovery-sweep), so a store that lists one card too many reads
// worker claims for nothing and one too few leaves an abandoned recovery
// claim on its card for ever.
func exerciseRecoveryListing(t *testing.T, h Harness) {
	t.Parallel()
	e := open(t, h)
	// Awaiting input: a column a released card stays in on either board (a
	// release files a card out of the fleet's running column).
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		e.card(id, board.StateAwaitingInput)
	}
	// reclaim ends the holder's lease and transfers the claim to rec.
	reclaim := func(id, rec string, tok board.ClaimToken) board.ClaimToken {
		t.Helper()
		c := e.expire(id, tok)
		card, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: id, Prev: tok, RecoveryMarker: rec, Cutoff: c.ClaimLeaseUntil, Lease: lease})
		got := card.Token()
		if err != nil {
			t.Fatalf("ReclaimExpired(%s → %s): %v", id, rec, err)
		}
		return got
	}
	list := func(f board.ListCardsParams) []string {
		t.Helper()
		cs, err := e.s.ListCards(e.ctx, f)
		if err != nil {
			t.Fatalf("ListCards(%+v): %v", f, err)
		}
		for _, c := range cs {
			if f.RecoveryOnly && !board.IsRecoveryMarker(c.Claim) {
				t.Errorf("ListCards(%+v) returned %s, not held by a recovery claim", f, fmtCard(c))
			}
		}
		return ids(cs)
	}
	check := func(step string, want []string) {
		t.Helper()
		if got := list(board.ListCardsParams{RecoveryOnly: true}); !slices.Equal(got, want) {
			t.Errorf("after %s: ListCards(RecoveryOnly) = %q, want %q", step, got, want)
		}
		// RecoveryOnly implies ClaimedOnly: naming both changes nothing.
		if got := list(board.ListCardsParams{RecoveryOnly: true, ClaimedOnly: true}); !slices.Equal(got, want) {
			t.Errorf("after %s: ListCards(RecoveryOnly, ClaimedOnly) = %q, want %q", step, got, want)
		}
	}

	check("no claim", nil)
	t1 := e.claim("c1", markerA)
	t2 := e.claim("c2", markerA)
	e.claim("c4", markerB)
	check("workers' claims", nil)

	r1 := reclaim("c1", recovery, t1)
	check("a reclaim", []string{"c1"})
	r2 := reclaim("c2", recovery2, t2)
	check("a second reclaim by another reaper", []string{"c1", "c2"})
	// The recovery lease ending changes nothing: the listing is by marker.
	e.expire("c2", r2)
	check("the end of a recovery lease", []string{"c1", "c2"})
	t3 := e.claim("c3", markerB)
	check("a worker's claim next to them", []string{"c1", "c2"})

	e.release("c1", r1)
	check("the recovery holder's release", []string{"c2"})
	t1 = e.claim("c1", markerB)
	check("a worker's claim of the released card", []string{"c2"})
	if err := e.s.Release(e.ctx, board.ReleaseParams{Card: "c2", Marker: recovery2, Actor: "uid:0"}); err != nil {
		t.Fatalf("Release(c2, %s): %v", recovery2, err)
	}
	check("a release by marker", nil)

	reclaim("c3", recovery, t3)
	reclaim("c1", recovery2, t1)
	check("reclaims of re-claimed cards", []string{"c1", "c3"})

	// The other filters still apply, and the limit is taken in the query.
	if got, want := list(board.ListCardsParams{RecoveryOnly: true, Limit: 1}), []string{"c1"}; !slices.Equal(got, want) {
		t.Errorf("ListCards(RecoveryOnly, Limit 1) = %q, want %q", got, want)
	}
	e.setState("c3", board.StateReady)
	if got, want := list(board.ListCardsParams{RecoveryOnly: true, State: board.StateReady}), []string{"c3"}; !slices.Equal(got, want) {
		t.Errorf("ListCards(RecoveryOnly, State ready) = %q, want %q", got, want)
	}
	if got, want := list(board.ListCardsParams{ClaimedOnly: true}), []string{"c1", "c3", "c4"}; !slices.Equal(got, want) {
		t.Errorf("ListCards(ClaimedOnly) = %q, want %q", got, want)
	}
}

// exerciseClaimHostsListing pins ListCards with ClaimHosts: exactly the
// cards whose claim marker names one of the hosts — a worker's or a
// recovery claim's — in creation order. A host whose name is another's
// prefix ("alpha" and "alpha-b") is told apart. It is the boot sweep's
// population (DESIGN.md#boot-sweep): one too few leaves a dead worker's
// claim unjudged at start; one too many reads the fleet for nothing.
func exerciseClaimHostsListing(t *testing.T, h Harness) {
	t.Parallel()
	e := open(t, h)
	for _, id := range []string{"a1", "ab", "ar", "b1", "ax", "free"} {
		e.card(id, board.StateAwaitingInput)
	}
	ta := e.claim("a1", "alpha-101")
	e.claim("ab", "alpha-b-102")
	tr := e.claim("ar", "alpha-103")
	c := e.expire("ar", tr)
	if _, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "ar", Prev: tr, RecoveryMarker: "reaper:alpha-7", Cutoff: c.ClaimLeaseUntil, Lease: lease}); err != nil {
		t.Fatalf("ReclaimExpired(ar): %v", err)
	}
	e.claim("b1", "beta-104")
	e.claim("ax", "alphax-105")
	list := func(f board.ListCardsParams) []string {
		t.Helper()
		cs, err := e.s.ListCards(e.ctx, f)
		if err != nil {
			t.Fatalf("ListCards(%+v): %v", f, err)
		}
		return ids(cs)
	}
	for _, tc := range []struct {
		f    board.ListCardsParams
		want []string
	}{
		{board.ListCardsParams{ClaimHosts: []string{"alpha"}}, []string{"a1", "ar"}},
		{board.ListCardsParams{ClaimHosts: []string{"alpha"}, ClaimedOnly: true}, []string{"a1", "ar"}},
		{board.ListCardsParams{ClaimHosts: []string{"alpha-b"}}, []string{"ab"}},
		{board.ListCardsParams{ClaimHosts: []string{"alpha", "beta"}}, []string{"a1", "ar", "b1"}},
		{board.ListCardsParams{ClaimHosts: []string{"alpha"}, RecoveryOnly: true}, []string{"ar"}},
		{board.ListCardsParams{ClaimHosts: []string{"alpha"}, Limit: 1}, []string{"a1"}},
		{board.ListCardsParams{ClaimHosts: []string{"gamma"}}, nil},
	} {
		if got := list(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("ListCards(%+v) = %q, want %q", tc.f, got, tc.want)
		}
	}
	// A release takes the card out of its host's listing.
	e.release("a1", ta)
	if got, want := list(board.ListCardsParams{ClaimHosts: []string{"alpha"}}), []string{"ar"}; !slices.Equal(got, want) {
		t.Errorf("after a release: ListCards(ClaimHosts alpha) = %q, want %q", got, want)
	}
}
