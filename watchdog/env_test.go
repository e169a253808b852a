package watchdog

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/pidprobe/pidprobetest"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

const (
	agentMarker  = "agenthost-303"
	agentHost    = "agenthost"
	workerMarker = "workerhost-4242"
	workerHost   = "workerhost"
	workerPID    = 4242
	otherReaper  = board.RecoveryPrefix + "otheragent-55"
)

// env is one reaper over a real bbolt file, driven by a manual clock.
type env struct {
	t     *testing.T
	ctx   context.Context
	store *boltstore.Store
	// faults wraps the real store; tests arm it to make one verb fail.
	faults *faultStore
	clock  *boardtest.ManualClock
	probe  *pidprobetest.Fake
	gate   atomic.Bool
	r      *Reaper
}

type envOpts struct {
	cfg   Config
	board *board.Board
}

type envOpt func(*envOpts)

func fleet(o *envOpts) { o.cfg.Fleet = true }

// withBoard opens the store with a custom board instead of the default one.
func withBoard(b board.Board) envOpt { return func(o *envOpts) { o.board = &b } }

// newEnv opens a real bbolt store (the fleet board when fleet is set, so
// in_progress is not a pool state, as on the MongoDB twin) and a reaper
// with the gate on.
func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	var eo envOpts
	for _, o := range opts {
		o(&eo)
	}
	cfg := eo.cfg
	b := board.DefaultBoard(!cfg.Fleet)
	if eo.board != nil {
		b = *eo.board
	}
	e := &env{t: t, ctx: context.Background(), clock: boardtest.NewManualClock(t0), probe: &pidprobetest.Fake{}}
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{Board: b, Clock: e.clock})
	if err != nil {
		t.Fatalf("boltstore.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	e.store = s
	e.faults = &faultStore{Store: s}
	e.gate.Store(true)
	cfg.Store, cfg.Marker, cfg.Prober = e.faults, agentMarker, e.probe
	cfg.Lease = func() time.Duration { return lease }
	cfg.OrphanGrace = func() time.Duration { return lease / 3 }
	cfg.Enabled = e.gate.Load
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.r = r
	return e
}

// card creates a card in state (through the first pool state and an
// operator move, as a person would).
func (e *env) card(id, state string) {
	e.t.Helper()
	if _, err := e.store.CreateCard(e.ctx, board.CreateCardParams{ID: id, Actor: "cli"}); err != nil {
		e.t.Fatalf("CreateCard %s: %v", id, err)
	}
	if b := loadBoard(e.t, e.store); state != b.FirstPool() {
		if err := e.store.SetState(e.ctx, board.MoveParams{Card: id, To: state, Actor: "cli"}); err != nil {
			e.t.Fatalf("SetState %s → %s: %v", id, state, err)
		}
	}
}

func (e *env) claim(id, marker string) board.ClaimToken {
	e.t.Helper()
	card, err := e.store.Claim(e.ctx, board.ClaimParams{Card: id, Marker: marker, Lease: lease})
	tok := card.Token()
	if err != nil {
		e.t.Fatalf("Claim %s by %s: %v", id, marker, err)
	}
	return tok
}

// priorRuns records n finished-with-a-resumable-failure runs of earlier
// claims on the card, then frees it.
func (e *env) priorRuns(id string, n int) {
	e.t.Helper()
	tok := e.claim(id, workerMarker)
	for i := range n {
		if _, err := e.store.CreateRun(e.ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: fmt.Sprintf("old-%d", i), Card: id, Status: board.RunFailedResumable}}); err != nil {
			e.t.Fatalf("CreateRun: %v", err)
		}
	}
	if err := e.store.ReleaseOwned(e.ctx, board.OwnedParams{Card: id, Token: tok}); err != nil {
		e.t.Fatalf("ReleaseOwned: %v", err)
	}
}

