package watchdog

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
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
			if _, err := e.store.SetStateOwned(e.ctx, board.OwnedMove{Card: id, Token: tok, To: board.StateInProgress}); err != nil {
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

// The recovery sweep lists its population from the lease index on the
// local twin (every recovery claim there carries a lease) and from every
// claimed card on the fleet (a foreign write may strip a lease).
func TestRecoverySweepPopulation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		opts          []envOpt
		wantListCards int
	}{
		{"local twin: the expired listing", nil, 0},
		{"fleet: every claimed card", []envOpt{fleet}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tc.opts...)
			e.gate.Store(false)
			e.card("live", board.StateReady)
			e.launch("live", board.RunRunning, board.Run{})
			e.card("abandoned", board.StateReady)
			e.launch("abandoned", board.RunFinished, board.Run{})
			e.expire()
			c := e.get("abandoned")
			if _, _, err := e.store.ReclaimExpired(e.ctx, board.Reclaim{Card: "abandoned", Prev: c.Token(), RecoveryMarker: otherReaper, Cutoff: e.clock.Now(), Lease: lease}); err != nil {
				t.Fatalf("ReclaimExpired: %v", err)
			}
			e.expire()
			e.faults.countListCards()
			res, err := e.r.RunOnce(e.ctx, false)
			if err != nil {
				t.Fatalf("RunOnce: %v", err)
			}
			if len(res.Sweeps) != 1 || res.Sweeps[0].Card != "abandoned" || res.Sweeps[0].Outcome != OutcomeReleased {
				t.Errorf("sweeps = %+v, want the abandoned recovery claim released", res.Sweeps)
			}
			e.wantFree("abandoned")
			if got := e.faults.claimedListings(); got != tc.wantListCards {
				t.Errorf("ListCards(ClaimedOnly) called %d times, want %d", got, tc.wantListCards)
			}
		})
	}
}

// While a gated pass drains a full batch, the recovery sweep runs at most
// once per half Interval; every other pass — gate off, a dry run, a short
// listing, or half an Interval later — sweeps, so an abandoned recovery
// claim waits a bounded time (ADR-096 §8, §9).
func TestRecoverySweepDeferralIsBounded(t *testing.T) {
	t.Parallel()
	// Half an Interval is longer than the lease here, so leases can end
	// within one bound.
	const interval = 10 * time.Minute
	e := newEnv(t, func(o *envOpts) { o.cfg.Batch, o.cfg.Interval = 2, interval })
	// Conserved worker claims that nothing takes away keep every listing
	// full: their runs are paused, so the pre-check keeps them.
	for i := range 3 {
		id := fmt.Sprintf("paused-%d", i)
		e.card(id, board.StateReady)
		e.launch(id, board.RunPausedOperator, board.Run{})
	}
	// Launched a second later, so its lease sorts behind theirs.
	e.clock.Advance(time.Second)
	e.card("abandoned", board.StateReady)
	e.launch("abandoned", board.RunFinished, board.Run{})
	e.expire()

	pass := func(name string, dry bool) PassResult {
		t.Helper()
		res, err := e.r.RunOnce(e.ctx, dry)
		if err != nil {
			t.Fatalf("%s: RunOnce: %v", name, err)
		}
		return res
	}
	// The first pass sweeps whatever it lists: nothing is abandoned yet.
	if res := pass("first", false); res.RecoverySweepDeferred || len(res.Cards) != 2 {
		t.Fatalf("first pass: deferred=%v, %d cards; want a sweep and a full batch of 2", res.RecoverySweepDeferred, len(res.Cards))
	}
	// Another agent's reaper reclaims "abandoned" and dies; its short
	// recovery lease ends at once, behind the conserved claims in the
	// lease order, beyond the batch.
	c := e.get("abandoned")
	if _, _, err := e.store.ReclaimExpired(e.ctx, board.Reclaim{Card: "abandoned", Prev: c.Token(), RecoveryMarker: otherReaper, Cutoff: e.clock.Now(), Lease: time.Second}); err != nil {
		t.Fatalf("ReclaimExpired: %v", err)
	}
	e.clock.Advance(2 * time.Second)

	res := pass("draining", false)
	if !res.RecoverySweepDeferred || len(res.Sweeps) != 0 {
		t.Errorf("draining pass right after a sweep: deferred=%v sweeps %+v, want deferred", res.RecoverySweepDeferred, res.Sweeps)
	}
	e.wantClaim("abandoned", board.ClaimToken{Marker: otherReaper, Epoch: c.ClaimEpoch + 1})

	// A dry run never defers: it reports what the sweep would release.
	res = pass("dry run", true)
	if res.RecoverySweepDeferred || len(res.Sweeps) != 1 || res.Sweeps[0].Outcome != OutcomeDecided {
		t.Errorf("dry run: deferred=%v sweeps %+v, want the abandoned claim decided", res.RecoverySweepDeferred, res.Sweeps)
	}
	// ...and, having released nothing, does not count as a sweep.
	if res := pass("after the dry run", false); !res.RecoverySweepDeferred {
		t.Errorf("pass after a dry run: not deferred, want deferred (the dry run released nothing)")
	}

	// With the gate off there is no decision pass to drain: it sweeps.
	e.gate.Store(false)
	res = pass("gate off", false)
	e.gate.Store(true)
	if res.RecoverySweepDeferred || len(res.Sweeps) != 1 || res.Sweeps[0].Outcome != OutcomeReleased {
		t.Fatalf("gate off: deferred=%v sweeps %+v, want the abandoned claim released", res.RecoverySweepDeferred, res.Sweeps)
	}
	e.wantFree("abandoned")

	// Half an Interval after the last sweep, a draining pass sweeps again.
	e.card("abandoned-2", board.StateReady)
	e.launch("abandoned-2", board.RunFinished, board.Run{})
	e.expire()
	c = e.get("abandoned-2")
	if _, _, err := e.store.ReclaimExpired(e.ctx, board.Reclaim{Card: "abandoned-2", Prev: c.Token(), RecoveryMarker: otherReaper, Cutoff: e.clock.Now(), Lease: time.Second}); err != nil {
		t.Fatalf("ReclaimExpired: %v", err)
	}
	e.clock.Advance(2 * time.Second)
	if res := pass("draining, within the bound", false); !res.RecoverySweepDeferred {
		t.Errorf("draining pass shortly after the sweep: not deferred")
	}
	e.clock.Advance(interval / 2)
	res = pass("draining, at the bound", false)
	if res.RecoverySweepDeferred || len(res.Sweeps) != 1 || res.Sweeps[0].Card != "abandoned-2" || res.Sweeps[0].Outcome != OutcomeReleased {
		t.Errorf("draining pass half an Interval later: deferred=%v sweeps %+v, want abandoned-2 released", res.RecoverySweepDeferred, res.Sweeps)
	}
	e.wantFree("abandoned-2")
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
