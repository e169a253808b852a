package boardtest

import (
	"maps"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
)

// exerciseCountCards pins CountCards against the cards as listed, after
// every kind of write that changes what it counts: creations in several
// states, claims, a move, a release, a transfer to a recovery claim and a
// delete (DESIGN.md#queue-depth).
func exerciseCountCards(t *testing.T, h Harness) {
	t.Parallel()
	e := open(t, h)
	check := func(step string) {
		t.Helper()
		got, err := e.s.CountCards(e.ctx)
		if err != nil {
			t.Fatalf("after %s: CountCards: %v", step, err)
		}
		cards, err := e.s.ListCards(e.ctx, board.ListCardsParams{})
		if err != nil {
			t.Fatal(err)
		}
		want := board.CardCounts{States: map[string]int{}}
		for _, c := range cards {
			want.States[c.State]++
			if c.Claimed() {
				want.Claimed++
			}
		}
		if !maps.Equal(got.States, want.States) || got.Claimed != want.Claimed {
			t.Errorf("after %s: CountCards = %v claimed %d; the cards as listed: %v claimed %d", step, got.States, got.Claimed, want.States, want.Claimed)
		}
	}
	check("nothing")
	e.card("a", board.StateReady)
	e.card("b", board.StateReady)
	e.card("c", board.StateBacklog)
	e.card("d", board.StateAwaitingInput)
	check("four creations")
	tokA := e.claim("a", markerA)
	tokD := e.claim("d", markerB)
	check("two claims")
	e.setState("c", board.StateReady)
	check("a move")
	e.release("a", tokA)
	check("a release")
	c := e.expire("d", tokD)
	if _, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "d", Prev: tokD, RecoveryMarker: recovery, Cutoff: c.ClaimLeaseUntil, Lease: lease}); err != nil {
		t.Fatal(err)
	}
	check("a transfer to a recovery claim")
	if _, err := e.s.DeleteCard(e.ctx, board.DeleteCardParams{ID: "b", Actor: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	check("a delete")
}
