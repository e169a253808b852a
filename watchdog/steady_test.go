package watchdog

import (
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
)

// A forward step of the store's clock makes every lease look older than it
// is. The reaper watches the store's clock against its own monotonic one,
// and decides nothing until it has seen them agree for a lease and the
// orphan grace: a live holder's card is not taken at the step, and a dead
// holder's is, once that much steady time has passed (DESIGN.md#clock-steps).
func TestAStoreClockStepDecidesNothingUntilSteady(t *testing.T) {
	grace := lease / 3
	for _, watched := range []bool{true, false} {
		name := map[bool]string{true: "Watched", false: "Unwatched"}[watched]
		t.Run(name, func(t *testing.T) {
			mono := boardtest.NewManualClock(t0) // this agent's monotonic clock
			var opts []envOpt
			if watched {
				opts = append(opts, func(o *envOpts) { o.cfg.Steady = mono.Now })
			}
			e := newEnv(t, opts...)
			steady := func(d time.Duration) { e.clock.Advance(d); mono.Advance(d) }
			run := func() PassResult {
				t.Helper()
				res, err := e.r.RunOnce(e.ctx, false)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			if res := run(); watched && res.ClockWait != lease+grace {
				t.Errorf("first pass: ClockWait %v, want %v (nothing watched yet)", res.ClockWait, lease+grace)
			}
			steady(lease + grace)
			if res := run(); res.ClockWait != 0 {
				t.Fatalf("after %v of steady clocks: ClockWait %v, want 0", lease+grace, res.ClockWait)
			}
			e.card("c1", board.StateReady)
			tok, r := e.launch("c1", board.RunRunning, board.Run{})
			// d1's owner ran on this agent's host and its pid is gone: a
			// proof no clock enters, which decides even while unsteady.
			e.card("d1", board.StateReady)
			_, dr := e.launch("d1", board.RunRunning, board.Run{Host: "agenthost", PID: 777})

			e.clock.Advance(time.Hour) // the store's clock steps; the holder lives on
			res := run()
			c, got := e.get("c1"), e.getRun(r.ID)
			if !watched {
				// Without the watch, the step alone proves the live
				// holder's run orphaned: what the watch exists to stop.
				if got.FailureCode != board.FailureProcessOrphaned {
					t.Errorf("unwatched pass after the step: run %s %s; the step no longer fools an unwatched reaper, so this test no longer shows what the watch is for", got.Status, got.FailureCode)
				}
				return
			}
			if res.ClockWait != lease+grace {
				t.Errorf("pass after a 1h step: ClockWait %v, want %v", res.ClockWait, lease+grace)
			}
			if cr, ok := res.Card("c1"); !ok || cr.Decision.Rule != RuleClockUnsteady || cr.Outcome != OutcomeKept {
				t.Errorf("c1 after the step: %+v; want kept (%s)", cr, RuleClockUnsteady)
			}
			if got := e.getRun(dr.ID); got.FailureCode != board.FailureProcessOrphaned {
				t.Errorf("d1's run with its owner's pid gone = %s %s; want promoted %s even while the clock is unsteady", got.Status, got.FailureCode, board.FailureProcessOrphaned)
			}
			if c.Token() != tok || got.Status != board.RunRunning {
				t.Fatalf("after the step: card %s@%d, run %s %s; want the live holder's claim and running run untouched", c.Claim, c.ClaimEpoch, got.Status, got.FailureCode)
			}
			// The holder was alive; now it stops renewing (its agent is
			// gone). Once the clocks have agreed for a lease and the grace,
			// its lease proves the run orphaned as before.
			steady(lease)
			if res := run(); res.ClockWait != grace || e.get("c1").Token() != tok {
				t.Errorf("a lease after the step: ClockWait %v, c1 held by %+v; want %v and c1 untouched", res.ClockWait, e.get("c1").Token(), grace)
			}
			steady(grace)
			if res := run(); res.ClockWait != 0 {
				t.Errorf("a lease and the grace after the step: ClockWait %v, want 0", res.ClockWait)
			}
			if got := e.getRun(r.ID); got.FailureCode != board.FailureProcessOrphaned {
				t.Errorf("run after the wait = %s %s, want promoted %s", got.Status, got.FailureCode, board.FailureProcessOrphaned)
			}
			// A backward step is watched the same way.
			e.clock.Advance(-time.Hour)
			if res := run(); res.ClockWait != lease+grace {
				t.Errorf("pass after a backward step: ClockWait %v, want %v", res.ClockWait, lease+grace)
			}
		})
	}
}

// A slow call to read the store's clock widens what its reading may mean;
// it is not a step. A step larger than the tolerance beyond that is.
func TestSteadinessTellsASlowReadFromAStep(t *testing.T) {
	const l, g = 30 * time.Second, 10 * time.Second
	base := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		rtt      time.Duration // the second read's round trip
		skew     time.Duration // what the store's clock moved beyond ours
		wantStep bool
	}{
		{"fast read, no step", 10 * time.Millisecond, 0, false},
		{"slow read, reading lowered by its round trip", 1100 * time.Millisecond, -1100 * time.Millisecond, false},
		{"drift within the tolerance", 10 * time.Millisecond, 1500 * time.Millisecond, false},
		{"forward step", 10 * time.Millisecond, time.Hour, true},
		{"backward step", 10 * time.Millisecond, -time.Hour, true},
		{"forward step behind a slow read", 1100 * time.Millisecond, 10 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s steadiness
			mono := base
			s.observe(base, mono, mono.Add(10*time.Millisecond), l, g)
			mono = mono.Add(time.Minute)
			wait, step := s.observe(base.Add(time.Minute+tc.skew), mono, mono.Add(tc.rtt), l, g)
			if (step != 0) != tc.wantStep {
				t.Errorf("step %v, want a step: %v", step, tc.wantStep)
			}
			if tc.wantStep && wait != l+g {
				t.Errorf("wait after a step %v, want %v", wait, l+g)
			}
			if !tc.wantStep && wait != 0 {
				t.Errorf("wait %v after a minute of steady clocks, want 0", wait)
			}
		})
	}
}
