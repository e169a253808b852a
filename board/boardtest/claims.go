package boardtest

import (
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

func exerciseClaims(t *testing.T, h Harness) {
	t.Run("FreeCardClaimStampsTokenLeaseAndEvent", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		before := e.card("c1", board.StateReady)
		seq := e.lastSeq()

		tok := e.claim("c1", markerA)
		if tok.Marker != markerA || tok.Epoch <= before.ClaimEpoch {
			t.Fatalf("Claim token = %+v, want marker %q and an epoch above %d", tok, markerA, before.ClaimEpoch)
		}
		if e.local() && tok.Epoch != before.ClaimEpoch+1 {
			// DESIGN.md#twin-epoch: the local epoch is a counter, stored + 1.
			t.Errorf("local epoch = %d, want stored+1 = %d", tok.Epoch, before.ClaimEpoch+1)
		}
		c := e.get("c1")
		if c.Claim != markerA || c.ClaimEpoch != tok.Epoch {
			t.Errorf("card claim = %q@%d, want %q@%d", c.Claim, c.ClaimEpoch, markerA, tok.Epoch)
		}
		if c.ClaimedAt.IsZero() || !c.ClaimLeaseUntil.After(c.ClaimedAt) {
			t.Errorf("claimed_at %s, lease %s: want both stamped, lease after claimed_at", fmtTime(c.ClaimedAt), fmtTime(c.ClaimLeaseUntil))
		}
		if e.local() {
			now := e.clock.Now()
			if !c.ClaimedAt.Equal(now) || !c.ClaimLeaseUntil.Equal(now.Add(lease)) {
				t.Errorf("claimed_at %s lease %s, want %s and %s", fmtTime(c.ClaimedAt), fmtTime(c.ClaimLeaseUntil), fmtTime(now), fmtTime(now.Add(lease)))
			}
		}
		ev := e.oneEventSince(seq, board.EventClaimed, "Claim")
		if ev.Card != "c1" || ev.Data.Marker != markerA || ev.Data.Epoch != tok.Epoch {
			t.Errorf("claimed event = card %q data %+v, want card c1 marker %q epoch %d", ev.Card, ev.Data, markerA, tok.Epoch)
		}
		if got := c.Token(); got != tok {
			t.Errorf("card.Token() = %+v, want %+v", got, tok)
		}
	})

	t.Run("SameMarkerReclaimKeepsEpochRefreshesLeaseOnly", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		tok := e.claim("c1", markerA)
		first := e.get("c1")
		seq := e.lastSeq()

		e.clock.Advance(10 * time.Second)
		again := e.claim("c1", markerA)
		if again != tok {
			t.Errorf("re-claim by the holder = %+v, want the same token %+v", again, tok)
		}
		c := e.get("c1")
		if c.ClaimLeaseUntil.Before(first.ClaimLeaseUntil) {
			t.Errorf("re-claim moved the lease back: %s, was %s", fmtTime(c.ClaimLeaseUntil), fmtTime(first.ClaimLeaseUntil))
		}
		if e.local() && !c.ClaimLeaseUntil.Equal(e.clock.Now().Add(lease)) {
			t.Errorf("re-claim lease = %s, want now+lease = %s", fmtTime(c.ClaimLeaseUntil), fmtTime(e.clock.Now().Add(lease)))
		}
		// Everything but the lease is as before: same epoch, same
		// claimed_at, no updated_at bump.
		want := first
		want.ClaimLeaseUntil = c.ClaimLeaseUntil
		if d := diffCards(c, want); d != "" {
			t.Errorf("idempotent re-claim changed more than the lease: %s", d)
		}
		e.noEventsSince(seq, "idempotent re-claim")
	})

	t.Run("OtherMarkerIsConflictNamingHolder", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		tok := e.claim("c1", markerA)
		before := e.get("c1")
		seq := e.lastSeq()

		_, err := e.s.Claim(e.ctx, board.ClaimParams{Card: "c1", Marker: markerB, Lease: lease})
		wantConflict(t, err, markerA, tok.Epoch, "Claim by another marker")
		e.unchanged(before, "a refused claim")
		e.noEventsSince(seq, "a refused claim")
	})

	t.Run("ExpiredClaimIsNotTakenByClaim", func(t *testing.T) {
		// Only ReclaimExpired transfers: a plain Claim never steals, even
		// from a holder whose lease ran out.
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		tok := e.claim("c1", markerA)
		before := e.expire("c1", tok)
		e.clock.Advance(time.Hour)
		seq := e.lastSeq()

		_, err := e.s.Claim(e.ctx, board.ClaimParams{Card: "c1", Marker: markerB, Lease: lease})
		wantConflict(t, err, markerA, tok.Epoch, "Claim over an expired lease")
		e.unchanged(before, "a refused claim")
		e.noEventsSince(seq, "a refused claim")
	})

	t.Run("NewAcquisitionRaisesEpoch", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		t1 := e.claim("c1", markerA)
		e.release("c1", t1)
		t2 := e.claim("c1", markerB)
		e.release("c1", t2)
		// Markers are per process, not per claim: the same worker claiming
		// again must get a new fence, or its two holds would share a token
		// (DESIGN.md#epoch-monotone).
		t3 := e.claim("c1", markerA)
		if !(t1.Epoch < t2.Epoch && t2.Epoch < t3.Epoch) {
			t.Errorf("epochs of successive acquisitions = %d, %d, %d, want strictly increasing", t1.Epoch, t2.Epoch, t3.Epoch)
		}
		if e.local() && (t2.Epoch != t1.Epoch+1 || t3.Epoch != t2.Epoch+1) {
			t.Errorf("local epochs = %d, %d, %d, want a counter stepping by one", t1.Epoch, t2.Epoch, t3.Epoch)
		}
	})

	t.Run("ClaimNextTakesOldestUnclaimedPoolCard", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		// Created oldest first; only c3 and c5 are claimable: c1 is outside
		// the pool, c2 is held, c4 is in a sink.
		e.card("c1", board.StateBacklog)
		e.clock.Advance(time.Second)
		e.card("c2", board.StateReady)
		e.clock.Advance(time.Second)
		e.card("c3", board.StateReady)
		e.clock.Advance(time.Second)
		e.card("c4", board.StateReady)
		e.setState("c4", board.StateDone)
		e.clock.Advance(time.Second)
		e.card("c5", board.StateReady)
		e.clock.Advance(time.Second)
		held := e.claim("c2", markerA)

		for _, want := range []string{"c3", "c5"} {
			seq := e.lastSeq()
			c, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease})
			tok := c.Token()
			if err != nil {
				t.Fatalf("ClaimNext: %v, want card %s", err, want)
			}
			if c.ID != want {
				t.Fatalf("ClaimNext took %q, want the oldest unclaimed pool card %q", c.ID, want)
			}
			if tok.Marker != markerB || c.Claim != markerB || c.ClaimEpoch != tok.Epoch {
				t.Errorf("ClaimNext returned card claim %q@%d and token %+v, want both %q at one epoch", c.Claim, c.ClaimEpoch, tok, markerB)
			}
			if got := e.get(want); got.Token() != tok {
				t.Errorf("stored token of %s = %+v, want %+v", want, got.Token(), tok)
			}
			ev := e.oneEventSince(seq, board.EventClaimed, "ClaimNext")
			if ev.Card != want || ev.Data.Epoch != tok.Epoch {
				t.Errorf("ClaimNext event = card %q epoch %d, want %q epoch %d", ev.Card, ev.Data.Epoch, want, tok.Epoch)
			}
		}
		seq := e.lastSeq()
		_, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease})
		wantErr(t, err, board.ErrNotFound, "ClaimNext with no claimable card")
		e.noEventsSince(seq, "an empty ClaimNext")
		if got := e.get("c2").Token(); got != held {
			t.Errorf("ClaimNext disturbed a held card: token %+v, want %+v", got, held)
		}
		for _, id := range []string{"c1", "c4"} {
			if c := e.get(id); c.Claimed() {
				t.Errorf("ClaimNext claimed %s in non-pool state %q", id, c.State)
			}
		}
	})

	// DESIGN.md#label-routing: a worker that asks for labels takes the
	// oldest free pool card carrying every one of them, and no other.
	t.Run("ClaimNextRoutedByLabels", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		for _, nc := range []board.CreateCardParams{
			{ID: "plain", State: board.StateReady},
			{ID: "gpu-held", State: board.StateReady, Labels: []string{"gpu"}},
			{ID: "gpu-done", State: board.StateReady, Labels: []string{"gpu"}},
			{ID: "gpu-backlog", State: board.StateBacklog, Labels: []string{"gpu"}},
			{ID: "gpu-big", State: board.StateReady, Labels: []string{"big", "gpu"}},
			{ID: "gpu", State: board.StateReady, Labels: []string{"gpu"}},
			{ID: "big", State: board.StateReady, Labels: []string{"big"}},
		} {
			nc.Actor = "cli"
			e.create(nc)
			e.clock.Advance(time.Second)
		}
		e.claim("gpu-held", markerA)
		e.setState("gpu-done", board.StateDone)

		next := func(labels ...string) (board.Card, error) {
			return e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease, Labels: labels})
		}
		c, err := next("gpu", "big")
		tok := c.Token()
		if err != nil || c.ID != "gpu-big" {
			t.Fatalf("ClaimNext [gpu big] = %q, %v; want gpu-big, the only free pool card with both", c.ID, err)
		}
		e.release("gpu-big", tok)
		for _, want := range []string{"gpu-big", "gpu"} {
			if c, err := next("gpu"); err != nil || c.ID != want {
				t.Fatalf("ClaimNext [gpu] = %q, %v; want %s (oldest free pool card labelled gpu)", c.ID, err, want)
			}
		}
		seq := e.lastSeq()
		_, err = next("gpu")
		wantErr(t, err, board.ErrNotFound, "ClaimNext [gpu] with every gpu card held, done or in the backlog")
		e.noEventsSince(seq, "an empty routed ClaimNext")
		// A label removed is no longer routed by; one added is.
		if _, err := e.s.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "big", Remove: []string{"big"}, Add: []string{"gpu"}, Actor: "cli"}); err != nil {
			t.Fatal(err)
		}
		if _, err := next("big"); !errIs(err, board.ErrNotFound) {
			t.Errorf("ClaimNext [big] after the label was removed = %v, want ErrNotFound", err)
		}
		if c, err := next("gpu"); err != nil || c.ID != "big" {
			t.Errorf("ClaimNext [gpu] after the label was added = %q, %v; want big", c.ID, err)
		}
		if c, err := next(); err != nil || c.ID != "plain" {
			t.Errorf("ClaimNext with no labels = %q, %v; want plain, the oldest free pool card", c.ID, err)
		}
		// Start next routes the same way.
		e.create(board.CreateCardParams{ID: "gpu-later", State: board.StateReady, Labels: []string{"gpu"}, Actor: "cli"})
		st, err := e.s.Start(e.ctx, board.StartParams{Next: true, Labels: []string{"gpu"}, Marker: markerB, Lease: lease,
			Run: board.Run{ID: "run-routed", Host: "host-b", PID: 4343}})
		if err != nil || st.Card.ID != "gpu-later" {
			t.Errorf("Start next [gpu] = %q, %v; want gpu-later", st.Card.ID, err)
		}
		_, err = e.s.Start(e.ctx, board.StartParams{Card: "plain", Labels: []string{"gpu"}, Marker: markerB, Lease: lease,
			Run: board.Run{ID: "run-named", Host: "host-b", PID: 4343}})
		wantErr(t, err, board.ErrInvalidArgument, "Start of a named card with labels")
	})

	t.Run("ClaimNextOnEmptyBoardIsNotFound", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		_, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerA, Lease: lease})
		wantErr(t, err, board.ErrNotFound, "ClaimNext on an empty board")
	})

	t.Run("ClaimNextSkipsReleasedThenReturnsIt", func(t *testing.T) {
		// A released card is free again and eligible: the epoch is kept on
		// release and raised by the next acquisition.
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		c, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerA, Lease: lease})
		tok := c.Token()
		if err != nil || c.ID != "c1" {
			t.Fatalf("ClaimNext = %q, %v; want c1", c.ID, err)
		}
		if _, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease}); !errIs(err, board.ErrNotFound) {
			t.Errorf("ClaimNext with the only card held: got %v, want ErrNotFound", err)
		}
		e.release("c1", tok)
		c2, err := e.s.ClaimNext(e.ctx, board.ClaimNextParams{Marker: markerB, Lease: lease})
		tok2 := c2.Token()
		if err != nil || c2.ID != "c1" {
			t.Fatalf("ClaimNext after release = %q, %v; want c1", c2.ID, err)
		}
		if tok2.Epoch <= tok.Epoch {
			t.Errorf("epoch after re-acquisition = %d, want above %d", tok2.Epoch, tok.Epoch)
		}
	})
}
