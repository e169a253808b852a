package watchdog_test

// A seeded, deterministic simulation of the watchdog, in the spirit of
// FoundationDB's simulation testing: in one process it runs the real
// reaper (watchdog.New / RunOnce, its oracle), the real heartbeat loop and
// both store twins — bbolt on a real file, MongoDB through the project's
// MongoDB-wire test server — under a schedule drawn from one seed, and
// checks a list of safety invariants after every step (sim_check_test.go).
//
// The world (sim_world_test.go): several agents, each a heartbeat loop and a
// reaper over a store connection that can be killed between any two writes
// or lose a reply (sim_store_test.go); each host's own clock, offset and
// drifting from the store's; worker processes on the agents' hosts driven
// through the same requests the socket layer's worker flow makes; pid
// liveness through one fake process table per host; operators who
// force-release, move and reopen cards; on the fleet, a foreign binary that
// strips leases. Nothing sleeps and nothing reads the wall clock: every
// clock is a function of the simulated time, and the MongoDB twin's server
// clock is set through mongotest.ClockProxy. Each pass decides one card at
// a time (Config.Workers 1), so a seed replays exactly.
//
// Running it:
//
//	go test ./watchdog/ -run TestSim                       # the CI seed set
//	go test ./watchdog/ -run 'TestSim/bolt' -sim.seed 17 -v  # replay one seed
//	go test ./watchdog/ -run TestSim -sim.seeds 5000         # a survey
//	    -sim.first N (survey start), -sim.variant bolt|mongo, -sim.steps N,
//	    -sim.trace (log every step)
//
// A failure names the invariant, the seed, the step, the replay command, the
// card's history and the last steps. A survey logs, at the end, which seeds
// broke which invariant first.
//
// # What it caught
//
// Run against the watchdog before its fixes for these defects, surveys of
// seeds 1–2000 on bbolt and 1–100 on MongoDB (default steps) found the
// defects below; simCatches names one or two seeds for each, and those
// seeds stay in the CI set, so a regression of any of them fails CI. A seed
// reports every invariant it breaks, each at its first violation. On the
// fixed code every seed of the CI set passes, as do bbolt seeds 1–2000 and
// MongoDB seeds 1–60 (go test ./watchdog/ -run 'TestSim$' -sim.variant
// bolt -sim.seeds 2000).
//
//	defect                                              variant seed invariant
//	1 fleet reaper judges server-stamped leases by the  mongo      6 live-run
//	  agent's own clock (a live run orphaned, the       mongo     38 one-holder
//	  live worker superseded)
//	2 a card judged by a run an earlier claim recorded  bolt       7 foreign-run
//	  (reopened card, new claim records no run, dies:   mongo      6 foreign-run
//	  filed with the old run's verdict)
//	3 the recovery sweep releases recovery claims bare  bolt     246 redispatch
//	  (a finished card in in_progress handed out again  mongo     78 stuck
//	  by ClaimNext; on the fleet left free in
//	  in_progress)
//	5 kept claims starve the capped expired listing     bolt      22 starvation
//	7 Reopen's dependents guard looks at the last       bolt      10 reopen
//	  blocker only
//	- the oracle promotes a queued run                  bolt       1 queued-run
//	                                                    mongo     78 queued-run
//	- the worker flow (cmd/leasekeeper/claim.go's, as   mongo     31 stuck
//	  mirrored here) releases the claim after a move
//	  into the running column whose reply was lost:
//	  on the fleet the card is left free in
//	  in_progress
//
// How often: on bbolt (seeds 1–2000) foreign-run in 992 seeds, queued-run
// 828, reopen 94, starvation 72, redispatch 4; on MongoDB (seeds 1–100)
// foreign-run 24, queued-run 22, live-run 21, stuck 8, one-holder 1 (reopen
// is rarer there: 2 of another 100). Not reached: the un-leased sweep's bare
// release (with the gate on, which it is in every simulated agent, the
// decision pass's un-leased arm takes those claims first), and the recovery
// sweep's marker-only release check (a pass lists and releases with no
// other writer in between here); both have example tests of their own
// (TestFleetUnleasedSweep, TestRecoverySweepReleaseIsFenced). Seeds are
// specific to the simulation's draws: a change to them renumbers the
// seeds, so re-survey after one.

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	simSeed        = flag.Uint64("sim.seed", 0, "watchdog simulation: run only this seed")
	simSeeds       = flag.Int("sim.seeds", 0, "watchdog simulation: run this many seeds from -sim.first instead of the CI set")
	simFirst       = flag.Uint64("sim.first", 1, "watchdog simulation: the first seed of -sim.seeds")
	simVariantFlag = flag.String("sim.variant", "", "watchdog simulation: bolt or mongo (default both)")
	simSteps       = flag.Int("sim.steps", 0, "watchdog simulation: steps per seed (default: the profile's)")
	simTrace       = flag.Bool("sim.trace", false, "watchdog simulation: log every step")
)

// simCatch is one row of the catch table: a defect the simulation found,
// the seed and variant that show it, and the invariant that fired.
type simCatch struct {
	defect    string
	variant   simVariant
	seed      uint64
	invariant string
}

