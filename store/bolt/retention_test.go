package boltstore

import (
	"context"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// Prune lists in a read and deletes in a write. A card reopened, claimed
// and pointed at its old run between the two keeps that run: the write
// checks again that the card is finished, so retention never deletes a
// run a claim points at on this twin (DESIGN.md#retention). The same
// race on the fleet twin ends in the watchdog's give-up (DESIGN.md#row-2).
func TestPruneKeepsTheRunOfACardClaimedSinceTheListing(t *testing.T) {
	t.Parallel()
	s, clock, _ := openTest(t)
	ctx := context.Background()
	if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c1", Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Start(ctx, board.StartParams{Card: "c1", Marker: "host-42", Lease: time.Minute, Run: board.Run{ID: "run-old", Host: "host", PID: 42}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "run-old", Status: board.RunFinished}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(48 * time.Hour)
	cut := clock.Now().Add(-24 * time.Hour)
	listed := false
	s.pruneListed = func() {
		listed = true
		if err := s.Reopen(ctx, board.MoveParams{Card: "c1", To: board.StateReady, Actor: "uid:0"}); err != nil {
			t.Fatal(err)
		}
		card, err := s.Claim(ctx, board.ClaimParams{Card: "c1", Marker: "host-43", Lease: time.Minute})
		tok := card.Token()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "run-old"}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Prune(ctx, board.PruneParams{Before: cut})
	if err != nil {
		t.Fatal(err)
	}
	if !listed {
		t.Fatal("Prune listed nothing to prune")
	}
	if res.Runs != 0 || len(res.Cards) != 0 {
		t.Errorf("Prune = %+v; want nothing deleted of a card claimed since the listing", res)
	}
	if _, err := s.GetRun(ctx, board.GetRunParams{ID: "run-old"}); err != nil {
		t.Errorf("the claimed card's run was pruned: %v", err)
	}
}
