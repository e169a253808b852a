package pidprobe

import (
	"context"
	"os/exec"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/pidreuse"
)

// TestReusedPIDIsNotTheDeadOwner lands a new process on the pid of one
// that died, within and beyond a second of the dead one's start, and
// checks that the identity recorded for the dead one never matches the new
// one.
func TestReusedPIDIsNotTheDeadOwner(t *testing.T) {
	if !pidreuse.Enter(t) {
		return
	}
	ctx := context.Background()
	p := New()
	for _, tc := range pidreuse.Cases {
		var rec Identity
		pid, deadStart := pidreuse.Dead(t, nil, func(pid int) {
			var err error
			if rec, err = p.Identify(ctx, pid); err != nil {
				t.Fatal(err)
			}
		})
		pidreuse.WaitPastTicks(t, deadStart+tc.Ticks-1)
		pidreuse.StartOnPID(t, pid, exec.Command("sleep", "600"))
		what := pidreuse.Describe(pid, deadStart, pidreuse.StartTicks(t, pid))
		if got := p.Probe(ctx, pid, rec); got != Dead {
			t.Errorf("%s: Probe of %s with the dead process's identity = %v, want dead", tc.Name, what, got)
		}
		// Without the pidfs inode, the start ticks alone tell them apart.
		rec.Inode = 0
		if got := p.Probe(ctx, pid, rec); got != Dead {
			t.Errorf("%s: Probe of %s with the dead process's start ticks = %v, want dead", tc.Name, what, got)
		}
		cur, err := p.Identify(ctx, pid)
		if err != nil {
			t.Fatal(err)
		}
		if got := Compare(rec, cur); got != MatchOther {
			t.Errorf("%s: Compare(dead %+v, reuser %+v) = %v, want MatchOther", tc.Name, rec, cur, got)
		}
	}
}
