package board

import (
	"strings"
	"testing"
	"time"
)

// SystemClock's readings are the process's start advanced by monotonic
// time: wall and monotonic differences between two readings agree exactly,
// so a step of the host's wall clock between them would show in neither
// (DESIGN.md#clock-steps). time.Now's wall and monotonic readings are taken
// apart and drift by a step; these never do.
func TestSystemClockIgnoresWallClockSteps(t *testing.T) {
	var c SystemClock
	first := c.Now()
	for range 1000 {
		now := c.Now()
		mono := now.Sub(first)
		wall := now.Round(0).Sub(first.Round(0))
		if mono != wall {
			t.Fatalf("reading %v after %v: monotonic difference %v, wall difference %v; want them equal", now, first, mono, wall)
		}
		if !strings.Contains(now.String(), "m=") {
			t.Fatalf("reading %v carries no monotonic clock reading", now)
		}
	}
	if d := time.Until(c.Now()); d > time.Second || d < -time.Second {
		t.Logf("SystemClock is %v from time.Now: the host's wall clock was stepped since the process started", d)
	}
}
