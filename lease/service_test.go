package lease_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/lease"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// rig is a lease service over a real bbolt file and a heartbeat, on a
// manual clock.
type rig struct {
	clk *boardtest.ManualClock
	s   *boltstore.Store
	hb  *heartbeat.Loop
	svc *lease.Service
}

const term = 30 * time.Second

func newRig(t *testing.T, mode heartbeat.Mode) rig {
	t.Helper()
	clk := boardtest.NewManualClock(time.Date(2031, 9, 2, 12, 0, 0, 0, time.UTC))
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	hb, err := heartbeat.New(heartbeat.Config{Store: s, Clock: clk, Lease: func() time.Duration { return term },
		Mode: func() heartbeat.Mode { return mode }})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := lease.New(lease.Config{Store: s, Claims: hb, Clock: clk, Lease: func() time.Duration { return term }})
	if err != nil {
		t.Fatal(err)
	}
	return rig{clk: clk, s: s, hb: hb, svc: svc}
}

// A Start whose first answer was lost is retried with the same run id and
// answered from what the first attempt wrote. The agent counts the claim
// from the retry's attempt, so the store's lease must reach at least as
// far: the agent never vouches for a claim past the lease the store holds.
func TestRetriedStartIsNotTrustedPastTheStoredLease(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, heartbeat.ModePID)
	clk, s, hb, svc := r.clk, r.s, r.hb, r.svc
	if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c1", State: board.StateReady}); err != nil {
		t.Fatal(err)
	}
	w := lease.Worker{Marker: "hosta-4242", Owner: heartbeat.Owner{PID: 4242, KeepaliveID: "hosta-4242"}}
	// The first attempt lands in the store; its answer never reaches the
	// agent, which tracks nothing.
	if _, err := s.Start(ctx, board.StartParams{Card: "c1", Marker: w.Marker, Lease: term, Run: board.Run{ID: "run-1"}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(25 * time.Second)
	if _, err := svc.Start(ctx, w, apitype.StartRequest{Card: "c1", RunID: "run-1"}); err != nil {
		t.Fatalf("retried Start: %v", err)
	}
	card, err := s.GetCard(ctx, board.GetCardParams{ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	h, ok := hb.Lookup("c1")
	if !ok {
		t.Fatal("the retried Start's claim is not tracked")
	}
	if h.TrustedUntil.After(card.ClaimLeaseUntil) {
		t.Errorf("the agent trusts the claim until %s, %s past the lease the store holds (%s)",
			h.TrustedUntil.Format(time.TimeOnly), h.TrustedUntil.Sub(card.ClaimLeaseUntil), card.ClaimLeaseUntil.Format(time.TimeOnly))
	}
}

// A holder may always hand back its own claim, even one the agent stopped
// vouching for while the store still names it: declared lost when no
// renewal was confirmed by its trusted deadline, or disowned by the boot
// sweep. A release only gives the card up. Every other owner write on such
// a claim stays refused: the agent no longer vouches for it.
func TestHolderMayReleaseAClaimTheAgentDisowned(t *testing.T) {
	for _, how := range []string{"unconfirmed", "boot-sweep", "reused-pid"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, heartbeat.ModeKeepalive)
			clk, s, hb, svc := r.clk, r.s, r.hb, r.svc
			if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c1", State: board.StateReady}); err != nil {
				t.Fatal(err)
			}
			w := lease.Worker{Marker: "hosta-4242", Owner: heartbeat.Owner{KeepaliveID: "hosta-4242"}}
			var epoch int64
			switch how {
			case "unconfirmed":
				g, err := svc.Claim(ctx, w, apitype.ClaimRequest{Card: "c1"})
				if err != nil {
					t.Fatal(err)
				}
				epoch = g.Token.Epoch
				// The holder keeps pinging, but no renewal is confirmed
				// before its trusted deadline: the agent declares it lost.
				clk.Advance(term)
				hb.Ping(w.Owner.KeepaliveID)
				hb.RunOnce(ctx)
				if _, held := hb.Lookup("c1"); held {
					t.Fatal("setup: the claim is still tracked past its trusted deadline")
				}
			case "boot-sweep", "reused-pid":
				card, err := s.Claim(ctx, board.ClaimParams{Card: "c1", Marker: w.Marker, Lease: term})
				tok := card.Token()
				if err != nil {
					t.Fatal(err)
				}
				epoch = tok.Epoch
				lost := heartbeat.Lost{Card: "c1", Epoch: epoch, Marker: w.Marker, Reason: heartbeat.LostUnconfirmed}
				if how == "reused-pid" {
					// The holder had an identity the caller does not:
					// the caller got its pid since, and owns nothing.
					lost.Owner = heartbeat.Owner{PID: 4242, Start: pidprobe.Identity{BootID: "boot-1", StartTicks: 100}}
					w.Owner = heartbeat.Owner{PID: 4242, Start: pidprobe.Identity{BootID: "boot-1", StartTicks: 900}}
				}
				hb.Disown(lost)
			}
			if c, err := s.GetCard(ctx, board.GetCardParams{ID: "c1"}); err != nil || c.Claim != w.Marker || c.ClaimEpoch != epoch {
				t.Fatalf("setup: card %+v, %v; want the store still naming %s@%d", c, err, w.Marker, epoch)
			}
			if _, err := svc.SetState(ctx, w, "c1", apitype.SetStateRequest{Fenced: apitype.Fenced{Epoch: epoch}, To: board.StateBacklog}); !errors.Is(err, board.ErrClaimConflict) {
				t.Errorf("owner move on a claim the agent disowned = %v, want ErrClaimConflict", err)
			}
			if how == "reused-pid" {
				if err := svc.Release(ctx, w, "c1", epoch); !errors.Is(err, board.ErrClaimConflict) {
					t.Errorf("release by a process that reused the holder's pid = %v, want ErrClaimConflict", err)
				}
				if c, err := s.GetCard(ctx, board.GetCardParams{ID: "c1"}); err != nil || c.Claim != w.Marker {
					t.Errorf("card after the refused release: %+v, %v; want still claimed", c, err)
				}
				return
			}
			if err := svc.Release(ctx, w, "c1", epoch); err != nil {
				t.Fatalf("the holder's release of its own disowned claim: %v", err)
			}
			if c, err := s.GetCard(ctx, board.GetCardParams{ID: "c1"}); err != nil || c.Claimed() {
				t.Errorf("card after the release: %s@%d, %v; want it free", c.Claim, c.ClaimEpoch, err)
			}
			if _, ok := hb.Disowned("c1"); ok {
				t.Error("the released claim is still remembered as disowned")
			}
			// Another process naming that epoch, now stale, is still
			// answered by the fence: the card is free, nothing to do.
			if err := svc.Release(ctx, lease.Worker{Marker: "hosta-5151", Owner: heartbeat.Owner{KeepaliveID: "hosta-5151"}}, "c1", epoch); err != nil {
				t.Errorf("a stale release of a free card = %v, want nil", err)
			}
		})
	}
}

