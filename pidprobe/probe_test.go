package pidprobe

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startSleeper starts a real child process that lives until the test kills
// it; cleanup kills and reaps it whatever the test did.
func startSleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// procState reads the one-letter state of pid from /proc, independently of
// gopsutil, so tests can wait for the kernel to finish a transition.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// waitState polls until pid reaches state. An external process is what we
// wait for here, so a bounded poll is the only tool.
func waitState(t *testing.T, pid int, state string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for procState(pid) != state {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never reached state %q (now %q)", pid, state, procState(pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestProbeLiveProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cmd := startSleeper(t)
	pid := cmd.Process.Pid
	p := New()

	id, err := p.Identify(ctx, pid)
	if err != nil {
		t.Fatalf("Identify(%d): %v", pid, err)
	}
	boot, _ := BootID()
	if !id.Exact() || id.BootID != boot || id.BootID == "" {
		t.Fatalf("Identify = %+v, want start ticks and this boot's id %q", id, boot)
	}
	// The legacy start is milliseconds since the epoch, close to now.
	if d := time.Since(time.UnixMilli(id.StartMillis)); d < -5*time.Second || d > time.Minute {
		t.Fatalf("StartMillis = %v, %v from now; want about now", time.UnixMilli(id.StartMillis), d)
	}
	// Exact: every read of one process says the same.
	for range 3 {
		again, err := p.Identify(ctx, pid)
		if err != nil || again.BootID != id.BootID || again.StartTicks != id.StartTicks || again.Inode != id.Inode {
			t.Fatalf("Identify again = %+v (%v), want %+v", again, err, id)
		}
	}

	with := func(f func(*Identity)) Identity { c := id; f(&c); return c }
	legacy := func(ms int64) Identity { return Identity{StartMillis: ms} }
	tests := []struct {
		name string
		rec  Identity
		want Liveness
	}{
		{"recorded identity", id, Alive},
		{"identity unknown", Identity{}, Alive},
		{"recorded without the pidfs inode", with(func(c *Identity) { c.Inode = 0 }), Alive},
		{"recorded without the boot id", with(func(c *Identity) { c.BootID = "" }), Alive},
		{"started one tick later: reused pid", with(func(c *Identity) { c.StartTicks++ }), Dead},
		{"started one tick earlier: reused pid", with(func(c *Identity) { c.StartTicks-- }), Dead},
		{"another boot: its process died with it", with(func(c *Identity) { c.BootID = "00000000-0000-0000-0000-000000000000" }), Dead},
		{"the millis do not matter to an exact record", with(func(c *Identity) { c.StartMillis -= 3_600_000 }), Alive},
		{"legacy record, same millis", legacy(id.StartMillis), Alive},
		{"legacy record within its tolerance", legacy(id.StartMillis + 500), Alive},
		{"legacy record, started later: reused pid", legacy(id.StartMillis + 10_000), Dead},
		{"legacy record, started earlier: reused pid", legacy(id.StartMillis - 10_000), Dead},
	}
	if id.Inode != 0 {
		tests = append(tests, struct {
			name string
			rec  Identity
			want Liveness
		}{"another pidfs inode: another process", with(func(c *Identity) { c.Inode++ }), Dead})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Probe(ctx, pid, tt.rec); got != tt.want {
				t.Errorf("Probe(%d, %+v) = %v, want %v", pid, tt.rec, got, tt.want)
			}
		})
	}
}

func TestProbeKilledAndReapedIsDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cmd := startSleeper(t)
	pid := cmd.Process.Pid
	p := New()
	id, err := p.Identify(ctx, pid)
	if err != nil {
		t.Fatalf("Identify: %v", err)
	}
	if got := p.Probe(ctx, pid, id); got != Alive {
		t.Fatalf("before kill: Probe = %v, want alive", got)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	_ = cmd.Wait() // reaped: the pid no longer exists

	for _, rec := range []Identity{id, {}, {StartMillis: id.StartMillis}} {
		if got := p.Probe(ctx, pid, rec); got != Dead {
			t.Errorf("after kill+wait: Probe(%d, %+v) = %v, want dead", pid, rec, got)
		}
	}
	if _, err := p.Identify(ctx, pid); !errors.Is(err, ErrNoProcess) {
		t.Errorf("after kill+wait: Identify err = %v, want ErrNoProcess", err)
	}
}

