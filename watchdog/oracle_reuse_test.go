package watchdog

import (
	"context"
	"os/exec"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/pidreuse"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// TestOracleProvesAReusedPIDsOwnerDead: the owner of a run on this host
// died and a new process took its pid, within and beyond a second of the
// owner's start. The pid no longer names the owner: the oracle has its
// proof that no live owner holds the run, and promotes it.
func TestOracleProvesAReusedPIDsOwnerDead(t *testing.T) {
	if !pidreuse.Enter(t) {
		return
	}
	prober := pidprobe.New()
	for _, tc := range pidreuse.Cases {
		e := newEnv(t)
		e.card("c1", board.StateReady)
		var r board.Run
		pid, deadStart := pidreuse.Dead(t, nil, func(pid int) {
			id, err := prober.Identify(context.Background(), pid)
			if err != nil {
				t.Fatal(err)
			}
			_, r = e.launch("c1", board.RunRunning, board.Run{Host: agentHost, PID: pid,
				PIDStart: id.StartMillis, PIDStartTicks: id.StartTicks, BootID: id.BootID})
		})
		pidreuse.WaitPastTicks(t, deadStart+tc.Ticks-1)
		pidreuse.StartOnPID(t, pid, exec.Command("sleep", "600"))
		what := pidreuse.Describe(pid, deadStart, pidreuse.StartTicks(t, pid))

		res := e.oracle(prober).ResolveAfterTransfer(e.ctx, e.get("c1"), e.get("c1"), e.clock.Now())
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if res.Proof != ProofPIDDead || res.Run == nil || res.Run.FailureCode != board.FailureProcessOrphaned {
			t.Errorf("%s: Resolve of run %s owned by %s = proof %q, run %+v; want the owner proved dead and the run promoted",
				tc.Name, r.ID, what, res.Proof, res.Run)
		}
	}
}
