package watchdog

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
)

// concurrentMix is the population of the concurrency tests: each card's
// run status and what a pass must end up doing with it.
var concurrentMix = []struct {
	status  board.RunStatus // "" for no run
	outcome Outcome
	state   string
}{
	{"", OutcomeReleased, board.StateInProgress},
	{board.RunFinished, OutcomeFiled, board.StateDone},
	{board.RunFailed, OutcomeFiled, board.StateFailed},
	{board.RunFailedResumable, OutcomeReleased, board.StateInProgress},
}

// deadCards launches n cards whose worker died, cycling through
// concurrentMix, and returns their ids.
func (e *env) deadCards(n int) []string {
	e.t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("c%03d", i)
		e.card(id, board.StateReady)
		if st := concurrentMix[i%len(concurrentMix)].status; st == "" {
			tok := e.claim(id, workerMarker)
			if _, err := e.store.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: id, Token: tok, To: board.StateInProgress}); err != nil {
				e.t.Fatalf("SetStateOwned %s: %v", id, err)
			}
		} else {
			e.launch(id, st, board.Run{})
		}
		ids = append(ids, id)
	}
	return ids
}

// pastStampWindow moves the clock past every lease and past the stamp
// window (two leases) of the cards with no run, so the table rules on all.
func (e *env) pastStampWindow() { e.clock.Advance(2*lease + time.Second) }

func withWorkers(n int) envOpt { return func(o *envOpts) { o.cfg.Workers = n } }

func sortedByCard(res PassResult) bool {
	return slices.IsSortedFunc(res.Cards, func(a, b CardResult) int { return strings.Compare(a.Card, b.Card) }) &&
		slices.IsSortedFunc(res.Sweeps, func(a, b SweepResult) int { return strings.Compare(a.Card, b.Card) })
}

// The cards of a pass are decided side by side, and the pass reports
// exactly what deciding them one at a time reports: the same decision,
// outcome, filing and recovery token for every card, sorted by card.
func TestReaperConcurrentPassMatchesSequential(t *testing.T) {
	t.Parallel()
	const n = 40
	passOf := func(workers int) PassResult {
		e := newEnv(t, withWorkers(workers))
		e.deadCards(n)
		e.pastStampWindow()
		res, err := e.r.RunOnce(e.ctx, false)
		if err != nil {
			t.Fatalf("workers=%d: RunOnce: %v", workers, err)
		}
		return res
	}
	seq, par := passOf(1), passOf(8)
	if len(par.Cards) != n || len(seq.Cards) != n {
		t.Fatalf("decided %d cards concurrently and %d one at a time, want %d each", len(par.Cards), len(seq.Cards), n)
	}
	if !sortedByCard(par) || !sortedByCard(seq) {
		t.Errorf("pass results not sorted by card")
	}
	for i := range n {
		got, want := par.Cards[i], seq.Cards[i]
		if got.Card != want.Card || got.Outcome != want.Outcome || got.Decision != want.Decision ||
			got.FiledTo != want.FiledTo || got.Token != want.Token || got.Err != nil {
			t.Errorf("card %s: concurrent %s/%s → %q token %+v (err %v); one at a time %s/%s → %q token %+v",
				got.Card, got.Outcome, got.Decision.Rule, got.FiledTo, got.Token, got.Err,
				want.Outcome, want.Decision.Rule, want.FiledTo, want.Token)
		}
	}
}

