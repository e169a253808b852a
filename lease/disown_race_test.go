package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/lease"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// beforeStoreClaim is the bbolt store with a hook run once, just before the
// next Claim reaches the store: the moment between the service's
// beforeClaim check and the store's answer, where a heartbeat tick running
// on its own goroutine may land.
type beforeStoreClaim struct {
	*boltstore.Store
	once sync.Once
	hook func()
}

func (s *beforeStoreClaim) Claim(ctx context.Context, p board.ClaimParams) (board.Card, error) {
	s.once.Do(s.hook)
	return s.Store.Claim(ctx, p)
}

func (s *beforeStoreClaim) Start(ctx context.Context, p board.StartParams) (board.StartResult, error) {
	s.once.Do(s.hook)
	return s.Store.Start(ctx, p)
}

// A worker's re-claim of a card it holds may race the heartbeat tick that
// gives the claim up for a missed keepalive: the tick runs after the
// service checked the card is not disowned and before the store answers.
// The store's same-marker Claim then hands back the very token the tick
// just declared lost and marked disowned in the store (DESIGN.md#keepalive).
// The agent must not vouch for it again: it is the lost token
// (DESIGN.md#shutdown-keeps-fences promises a fresh epoch), and its store
// mark would make a restarted agent's boot sweep drop the live worker's
// claim (DESIGN.md#boot-sweep).
func TestReclaimRacingAKeepaliveLossDoesNotRevouchTheMarkedToken(t *testing.T) {
	for _, verb := range []string{"Claim", "Start"} {
		t.Run(verb, func(t *testing.T) { testReclaimRacingAKeepaliveLoss(t, verb) })
	}
}

func testReclaimRacingAKeepaliveLoss(t *testing.T, verb string) {
	ctx := context.Background()
	r := newRig(t, heartbeat.ModeKeepalive)
	clk, s, hb := r.clk, r.s, r.hb
	if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c1", State: board.StateReady}); err != nil {
		t.Fatal(err)
	}
	w := lease.Worker{Marker: "hosta~pidns-7", Owner: heartbeat.Owner{KeepaliveID: "hosta~pidns-7"}}
	var lost []heartbeat.TickResult
	hooked := &beforeStoreClaim{Store: s}
	hooked.hook = func() {
		// The worker was silent past the keepalive window (but not past
		// its trusted deadline); the tick lands now.
		lost = append(lost, hb.RunOnce(ctx))
	}
	svc, err := lease.New(lease.Config{Store: hooked, Claims: hb, Clock: clk, Lease: func() time.Duration { return term }})
	if err != nil {
		t.Fatal(err)
	}
	var first board.Card
	if verb == "Start" {
		st, err := s.Start(ctx, board.StartParams{Card: "c1", Marker: w.Marker, Lease: term, Run: board.Run{ID: "run-1"}})
		if err != nil {
			t.Fatal(err)
		}
		first = st.Card
	} else {
		c, err := s.Claim(ctx, board.ClaimParams{Card: "c1", Marker: w.Marker, Lease: term})
		if err != nil {
			t.Fatal(err)
		}
		first = c
	}
	if err := hb.Add(board.Hold{Card: "c1", Token: first.Token()}, w.Owner, clk.Now(), term); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2*term/3 + time.Second)

	var g lease.Grant
	var claimErr error
	if verb == "Start" {
		// The same run again, as a worker whose answer was lost retries.
		var st lease.Started
		st, claimErr = svc.Start(ctx, w, apitype.StartRequest{Card: "c1", RunID: "run-1"})
		g = st.Grant
	} else {
		g, claimErr = svc.Claim(ctx, w, apitype.ClaimRequest{Card: "c1"})
	}
	if len(lost) != 1 || len(lost[0].Lost) != 1 || lost[0].Lost[0].Reason != heartbeat.LostKeepaliveMissed || lost[0].Lost[0].Epoch != first.ClaimEpoch {
		t.Fatalf("setup: the racing tick lost %+v, want c1@%d keepalive-missed", lost, first.ClaimEpoch)
	}
	card, err := s.GetCard(ctx, board.GetCardParams{ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if verb == "Claim" && claimErr != nil {
		// A claim carries no run: it is simply taken afresh.
		t.Errorf("the re-claim = %v; want a fresh acquisition", claimErr)
	}
	if claimErr == nil && g.Token.Epoch == first.ClaimEpoch {
		t.Errorf("the re-claim was granted epoch %d, the token the racing tick declared lost; want a fresh epoch (or a refusal)", g.Token.Epoch)
	}
	if h, ok := hb.Lookup("c1"); ok && card.Disowned() && card.Claim == h.Hold.Token.Marker && card.ClaimEpoch == h.Hold.Token.Epoch {
		t.Errorf("the agent renews %s@%d, which the store marks disowned (disowned_epoch %d): a restarted agent's boot sweep would not adopt the live worker's claim",
			h.Hold.Token.Marker, h.Hold.Token.Epoch, card.DisownedEpoch)
	}
}