// The agent committed and tracked a Start, and its answer never reached the
// worker (its connection broke). The worker's retry, with the same run id,
// gets the very grant the agent holds: one claim, one epoch, one run.
func TestStartWhoseAnswerWasLostIsAnsweredAgain(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, heartbeat.ModeKeepalive)
	clk, s, hb, svc := r.clk, r.s, r.hb, r.svc
	for _, id := range []string{"c1", "c2"} {
		if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateReady}); err != nil {
			t.Fatal(err)
		}
	}
	w := lease.Worker{Marker: "hosta-4242", Owner: heartbeat.Owner{KeepaliveID: "hosta-4242"}}
	for _, req := range []apitype.StartRequest{{Card: "c1", RunID: "run-1"}, {Next: true, RunID: "run-2"}} {
		first, err := svc.Start(ctx, w, req) // the answer the worker never saw
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		again, err := svc.Start(ctx, w, req)
		if err != nil {
			t.Fatalf("retry of %+v: %v", req, err)
		}
		if again.Token != first.Token || again.Card.ID != first.Card.ID || again.Run.ID != first.Run.ID {
			t.Errorf("retry of %+v granted %s %+v run %s, want the first answer's %s %+v run %s",
				req, again.Card.ID, again.Token, again.Run.ID, first.Card.ID, first.Token, first.Run.ID)
		}
	}
	if held := hb.Held(); len(held) != 2 {
		t.Errorf("the heartbeat holds %d claims, want 2 (one per Start, retries included)", len(held))
	}
	evs, err := s.Events(ctx, board.EventsParams{After: 0, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	claims := 0
	for _, e := range evs {
		if e.Type == board.EventClaimed {
			claims++
		}
	}
	if claims != 2 {
		t.Errorf("event log holds %d claims, want 2", claims)
	}
}
