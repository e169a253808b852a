package boltstore

import (
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/boardadmin"
)

// idx_label follows every write that changes a card's labels, state or
// claim: label edits (relative, absolute, compare-and-set), the board
// admin's label and state sweeps, claims, routed picks, releases, early
// expiry, a reaper's takeover and a run's verdict (DESIGN.md#label-routing).
// After each step the index is what indexEntries derives from the cards,
// and a routed pick sees the step.
func TestLabelIndexFollowsEveryWrite(t *testing.T) {
	s, clock, _ := openTest(t)
	ctx := t.Context()
	admin, err := boardadmin.New(boardadmin.Config{Store: s, Actor: "uid:0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, nc := range []board.CreateCardParams{
		{ID: "a", State: board.StateReady, Labels: []string{"gpu", "big"}},
		{ID: "b", State: board.StateReady, Labels: []string{"gpu"}},
		{ID: "c", State: board.StateBacklog, Labels: []string{"old", "gpu"}},
		{ID: "d", State: board.StateReady, Labels: []string{"old"}},
		{ID: "e", State: board.StateReady},
	} {
		mustCreate(t, s, nc)
		clock.Advance(time.Millisecond)
	}
	next := func(labels ...string) (string, board.ClaimToken) {
		t.Helper()
		c, err := s.ClaimNext(ctx, board.ClaimNextParams{Marker: "host-300", Lease: lease, Labels: labels})
		tok := c.Token()
		if err != nil {
			t.Fatalf("ClaimNext %q: %v", labels, err)
		}
		return c.ID, tok
	}
	step := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkIndexes(t, s)
	}

	// Claims and releases flip the free flag of every label's entry.
	tokA := mustClaim(t, s, "a", "host-100")
	step("Claim a", nil)
	if id, tok := next("gpu"); id != "b" {
		t.Fatalf("ClaimNext [gpu] with a held = %s, want b", id)
	} else {
		step("ReleaseOwned b", s.ReleaseOwned(ctx, board.OwnedParams{Card: "b", Token: tok}))
	}
	step("ExpireClaimOwned a", s.ExpireClaimOwned(ctx, board.OwnedParams{Card: "a", Token: tokA}))
	clock.Advance(time.Minute)
	_, err = s.ReclaimExpired(ctx, board.ReclaimExpiredParams{Card: "a", Prev: tokA, RecoveryMarker: board.RecoveryPrefix + "host-4242", Cutoff: clock.Now(), Lease: lease})
	step("ReclaimExpired a", err)
	recovered, err := s.GetCard(ctx, board.GetCardParams{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	step("ReleaseOwned a", s.ReleaseOwned(ctx, board.OwnedParams{Card: "a", Token: recovered.Token()}))

	// Label edits move a card between queues.
	_, err = s.AdjustLabels(ctx, board.AdjustLabelsParams{Card: "b", Add: []string{"big"}, Remove: []string{"gpu"}})
	step("AdjustLabels b", err)
	_, err = s.SetLabels(ctx, board.SetLabelsParams{Card: "e", Labels: []string{"gpu"}, Actor: "cli"})
	step("SetLabels e", err)
	_, err = s.SetLabelsFrom(ctx, board.SetLabelsFromParams{Card: "d", Expect: []string{"old"}, Labels: []string{"old", "big"}, Reason: board.ReasonFieldRename, Actor: "uid:0"})
	step("SetLabelsFrom d", err)

	// The admin's sweeps.
	_, err = admin.RenameLabel(ctx, "old", "legacy")
	step("RenameLabel old legacy", err)
	_, err = admin.MergeLabels(ctx, []string{"big"}, "large")
	step("MergeLabels big large", err)
	_, err = admin.DeleteLabel(ctx, "legacy")
	step("DeleteLabel legacy", err)
	_, err = admin.RenameState(ctx, board.StateBacklog, "icebox")
	step("RenameState backlog icebox", err)
	if id, tok := next("gpu", "large"); id != "a" {
		t.Fatalf("ClaimNext [gpu large] after the sweeps = %s, want a", id)
	} else {
		step("ReleaseOwned a", s.ReleaseOwned(ctx, board.OwnedParams{Card: "a", Token: tok}))
	}

	// A state move, then a routed Start and its verdict.
	step("SetState c", s.SetState(ctx, board.MoveParams{Card: "c", To: board.StateReady, Actor: "cli"}))
	st, err := s.Start(ctx, board.StartParams{Next: true, Labels: []string{"gpu"}, Marker: "host-301", Lease: lease,
		Run: board.Run{ID: "r1", Host: "host", PID: 301}})
	step("Start next [gpu]", err)
	if st.Card.ID != "a" {
		t.Fatalf("Start next [gpu] = %s, want a", st.Card.ID)
	}
	_, err = s.Finish(ctx, board.FinishParams{Card: "a", Token: st.Token, RunID: "r1", Status: board.RunFinished})
	step("Finish a", err)
	for _, want := range []string{"c", "e"} {
		if id, _ := next("gpu"); id != want {
			t.Fatalf("ClaimNext [gpu] = %s, want %s", id, want)
		}
	}
	checkIndexes(t, s)
}
