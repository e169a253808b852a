package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// TestE2EStoppedClaimersCommandDiesByItsDeadline: in keepalive mode a
// stopped `leasekeeper claim` stops pinging and its claim is lost — but CMD
// runs under the supervisor, which is not stopped. The supervisor holds the
// deadline the claimer last confirmed and kills CMD's tree by it, so the
// next holder of the card never overlaps CMD; once the claimer is resumed
// it exits "lost" (DESIGN.md#process-tree).
func TestE2EStoppedClaimersCommandDiesByItsDeadline(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second
	e := newEnv(t, "lease: 3s\nliveness: keepalive\n")
	e.Start()
	e.MustRun("card", "create", "paused")
	claim := e.startClaim("paused", "--", "sh", "-c", `echo $$ > "$1"; exec sleep 1000`, "sh", "worker.pid")
	pid := e.workerPID("worker.pid")
	agentproc.WaitFor(t, 20*time.Second, "CMD to become sleep", func() bool { return procComm(pid) == "sleep" })

	// Every deadline the claimer confirmed counts from a confirmation sent
	// before this instant: none lies later than lease − margin after it.
	stopped := time.Now()
	if err := claim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = claim.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	agentproc.WaitFor(t, 20*time.Second, "CMD to die while its claimer is stopped", func() bool { return dead(pid) })
	gone := time.Since(stopped)
	// The bound: the latest trusted deadline, plus the poll's period and
	// slack for a loaded machine.
	if bound := lease - heartbeat.DefaultMargin(lease) + time.Second; gone > bound {
		t.Errorf("CMD died %s after its claimer stopped, want by the trusted deadline (at most %s, with slack)", gone.Round(time.Millisecond), bound)
	}
	t.Logf("CMD died %s after its claimer stopped", gone.Round(time.Millisecond))

	resume()
	if got := claim.wait(t, 20*time.Second); got != claimExitLost {
		t.Fatalf("resumed claim exited %d, want %d (lost); output:\n%s", got, claimExitLost, claim.output.String())
	}
	if out := claim.output.String(); !strings.Contains(out, "lost") {
		t.Errorf("the resumed claim does not say its claim was lost:\n%s", out)
	}
}
