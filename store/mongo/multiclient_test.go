package mongostore_test

// Several store clients on one database: what every agent of a fleet is.
// The fence lives in the documents, not in a client, so a claim taken
// through one client must bind every other one, and the concurrency
// property test must hold when its operations are spread across clients
// (DESIGN.md#fence).

import (
	"context"
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

func (r *roundRobin) LoadBoard(ctx context.Context) (board.Board, error) {
	return r.pick().LoadBoard(ctx)
}
func (r *roundRobin) Traits() board.Traits { return r.stores[0].Traits() }
func (r *roundRobin) SetBoard(ctx context.Context, p board.SetBoardParams) (board.SetBoardResult, error) {
	return r.pick().SetBoard(ctx, p)
}
func (r *roundRobin) SetLabelsFrom(ctx context.Context, l board.SetLabelsFromParams) (board.SetLabelsFromResult, error) {
	return r.pick().SetLabelsFrom(ctx, l)
}
func (r *roundRobin) CreateCard(ctx context.Context, c board.CreateCardParams) (board.Card, error) {
	return r.pick().CreateCard(ctx, c)
}
func (r *roundRobin) GetCard(ctx context.Context, p board.GetCardParams) (board.Card, error) {
	return r.pick().GetCard(ctx, p)
}
func (r *roundRobin) ListCards(ctx context.Context, f board.ListCardsParams) ([]board.Card, error) {
	return r.pick().ListCards(ctx, f)
}
func (r *roundRobin) Dependents(ctx context.Context, p board.DependentsParams) ([]board.Card, error) {
	return r.pick().Dependents(ctx, p)
}
func (r *roundRobin) CountCards(ctx context.Context) (board.CardCounts, error) {
	return r.pick().CountCards(ctx)
}
func (r *roundRobin) Claim(ctx context.Context, c board.ClaimParams) (board.Card, error) {
	return r.pick().Claim(ctx, c)
}
func (r *roundRobin) Start(ctx context.Context, sr board.StartParams) (board.StartResult, error) {
	return r.pick().Start(ctx, sr)
}
func (r *roundRobin) Finish(ctx context.Context, f board.FinishParams) (board.FinishResult, error) {
	return r.pick().Finish(ctx, f)
}
func (r *roundRobin) ClaimNext(ctx context.Context, c board.ClaimNextParams) (board.Card, error) {
	return r.pick().ClaimNext(ctx, c)
}
func (r *roundRobin) RenewClaims(ctx context.Context, p board.RenewClaimsParams) ([]board.RenewResult, error) {
	return r.pick().RenewClaims(ctx, p)
}
func (r *roundRobin) SetStateOwned(ctx context.Context, m board.SetStateOwnedParams) (board.MoveResult, error) {
	return r.pick().SetStateOwned(ctx, m)
}
func (r *roundRobin) SetLastRunOwned(ctx context.Context, p board.SetLastRunOwnedParams) error {
	return r.pick().SetLastRunOwned(ctx, p)
}
func (r *roundRobin) SetAwaitingInputOwned(ctx context.Context, p board.SetAwaitingInputOwnedParams) error {
	return r.pick().SetAwaitingInputOwned(ctx, p)
}
func (r *roundRobin) SetGaveUpOwned(ctx context.Context, p board.SetGaveUpOwnedParams) error {
	return r.pick().SetGaveUpOwned(ctx, p)
}
func (r *roundRobin) ExpireClaimOwned(ctx context.Context, p board.OwnedParams) error {
	return r.pick().ExpireClaimOwned(ctx, p)
}
func (r *roundRobin) ReleaseOwned(ctx context.Context, p board.OwnedParams) error {
	return r.pick().ReleaseOwned(ctx, p)
}
func (r *roundRobin) Release(ctx context.Context, p board.ReleaseParams) error {
	return r.pick().Release(ctx, p)
}
func (r *roundRobin) SetState(ctx context.Context, m board.MoveParams) error {
	return r.pick().SetState(ctx, m)
}
func (r *roundRobin) SetStateFrom(ctx context.Context, m board.MoveParams) (board.MoveResult, error) {
	return r.pick().SetStateFrom(ctx, m)
}
func (r *roundRobin) Reopen(ctx context.Context, m board.MoveParams) error {
	return r.pick().Reopen(ctx, m)
}
func (r *roundRobin) AdjustLabels(ctx context.Context, c board.AdjustLabelsParams) (board.Card, error) {
	return r.pick().AdjustLabels(ctx, c)
}
func (r *roundRobin) SetLabels(ctx context.Context, p board.SetLabelsParams) (board.Card, error) {
	return r.pick().SetLabels(ctx, p)
}
func (r *roundRobin) CreateRun(ctx context.Context, run board.CreateRunParams) (board.Run, error) {
	return r.pick().CreateRun(ctx, run)
}
func (r *roundRobin) UpdateRun(ctx context.Context, u board.UpdateRunParams) (board.Run, error) {
	return r.pick().UpdateRun(ctx, u)
}
func (r *roundRobin) GetRun(ctx context.Context, p board.GetRunParams) (board.Run, error) {
	return r.pick().GetRun(ctx, p)
}
func (r *roundRobin) Now(ctx context.Context) (time.Time, error) {
	return r.pick().Now(ctx)
}
func (r *roundRobin) ListExpiredClaimCandidates(ctx context.Context, q board.ListExpiredClaimCandidatesParams) (board.ListExpiredClaimCandidatesResult, error) {
	return r.pick().ListExpiredClaimCandidates(ctx, q)
}
func (r *roundRobin) ReleaseExpired(ctx context.Context, rel board.ReleaseExpiredParams) error {
	return r.pick().ReleaseExpired(ctx, rel)
}
func (r *roundRobin) ListUnleasedRunningClaims(ctx context.Context, p board.ListUnleasedRunningClaimsParams) ([]board.Card, error) {
	return r.pick().ListUnleasedRunningClaims(ctx, p)
}
func (r *roundRobin) ReclaimExpired(ctx context.Context, rc board.ReclaimExpiredParams) (board.Card, error) {
	return r.pick().ReclaimExpired(ctx, rc)
}
func (r *roundRobin) Events(ctx context.Context, p board.EventsParams) ([]board.Event, error) {
	return r.pick().Events(ctx, p)
}

func (r *roundRobin) Prune(ctx context.Context, p board.PruneParams) (board.PruneResult, error) {
	return r.pick().Prune(ctx, p)
}

func (r *roundRobin) DeleteCard(ctx context.Context, p board.DeleteCardParams) (board.DeleteCardResult, error) {
	return r.pick().DeleteCard(ctx, p)
}

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
