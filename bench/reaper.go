package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// stepClock is the wall clock plus an offset the benchmark moves, so the
// reaper can find 10,000 expired leases without anyone waiting for them.
type stepClock struct{ offset atomic.Int64 }

func (c *stepClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *stepClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// reaperMix is the population of dead claims: a quarter with no run
// (released), a quarter whose run finished (filed to done), a quarter whose
// run failed (filed to failed), and a quarter whose run still says running
// and must first be proven orphaned by the oracle (lease past grace), then
// reparked or failed.
var reaperMix = []board.RunStatus{"", board.RunFinished, board.RunFailed, board.RunRunning}

func runReaper(ctx context.Context, cfg config, rep *report) error {
	n := cfg.reaperCards
	sec := rep.section("3. Reaper throughput (bbolt)",
		fmt.Sprintf(`%d cards held by a dead worker on another host, their leases expired: a quarter with no run,
a quarter with a finished run, a quarter with a failed run, a quarter whose run still says running (the
liveness oracle must prove it orphaned by lease + grace, then the table decides). watchdog.Reaper.RunOnce
runs back to back with the default batch (100) until a pass lists nothing; every card goes through list →
pre-check → transfer (CAS) → decision on the observed card → filing/release, each write durable. The
figure is cards decided per second of wall time. In the agent passes are 60 s apart by default, so at the
default batch it clears 100 cards a minute; this measures the engine, not the cadence.`, n))
	repeats := min(cfg.repeat, 3)
	r := sec.add(fmt.Sprintf("cards reclaimed and decided, %d cards", n), "cards/s", nil)
	var outcomes map[string]int
	for i := range repeats {
		v, out, err := reaperOnce(ctx, cfg, n, filepath.Join(cfg.tmp, fmt.Sprintf("reaper-%d", i)), cfg.profile != "" && i == 0)
		if err != nil {
			return err
		}
		r.vals = append(r.vals, v)
		outcomes = out
	}
	var parts []string
	for k, v := range outcomes {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	sec.notef("Outcomes of the last repeat (each card once): %s.", strings.Join(parts, ", "))
	sec.notef("%d repeats, each on a freshly built store.", repeats)
	m := r.vals.median()
	rep.goal("3. reaper", "≥ 1,000 cards/s on bbolt", fmt.Sprintf("%s cards/s (%s–%s) = %s× the goal", num(m), num(r.vals.min()), num(r.vals.max()), num(m/1000)), m >= 1000)
	return nil
}

func reaperOnce(ctx context.Context, cfg config, n int, dir string, profile bool) (float64, map[string]int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, nil, err
	}
	clock := &stepClock{}
	st, err := boltstore.Open(filepath.Join(dir, "board.db"), boltstore.Options{Clock: clock})
	if err != nil {
		return 0, nil, err
	}
	defer st.Close()
	// The dead worker lives on another host, so only the lease proof can
	// declare its running runs orphaned (the pid proof is same-host only).
	dead := board.WorkerMarker("elsewhere", 4242)
	const setupWorkers = 32
	var wg sync.WaitGroup
	errs := make(chan error, setupWorkers)
	for w := range setupWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += setupWorkers {
				if err := deadClaim(ctx, st, fmt.Sprintf("card-%05d", i), dead, reaperMix[i%len(reaperMix)]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, nil, fmt.Errorf("reaper setup: %w", err)
	}
	// Past the stamp window (two leases) and the orphan grace.
	clock.advance(3 * benchLease)

	host, _ := pidprobe.Hostname()
	if host == "" {
		host = "benchhost"
	}
	r, err := watchdog.New(watchdog.Config{
		Store:   st,
		Marker:  board.WorkerMarker(host, os.Getpid()),
		Lease:   func() time.Duration { return benchLease },
		Enabled: func() bool { return true },
		Prober:  pidprobe.New(),
	})
	if err != nil {
		return 0, nil, err
	}
	if profile {
		f, err := os.Create(filepath.Join(cfg.profile, "reaper.pprof"))
		if err != nil {
			return 0, nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, nil, err
		}
		defer pprof.StopCPUProfile()
	}
	outcomes := map[string]int{}
	decided := 0
	start := time.Now()
	// Bounded: each pass must make progress, so n/batch + a few passes.
	for pass := 0; pass < n/watchdog.DefaultBatch+10; pass++ {
		res, err := r.RunOnce(ctx, false)
		if err != nil {
			return 0, nil, fmt.Errorf("reaper pass %d: %w", pass, err)
		}
		if len(res.Cards) == 0 {
			break
		}
		for _, c := range res.Cards {
			if c.Err != nil {
				return 0, nil, fmt.Errorf("reaper: card %s: %w", c.Card, c.Err)
			}
			outcomes[string(c.Outcome)+"/"+string(c.Decision.Action)]++
			decided++
		}
	}
	elapsed := time.Since(start)
	if decided != n {
		return 0, nil, fmt.Errorf("reaper decided %d cards, want %d", decided, n)
	}
	return float64(decided) / elapsed.Seconds(), outcomes, nil
}

// deadClaim creates a card claimed by marker with a run of the given status
// ("" for none), as a worker that then died would leave it.
func deadClaim(ctx context.Context, st *boltstore.Store, id, marker string, status board.RunStatus) error {
	if _, err := st.CreateCard(ctx, board.CreateCardParams{ID: id}); err != nil {
		return err
	}
	held, err := st.Claim(ctx, board.ClaimParams{Card: id, Marker: marker, Lease: benchLease})
	tok := held.Token()
	if err != nil {
		return err
	}
	if status == "" {
		return nil
	}
	run := board.Run{ID: "run-" + id, Card: id, Status: status, Owner: marker, Epoch: tok.Epoch, Host: "elsewhere", PID: 4242}
	if status == board.RunRunning {
		run.Checkpoint = "step-3"
	}
	if _, err := st.CreateRun(ctx, board.CreateRunParams{Token: tok, Run: run}); err != nil {
		return err
	}
	if _, err := st.SetStateOwned(ctx, board.SetStateOwnedParams{Card: id, Token: tok, To: board.StateInProgress}); err != nil {
		return err
	}
	return st.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: id, Token: tok, RunID: run.ID})
}
