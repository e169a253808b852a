package mongostore_test

//go:generate go run ../../internal/storegen -layer roundrobin -root ../..

// Several store clients on one database: what every agent of a fleet is.
// The fence lives in the documents, not in a client, so a claim taken
// through one client must bind every other one, and the concurrency
// property test must hold when its operations are spread across clients
// (DESIGN.md#fence).

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// roundRobin is a board.Store that sends each call to the next of several
// clients of one database, so consecutive operations of one worker — a
// read and the transfer that follows it, a claim and its first write —
// travel through different connections, as they would through different
// agents.
type roundRobin struct {
	stores []board.Store
	next   atomic.Uint64
	// calls counts the calls each client served, so the test can check the
	// spread really happened.
	calls []atomic.Int64
}

func newRoundRobin(stores ...board.Store) *roundRobin {
	return &roundRobin{stores: stores, calls: make([]atomic.Int64, len(stores))}
}

func (r *roundRobin) pick() board.Store {
	i := int(r.next.Add(1) % uint64(len(r.stores)))
	r.calls[i].Add(1)
	return r.stores[i]
}

var _ board.Store = (*roundRobin)(nil)

// Traits are the first client's: every client is of the same store.
func (r *roundRobin) Traits() board.Traits { return r.stores[0].Traits() }

// The verbs, each sent to the next client, are generated into
// roundrobin_gen_test.go.

// Close closes nothing: each client is closed by its own test cleanup.
func (r *roundRobin) Close() error { return nil }

// openClients opens n store clients on one fresh database.
func openClients(t *testing.T, n int, opts mongostore.Options) []*mongostore.Store {
	t.Helper()
	opts.URI, opts.Database = mongotest.URI(t), mongotest.Database(t)
	out := make([]*mongostore.Store, n)
	for i := range out {
		out[i] = openStore(t, opts)
	}
	return out
}

// TestStressFencingAcrossClients is the concurrency property test with its
// operations spread over three clients of one database: epochs strictly
// increase per card, no superseded token's write is accepted, and the
// history is linearizable against one holder per card.
func TestStressFencingAcrossClients(t *testing.T) {
	t.Parallel()
	var rr *roundRobin
	h := boardtest.Harness{
		Fleet: true,
		Open: func(t *testing.T, cfg boardtest.Config) board.Store {
			t.Helper()
			clients := openClients(t, 3, mongostore.Options{Board: cfg.Board, Clock: cfg.Clock})
			rr = newRoundRobin(clients[0], clients[1], clients[2])
			return rr
		},
	}
	o := boardtest.StressOptions{Cards: 3, Workers: 12, Duration: 5 * time.Second, Ops: 1500}
	if testing.Short() {
		o.Duration, o.Ops = 2*time.Second, 300
	}
	boardtest.StressFencing(t, h, o)
	if rr == nil {
		t.Fatal("the harness was never opened")
	}
	for i := range rr.calls {
		if n := rr.calls[i].Load(); n < 20 {
			t.Errorf("client %d served %d calls, want the operations spread over every client", i, n)
		}
	}
}

// TestClaimBindsEveryClient: a card claimed through one agent's client is
// a ClaimConflict naming the holder and epoch through another's, for a
// claim, a transfer of a live claim and a write with a made-up token; the
// holder's token works through any client, because the fence is in the
// document; and after the holder releases through the second client, the
// first sees the card free with the fence kept.
func TestClaimBindsEveryClient(t *testing.T) {
	t.Parallel()
	c := openClients(t, 2, mongostore.Options{})
	a, b := c[0], c[1]
	ctx := t.Context()
	if _, err := a.CreateCard(ctx, board.CreateCardParams{ID: "c1", State: board.StateReady, Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	card, err := a.Claim(ctx, board.ClaimParams{Card: "c1", Marker: workerA, Lease: testTerm})
	tok := card.Token()
	if err != nil {
		t.Fatalf("Claim through the first client: %v", err)
	}

	_, err = b.Claim(ctx, board.ClaimParams{Card: "c1", Marker: workerB, Lease: testTerm})
	wantConflict(t, err, workerA, tok.Epoch, "Claim through the second client")
	_, err = b.ReclaimExpired(ctx, board.ReclaimExpiredParams{Card: "c1", Prev: tok, RecoveryMarker: reaperR, Cutoff: time.Now().Add(-time.Hour), Lease: testTerm})
	wantConflict(t, err, workerA, tok.Epoch, "ReclaimExpired of a live claim through the second client")
	_, err = b.SetStateOwned(ctx, board.SetStateOwnedParams{Card: "c1", Token: board.ClaimToken{Marker: workerB, Epoch: tok.Epoch}, To: board.StateInProgress})
	wantConflict(t, err, workerA, tok.Epoch, "SetStateOwned with another marker's token through the second client")
	if _, err := b.ClaimNext(ctx, board.ClaimNextParams{Marker: workerB, Lease: testTerm}); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("ClaimNext through the second client = %v, want ErrNotFound (the only card is held)", err)
	}

	// The same marker through the other client is the holder: idempotent.
	reclaimed, err := b.Claim(ctx, board.ClaimParams{Card: "c1", Marker: workerA, Lease: testTerm})
	again := reclaimed.Token()
	if err != nil || again != tok {
		t.Errorf("re-claim by the holder through the second client = %+v, %v; want %+v", again, err, tok)
	}
	if moved, err := b.SetStateOwned(ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, To: board.StateInProgress}); err != nil || !moved.Changed {
		t.Errorf("the holder's write through the second client = %v, %v; want it applied", moved.Changed, err)
	}
	if err := b.ReleaseOwned(ctx, board.OwnedParams{Card: "c1", Token: tok}); err != nil {
		t.Fatalf("ReleaseOwned through the second client: %v", err)
	}
	got, err := a.GetCard(ctx, board.GetCardParams{ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	// The release files the card out of the running column, where a free
	// card would strand on this board, into the pool.
	if got.Claimed() || got.State != board.StateReady || got.ClaimEpoch != tok.Epoch {
		t.Errorf("card through the first client = %s claimed by %q at epoch %d, want ready, free, epoch %d kept", got.State, got.Claim, got.ClaimEpoch, tok.Epoch)
	}
	// A stale write through the first client after the release.
	err = a.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "run-late"})
	wantConflict(t, err, "", tok.Epoch, "the released token through the first client")

	// And the next holder, through the first client, is above the fence.
	held, err := a.Claim(ctx, board.ClaimParams{Card: "c1", Marker: workerB, Lease: testTerm})
	next := held.Token()
	if err != nil || next.Epoch <= tok.Epoch {
		t.Errorf("next claim = %+v, %v; want an epoch above %d", next, err, tok.Epoch)
	}
	_, err = b.Claim(ctx, board.ClaimParams{Card: "c1", Marker: workerA, Lease: testTerm})
	wantConflict(t, err, workerB, next.Epoch, "the old holder's claim through the second client")
}