// simCatches is filled in from surveys of this code (see the package
// comment); every seed here is in the CI set.
var simCatches = []simCatch{
	{"1: the fleet reaper judges leases by the agent's clock", simMongo, 6, "live-run"},
	{"1: the fleet reaper judges leases by the agent's clock", simMongo, 38, "one-holder"},
	{"2: a card judged by an earlier claim's run", simBolt, 7, "foreign-run"},
	{"2: a card judged by an earlier claim's run", simMongo, 6, "foreign-run"},
	{"3: the recovery sweep releases recovery claims bare", simBolt, 246, "redispatch"},
	{"3: the recovery sweep releases recovery claims bare", simMongo, 78, "stuck"},
	{"5: kept claims starve the capped listing", simBolt, 22, "starvation"},
	{"7: Reopen's guard looks at the last blocker only", simBolt, 10, "reopen"},
	{"the oracle promotes a queued run", simBolt, 1, "queued-run"},
	{"the oracle promotes a queued run", simMongo, 78, "queued-run"},
	{"the worker flow releases after an unconfirmed move into the running column", simMongo, 31, "stuck"},
}

// simCISeeds is the bounded set CI runs by default besides the catch
// table's seeds: ordinary bbolt seeds (cheap); on MongoDB, whose seeds cost
// several seconds each, the catch table's alone.
var simCISeeds = map[simVariant][]uint64{
	simBolt: seedRange(2, 40),
}

func seedRange(first, last uint64) []uint64 {
	var out []uint64
	for s := first; s <= last; s++ {
		out = append(out, s)
	}
	return out
}

func simSeedsFor(v simVariant) []uint64 {
	switch {
	case *simSeed != 0:
		return []uint64{*simSeed}
	case *simSeeds > 0:
		out := make([]uint64, *simSeeds)
		for i := range out {
			out[i] = *simFirst + uint64(i)
		}
		return out
	}
	seeds := slices.Clone(simCISeeds[v])
	for _, c := range simCatches {
		if c.variant == v {
			seeds = append(seeds, c.seed)
		}
	}
	slices.Sort(seeds)
	return slices.Compact(seeds)
}

func TestSim(t *testing.T) {
	// Every seed is a world of its own (its store, its clocks, its rng)
	// that reads no wall clock and shares nothing with another: the seeds
	// run in parallel, and each still replays exactly.
	t.Parallel()
	for _, v := range []simVariant{simBolt, simMongo} {
		if *simVariantFlag != "" && *simVariantFlag != string(v) {
			continue
		}
		t.Run(string(v), func(t *testing.T) {
			t.Parallel()
			var (
				mu    sync.Mutex
				fails = map[string][]uint64{}
			)
			start := time.Now()
			seeds := simSeedsFor(v)
			for _, seed := range seeds {
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					t.Parallel()
					w := newSimWorld(t, v, seed, *simSteps)
					w.run()
					mu.Lock()
					for _, inv := range w.violated {
						fails[inv] = append(fails[inv], seed)
					}
					mu.Unlock()
				})
			}
			// The survey's summary, once every seed's subtest has ended
			// (a cleanup runs after the parallel subtests).
			t.Cleanup(func() {
				if len(seeds) <= 1 {
					return
				}
				var b strings.Builder
				fmt.Fprintf(&b, "%d %s seeds in %s; seeds breaking each invariant:", len(seeds), v, time.Since(start).Round(time.Millisecond))
				names := make([]string, 0, len(fails))
				for n := range fails {
					names = append(names, n)
				}
				slices.Sort(names)
				for _, n := range names {
					fmt.Fprintf(&b, "\n  %-12s %4d seeds: %v", n, len(fails[n]), head(fails[n], 40))
				}
				t.Log(b.String())
			})
		})
	}
}

func head(s []uint64, n int) []uint64 {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// TestSimReplaysExactly runs seeds twice and compares their whole traces:
// a failing seed is only useful if it replays.
func TestSimReplaysExactly(t *testing.T) {
	t.Parallel()
	for _, v := range []simVariant{simBolt, simMongo} {
		t.Run(string(v), func(t *testing.T) {
			t.Parallel()
			if *simVariantFlag != "" && *simVariantFlag != string(v) {
				t.Skip("another variant was asked for")
			}
			steps := 250
			if v == simMongo {
				steps = 120
			}
			var traces [][]string
			for i := range 2 {
				t.Run(fmt.Sprintf("run%d", i+1), func(t *testing.T) {
					w := newSimWorld(t, v, 3, steps)
					w.quiet = true
					w.run()
					traces = append(traces, w.trace)
				})
			}
			if len(traces) != 2 {
				return
			}
			a, b := traces[0], traces[1]
			if traceDigest(a) == traceDigest(b) {
				return
			}
			i := 0
			for i < len(a) && i < len(b) && a[i] == b[i] {
				i++
			}
			at := func(tr []string) string {
				if i < len(tr) {
					return tr[i]
				}
				return "(end of trace)"
			}
			t.Errorf("seed 3 replayed differently (%s, then %s); first difference at line %d:\n  %s\n  %s",
				traceDigest(a), traceDigest(b), i+1, at(a), at(b))
		})
	}
}

func traceDigest(trace []string) string {
	h := sha256.Sum256([]byte(strings.Join(trace, "\n")))
	return fmt.Sprintf("%d lines %s", len(trace), hex.EncodeToString(h[:8]))
}
