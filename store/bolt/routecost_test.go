package boltstore

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// A pick routed by several labels walks the first label's queue and tells
// the cards that lack a further label by the index, without reading their
// documents: a worker asking for [gpu big] on a board of free gpu cards
// none of which is big must not decode every one of them inside the
// write, where every other write (a heartbeat's included) waits behind it
// (DESIGN.md#label-routing). Decoding a card document costs over 25
// allocations; looking its key up in the further label's queue a few (the
// key's lookups in the memtables), so an empty routed pick's allocations
// grow by fewer than 10 per card it passes over.
func TestRoutedPickPassesOverCardsByTheIndex(t *testing.T) {
	s, _, _ := openTest(t)
	ctx := t.Context()
	made := 0
	create := func(n int) {
		for range n {
			id := fmt.Sprintf("c%05d", made)
			made++
			mustCreate(t, s, board.CreateCardParams{ID: id, State: board.StateReady, Title: "a card with an ordinary title", Labels: []string{"gpu", "team-a"}})
		}
	}
	// AllocsPerRun counts every goroutine's allocations, and a goroutine
	// another test left winding down can only add to them: the least of a
	// few readings is the pick's own.
	allocs := func() float64 {
		least := math.Inf(1)
		for range 3 {
			least = min(least, testing.AllocsPerRun(20, func() {
				_, err := s.ClaimNext(ctx, board.ClaimNextParams{Marker: "host-100", Lease: time.Minute, Labels: []string{"gpu", "big"}})
				if !errors.Is(err, board.ErrNotFound) {
					t.Fatalf("ClaimNext [gpu big] = %v, want ErrNotFound", err)
				}
			}))
		}
		return least
	}
	create(10)
	few := allocs()
	create(400)
	many := allocs()
	if perCard := (many - few) / 400; perCard >= 10 {
		t.Errorf("an empty ClaimNext [gpu big] allocates %.0f times over 10 gpu cards and %.0f over 410: %.1f per card passed over, want fewer than 10 (its document is not decoded)", few, many, perCard)
	}
}