// Two agents' reapers race concurrent passes over one store. Each card is
// transferred exactly once across both — the loser of every race is a clean
// skip — and ends up exactly where a single reaper would put it.
func TestReaperConcurrentPassesTransferEveryCardOnce(t *testing.T) {
	t.Parallel()
	const n = 60
	e := newEnv(t, withWorkers(8))
	ids := e.deadCards(n)
	e.pastStampWindow()
	seq := e.lastSeq()

	cfg := e.r.cfg
	cfg.Marker = "agenthost-304"
	other, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	reapers := []*Reaper{e.r, other}
	results := make([][]PassResult, len(reapers))
	var wg sync.WaitGroup
	for i, r := range reapers {
		wg.Go(func() {
			// Two passes each, so a reaper that lost every race in its
			// first pass still looks again.
			for range 2 {
				res, err := r.RunOnce(e.ctx, false)
				if err != nil {
					t.Errorf("reaper %d: RunOnce: %v", i, err)
					return
				}
				results[i] = append(results[i], res)
			}
		})
	}
	wg.Wait()

	recovery := map[string]bool{e.r.RecoveryMarker(): true, other.RecoveryMarker(): true}
	won := map[string]int{}
	for i, passes := range results {
		for _, res := range passes {
			if !sortedByCard(res) {
				t.Errorf("reaper %d: pass results not sorted by card", i)
			}
			for _, cr := range res.Cards {
				switch cr.Outcome {
				case OutcomeFiled, OutcomeReleased:
					won[cr.Card]++
				case OutcomeSkippedConflict:
				default:
					t.Errorf("reaper %d: card %s outcome %s (err %v), want filed, released or a clean skip", i, cr.Card, cr.Outcome, cr.Err)
				}
			}
		}
	}
	transfers := map[string]int{}
	for _, ev := range e.eventsSince(seq) {
		if ev.Type == board.EventClaimed {
			if !recovery[ev.Data.Marker] {
				t.Errorf("card %s claimed by %s during the passes, want only recovery transfers", ev.Card, ev.Data.Marker)
			}
			transfers[ev.Card]++
		}
	}
	for i, id := range ids {
		want := concurrentMix[i%len(concurrentMix)]
		if transfers[id] != 1 || won[id] != 1 {
			t.Errorf("card %s: %d transfers, decided by %d passes; want exactly one of each", id, transfers[id], won[id])
		}
		e.wantState(id, want.state)
		e.wantFree(id)
	}
	// Nothing is left for a later pass.
	res, err := e.r.RunOnce(e.ctx, false)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if len(res.Cards) != 0 || len(res.Sweeps) != 0 {
		t.Errorf("a pass after the race found cards %+v, sweeps %+v; want nothing", res.Cards, res.Sweeps)
	}
}

// A cancelled pass starts no new card and reports the cards it began.
func TestReaperCancelledPassStopsStartingCards(t *testing.T) {
	t.Parallel()
	const workers = 2
	e := newEnv(t, withWorkers(workers))
	e.deadCards(20)
	e.pastStampWindow()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var mu sync.Mutex
	var began []string
	e.r.beforeTransfer = func(c board.Card) {
		mu.Lock()
		defer mu.Unlock()
		began = append(began, c.ID)
		if len(began) == 3 {
			cancel()
		}
	}
	res, err := e.r.RunOnce(ctx, false)
	if err == nil {
		t.Fatalf("RunOnce on a cancelled context: nil error")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range began {
		if _, ok := res.Card(id); !ok {
			t.Errorf("card %s began but the pass does not report it", id)
		}
	}
	// At the cancel, three cards had begun; at most one more was under way
	// on the other worker and one more was being handed over.
	if got, most := len(res.Cards), 3+workers; got > most {
		t.Errorf("a pass cancelled at its third card reports %d cards, want at most %d", got, most)
	}
}

// expiredWorkerClaims creates n cards held by a worker and ends their
// leases: the crowd a recovery sweep must not read. The writes go side by
// side so the store's group commit folds them into shared fsyncs.
func (e *env) expiredWorkerClaims(n int) {
	e.t.Helper()
	const writers = 16
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				id := fmt.Sprintf("worker-%05d", i)
				if _, err := e.store.CreateCard(e.ctx, board.CreateCardParams{ID: id}); err != nil {
					errs <- err
					return
				}
				if _, err := e.store.Claim(e.ctx, board.ClaimParams{Card: id, Marker: workerMarker, Lease: lease}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		e.t.Fatalf("worker claims: %v", err)
	}
	e.expire()
}

// abandon has another agent's reaper reclaim card id and die: its recovery
// claim's lease ends after recoveryLease.
func (e *env) abandon(id string, recoveryLease time.Duration) board.ClaimToken {
	e.t.Helper()
	c := e.get(id)
	card, err := e.store.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: id, Prev: c.Token(), RecoveryMarker: otherReaper, Cutoff: e.clock.Now(), Lease: recoveryLease})
	tok := card.Token()
	if err != nil {
		e.t.Fatalf("ReclaimExpired %s: %v", id, err)
	}
	return tok
}