// A killed child that its parent has not reaped yet is a zombie: the pid
// still exists (signal 0 succeeds), but the process has exited and can
// write nothing more. The prober calls it dead.
func TestProbeZombieIsDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cmd := startSleeper(t)
	pid := cmd.Process.Pid
	p := New()
	id, err := p.Identify(ctx, pid)
	if err != nil {
		t.Fatalf("Identify: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	waitState(t, pid, "Z")

	for _, rec := range []Identity{id, {}} {
		if got := p.Probe(ctx, pid, rec); got != Dead {
			t.Errorf("zombie: Probe(%d, %+v) = %v, want dead", pid, rec, got)
		}
	}
	// A zombie still has its identity: a caller that reads it learns it
	// names the same, dead, process.
	if zid, err := p.Identify(ctx, pid); err != nil || Compare(id, zid) != MatchSame {
		t.Errorf("zombie: Identify = %+v (%v), want the same identity %+v", zid, err, id)
	}
}

func TestProbeSelfAndInit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := New()
	self := os.Getpid()
	id, err := p.Identify(ctx, self)
	if err != nil {
		t.Fatalf("Identify(self): %v", err)
	}
	if got := p.Probe(ctx, self, id); got != Alive {
		t.Errorf("Probe(self) = %v, want alive", got)
	}
	// Pid 1 always exists in a pid namespace; with no start time it is
	// alive whoever owns it.
	if got := p.Probe(ctx, 1, Identity{}); got != Alive {
		t.Errorf("Probe(1, 0) = %v, want alive", got)
	}
}

func TestProbeInvalidPID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := New()
	for _, pid := range []int{0, -1, 1 << 40} {
		if got := p.Probe(ctx, pid, Identity{}); got != Unknown {
			t.Errorf("Probe(%d) = %v, want unknown", pid, got)
		}
		if _, err := p.Identify(ctx, pid); !errors.Is(err, ErrInvalidPID) {
			t.Errorf("Identify(%d) err = %v, want ErrInvalidPID", pid, err)
		}
	}
}

// A legacy record (milliseconds only) moves with the wall clock: when this
// process's own legacy start has moved since the prober first read it, the
// wall clock was stepped, every such start moved with it, and a mismatch
// proves nothing: the prober must answer Unknown, not Dead. An exact record
// does not depend on the wall clock at all.
func TestProbeMismatchAfterClockStepIsUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cmd := startSleeper(t)
	pid := cmd.Process.Pid
	p := New()
	id, err := p.Identify(ctx, pid)
	if err != nil {
		t.Fatalf("Identify: %v", err)
	}
	p.selfOnce.Do(p.readSelf)
	if p.selfStart == 0 {
		t.Fatal("prober could not read its own start time")
	}
	// Pretend the first reading was taken before a one-minute step.
	p.selfStart -= 60_000

	tests := []struct {
		name string
		rec  Identity
		want Liveness
	}{
		{"legacy mismatch after a step", Identity{StartMillis: id.StartMillis + 60_000}, Unknown},
		// A matching start is still alive: the step check only guards the
		// mismatch verdict.
		{"legacy match after a step", Identity{StartMillis: id.StartMillis}, Alive},
		{"exact match after a step", id, Alive},
		{"exact mismatch after a step", Identity{BootID: id.BootID, StartTicks: id.StartTicks + 1}, Dead},
	}
	for _, tt := range tests {
		if got := p.Probe(ctx, pid, tt.rec); got != tt.want {
			t.Errorf("%s: Probe = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestLivenessString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		l    Liveness
		want string
	}{{Alive, "alive"}, {Dead, "dead"}, {Unknown, "unknown"}, {Liveness(42), "unknown"}}
	for _, tt := range tests {
		if got := tt.l.String(); got != tt.want {
			t.Errorf("Liveness(%d).String() = %q, want %q", int(tt.l), got, tt.want)
		}
	}
}

func TestHostIdentity(t *testing.T) {
	t.Parallel()
	got, err := Hostname()
	if err != nil {
		t.Fatalf("Hostname: %v", err)
	}
	want, _ := os.Hostname()
	if got != want || got == "" {
		t.Errorf("Hostname() = %q, want %q", got, want)
	}
	id1, err := BootID()
	if err != nil {
		t.Skipf("no boot id on this kernel: %v", err)
	}
	id2, _ := BootID()
	if id1 == "" || id1 != id2 {
		t.Errorf("BootID() = %q then %q, want one stable non-empty id", id1, id2)
	}
}