// launch is what a worker does: claim the card, move it into the running
// column, record a run and stamp it on the card. status is the run's status
// as the test wants it found.
func (e *env) launch(id string, status board.RunStatus, run board.Run) (board.ClaimToken, board.Run) {
	e.t.Helper()
	tok := e.claim(id, workerMarker)
	if _, err := e.store.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: id, Token: tok, To: board.StateInProgress}); err != nil {
		e.t.Fatalf("SetStateOwned %s → in_progress: %v", id, err)
	}
	run.Card, run.Status, run.Owner, run.Epoch = id, status, tok.Marker, tok.Epoch
	if run.ID == "" {
		run.ID = fmt.Sprintf("%s-run-%d", id, len(e.get(id).Runs)+1)
	}
	if run.Host == "" {
		run.Host, run.PID = workerHost, workerPID
	}
	created, err := e.store.CreateRun(e.ctx, board.CreateRunParams{Token: tok, Run: run})
	if err != nil {
		e.t.Fatalf("CreateRun for %s: %v", id, err)
	}
	if err := e.store.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: id, Token: tok, RunID: created.ID}); err != nil {
		e.t.Fatalf("SetLastRunOwned %s: %v", id, err)
	}
	return tok, created
}

func (e *env) get(id string) board.Card {
	e.t.Helper()
	c, err := e.store.GetCard(e.ctx, board.GetCardParams{ID: id})
	if err != nil {
		e.t.Fatalf("GetCard %s: %v", id, err)
	}
	return c
}

func (e *env) getRun(id string) board.Run {
	e.t.Helper()
	r, err := e.store.GetRun(e.ctx, board.GetRunParams{ID: id})
	if err != nil {
		e.t.Fatalf("GetRun %s: %v", id, err)
	}
	return r
}

func (e *env) lastSeq() int64 {
	e.t.Helper()
	evs := e.eventsSince(0)
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

func (e *env) eventsSince(seq int64) []board.Event {
	e.t.Helper()
	evs, err := e.store.Events(e.ctx, board.EventsParams{After: seq, Limit: 0})
	if err != nil {
		e.t.Fatalf("Events: %v", err)
	}
	return evs
}

// stateEvents returns the state events of card id after seq.
func (e *env) stateEvents(seq int64, id string) []board.Event {
	var out []board.Event
	for _, ev := range e.eventsSince(seq) {
		if ev.Type == board.EventState && ev.Card == id {
			out = append(out, ev)
		}
	}
	return out
}

// pass runs one real pass and returns the record of card id.
func (e *env) pass(id string) CardResult {
	e.t.Helper()
	res, err := e.r.RunOnce(e.ctx, false)
	if err != nil {
		e.t.Fatalf("RunOnce: %v", err)
	}
	cr, ok := res.Card(id)
	if !ok {
		e.t.Fatalf("card %s was not listed by the pass (cards %+v)", id, res.Cards)
	}
	if cr.Err != nil && cr.Outcome != OutcomeError {
		e.t.Errorf("card %s: error %v with outcome %s", id, cr.Err, cr.Outcome)
	}
	return cr
}

// expire moves the clock past every lease taken so far.
func (e *env) expire() { e.clock.Advance(lease + time.Second) }

func (e *env) wantState(id, want string) board.Card {
	e.t.Helper()
	c := e.get(id)
	if c.State != want {
		e.t.Errorf("card %s state = %q, want %q", id, c.State, want)
	}
	return c
}

func (e *env) wantFree(id string) board.Card {
	e.t.Helper()
	c := e.get(id)
	if c.Claimed() {
		e.t.Errorf("card %s claimed by %s@%d, want free", id, c.Claim, c.ClaimEpoch)
	}
	return c
}

func (e *env) wantClaim(id string, want board.ClaimToken) board.Card {
	e.t.Helper()
	c := e.get(id)
	if got := c.Token(); got != want {
		e.t.Errorf("card %s claim = %+v, want %+v", id, got, want)
	}
	return c
}

func wantOutcome(t *testing.T, cr CardResult, want Outcome) {
	t.Helper()
	if cr.Outcome != want {
		t.Errorf("card %s outcome = %s, want %s (decision %s: %s; err %v)", cr.Card, cr.Outcome, want, cr.Decision.Rule, cr.Decision.Reason, cr.Err)
	}
}

// faultStore is the real store with switchable faults, for the paths a
// healthy bbolt file never takes: a filing that fails, and the fleet's
// un-leased listing (the bbolt twin cannot hold an un-leased claim, on
// purpose: DESIGN.md#twin-unleased).
type faultStore struct {
	Store
	mu sync.Mutex
	// failSetState makes the next n SetStateOwned calls fail.
	failSetState int
	// unleased, when set, serves ListUnleasedRunningClaims: the real cards
	// with these ids, their lease stripped as a foreign write would leave
	// them.
	unleased []string
	// staleRun, when set, is served once by GetRun in place of the stored
	// run: the read the oracle took just before the owner wrote its verdict.
	staleRun *board.Run
	// gone lists runs GetRun answers ErrNotFound for: pruned runs.
	gone map[string]bool
	// afterListCards, when set, runs once after the next ListCards: what
	// another agent did between the sweep's listing and its write.
	afterListCards func()
	// beforeRetries refuses a retry's move (OwnedMove.Retry) as the agent's
	// guard refuses it to a store plugin from before the retry policy
	// (DESIGN.md#retries): invalid argument, nothing sent.
	beforeRetries bool
	// recording turns on the record of listings (see record).
	recording bool
	listed    []listing
}

// listing is one listing call the reaper made and how many cards the store
// handed it: what the pass read.
type listing struct {
	Verb   string
	Filter board.ListCardsParams // ListCards
	Limit  int                   // ListExpiredClaimCandidates
	Cards  int
}

// record starts a fresh record of every listing call.
func (f *faultStore) record() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recording, f.listed = true, nil
}