// The recovery sweep reads the recovery claims and nothing else (DESIGN.md#recovery-sweep): with thousands of expired worker claims in the store, a pass
// lists the recovery claims through the store's index and hands the sweep
// exactly those, with the local and the fleet dispositions alike. The
// sweep this replaced listed every expired claim here (locally) or every
// claimed card (fleet).
func TestRecoverySweepReadsOnlyRecoveryClaims(t *testing.T) {
	t.Parallel()
	workers := 10_000
	if testing.Short() {
		workers = 1_000
	}
	e := newEnv(t)
	e.gate.Store(false)
	cfg := e.r.cfg
	cfg.Fleet = true
	fleetReaper, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"abandoned-local", "abandoned-fleet", "held"} {
		e.card(id, board.StateReady)
		e.launch(id, board.RunFinished, board.Run{})
	}
	e.expiredWorkerClaims(workers)
	held := e.abandon("held", time.Hour)

	for _, tc := range []struct {
		name string
		r    *Reaper
		card string
	}{
		{"local", e.r, "abandoned-local"},
		{"fleet", fleetReaper, "abandoned-fleet"},
	} {
		e.abandon(tc.card, time.Second)
		e.clock.Advance(2 * time.Second)
		e.faults.record()
		res, err := tc.r.RunOnce(e.ctx, false)
		if err != nil {
			t.Fatalf("%s: RunOnce: %v", tc.name, err)
		}
		if len(res.Sweeps) != 1 || res.Sweeps[0].Card != tc.card || res.Sweeps[0].Outcome != OutcomeReleased {
			t.Errorf("%s: sweeps = %+v, want %s released", tc.name, res.Sweeps, tc.card)
		}
		e.wantFree(tc.card)
		e.wantClaim("held", held)
		// What the pass read: one recovery listing of the two recovery
		// claims, and no other listing (the gate is off, so there is no
		// decision pass; the fleet's un-leased listing is served by the
		// fault store, which holds none here).
		want := []listing{{Verb: "ListCards", Filter: board.ListCardsParams{ClaimedOnly: true, RecoveryOnly: true}, Cards: 2}}
		if got := e.faults.listings(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the pass listed %+v, want %+v (and never the %d expired worker claims)", tc.name, got, want, workers)
		}
	}
	if got, err := boardtest.PageCards(e.store.ListExpiredClaimCandidates(e.ctx, board.ListExpiredClaimCandidatesParams{Cutoff: e.clock.Now(), Limit: 0})); err != nil || len(got) != workers {
		t.Errorf("expired claims in the store = %d, %v; want the %d worker claims still there", len(got), err, workers)
	}
}

func TestWorkersDefault(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []envOpt
		want int
	}{
		{"local twin: a pool that shares group commits", nil, DefaultWorkers},
		{"fleet: one card at a time", []envOpt{fleet}, DefaultFleetWorkers},
		{"explicit on the fleet", []envOpt{fleet, withWorkers(4)}, 4},
		{"explicit locally", []envOpt{withWorkers(1)}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := newEnv(t, tc.opts...).r.cfg.Workers; got != tc.want {
				t.Errorf("Workers = %d, want %d", got, tc.want)
			}
		})
	}
}