// listings returns the listings recorded since record.
func (f *faultStore) listings() []listing {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.listed)
}

func (f *faultStore) note(l listing) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.recording {
		f.listed = append(f.listed, l)
	}
}

func (f *faultStore) ListCards(ctx context.Context, cf board.ListCardsParams) ([]board.Card, error) {
	cs, err := f.Store.ListCards(ctx, cf)
	f.note(listing{Verb: "ListCards", Filter: cf, Cards: len(cs)})
	f.mu.Lock()
	after := f.afterListCards
	f.afterListCards = nil
	f.mu.Unlock()
	if after != nil {
		after()
	}
	return cs, err
}

// prune makes GetRun answer ErrNotFound for run id from now on.
func (f *faultStore) prune(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone == nil {
		f.gone = map[string]bool{}
	}
	f.gone[id] = true
}

func (f *faultStore) ListExpiredClaimCandidates(ctx context.Context, q board.ListExpiredClaimCandidatesParams) (board.ListExpiredClaimCandidatesResult, error) {
	page, err := f.Store.ListExpiredClaimCandidates(ctx, q)
	f.note(listing{Verb: "ListExpiredClaimCandidates", Limit: q.Limit, Cards: len(page.Cards)})
	return page, err
}

var errInjected = errors.New("injected store fault")

func (f *faultStore) SetStateOwned(ctx context.Context, m board.SetStateOwnedParams) (board.MoveResult, error) {
	f.mu.Lock()
	fail := f.failSetState > 0
	if fail {
		f.failSetState--
	}
	old := f.beforeRetries
	f.mu.Unlock()
	if fail {
		return board.MoveResult{}, fmt.Errorf("card %q: %w", m.Card, errInjected)
	}
	if old && m.Retry {
		return board.MoveResult{}, fmt.Errorf("store plugin: SetStateOwned: %w", board.Invalid(
			"the plugin speaks store protocol 6, from before the retry policy (protocol 7), and would drop a retry's backoff: rebuild it against this leasekeeper release; nothing was sent"))
	}
	return f.Store.SetStateOwned(ctx, m)
}

func (f *faultStore) ListUnleasedRunningClaims(ctx context.Context, p board.ListUnleasedRunningClaimsParams) ([]board.Card, error) {
	f.mu.Lock()
	ids := append([]string(nil), f.unleased...)
	f.mu.Unlock()
	var out []board.Card
	for _, id := range ids {
		c, err := f.Store.GetCard(ctx, board.GetCardParams{ID: id})
		if err != nil {
			return nil, err
		}
		if !c.Claimed() {
			continue
		}
		c.ClaimLeaseUntil = time.Time{}
		out = append(out, c)
	}
	return out, nil
}

func (f *faultStore) GetRun(ctx context.Context, p board.GetRunParams) (board.Run, error) {
	id := p.ID
	f.mu.Lock()
	if f.gone[id] {
		f.mu.Unlock()
		return board.Run{}, board.NotFound("run", id)
	}
	stale := f.staleRun
	if stale != nil && stale.ID == id {
		f.staleRun = nil
	} else {
		stale = nil
	}
	f.mu.Unlock()
	if stale != nil {
		return *stale, nil
	}
	return f.Store.GetRun(ctx, p)
}

// loadBoard reads the stored board definition.
func loadBoard(t testing.TB, s board.Store) board.Board {
	t.Helper()
	b, err := s.LoadBoard(context.Background())
	if err != nil {
		t.Fatalf("LoadBoard: %v", err)
	}
	return b
}
