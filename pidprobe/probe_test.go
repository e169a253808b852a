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

	start, err := p.StartTime(ctx, pid)
	if err != nil {
		t.Fatalf("StartTime(%d): %v", pid, err)
	}
	// The start time is milliseconds since the epoch, close to now.
	if d := time.Since(time.UnixMilli(start)); d < -5*time.Second || d > time.Minute {
		t.Fatalf("StartTime = %v, %v from now; want about now", time.UnixMilli(start), d)
	}

	tests := []struct {
		name  string
		start int64
		want  Liveness
	}{
		{"recorded start", start, Alive},
		{"start unknown", 0, Alive},
		{"within tolerance", start + 500, Alive},
		{"started later: reused pid", start + 10_000, Dead},
		{"started earlier: reused pid", start - 10_000, Dead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Probe(ctx, pid, tt.start); got != tt.want {
				t.Errorf("Probe(%d, %d) = %v, want %v", pid, tt.start, got, tt.want)
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
	start, err := p.StartTime(ctx, pid)
	if err != nil {
		t.Fatalf("StartTime: %v", err)
	}
	if got := p.Probe(ctx, pid, start); got != Alive {
		t.Fatalf("before kill: Probe = %v, want alive", got)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	_ = cmd.Wait() // reaped: the pid no longer exists

	for _, s := range []int64{start, 0} {
		if got := p.Probe(ctx, pid, s); got != Dead {
			t.Errorf("after kill+wait: Probe(%d, %d) = %v, want dead", pid, s, got)
		}
	}
	if _, err := p.StartTime(ctx, pid); !errors.Is(err, ErrNoProcess) {
		t.Errorf("after kill+wait: StartTime err = %v, want ErrNoProcess", err)
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
	start, err := p.StartTime(ctx, pid)
	if err != nil {
		t.Fatalf("StartTime: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	waitState(t, pid, "Z")

	for _, s := range []int64{start, 0} {
		if got := p.Probe(ctx, pid, s); got != Dead {
			t.Errorf("zombie: Probe(%d, %d) = %v, want dead", pid, s, got)
		}
	}
}

func TestProbeSelfAndInit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := New()
	self := os.Getpid()
	start, err := p.StartTime(ctx, self)
	if err != nil {
		t.Fatalf("StartTime(self): %v", err)
	}
	if got := p.Probe(ctx, self, start); got != Alive {
		t.Errorf("Probe(self) = %v, want alive", got)
	}
	// Pid 1 always exists in a pid namespace; with no start time it is
	// alive whoever owns it.
	if got := p.Probe(ctx, 1, 0); got != Alive {
		t.Errorf("Probe(1, 0) = %v, want alive", got)
	}
}

func TestProbeInvalidPID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := New()
	for _, pid := range []int{0, -1, 1 << 40} {
		if got := p.Probe(ctx, pid, 0); got != Unknown {
			t.Errorf("Probe(%d) = %v, want unknown", pid, got)
		}
		if _, err := p.StartTime(ctx, pid); !errors.Is(err, ErrInvalidPID) {
			t.Errorf("StartTime(%d) err = %v, want ErrInvalidPID", pid, err)
		}
	}
}

// When this process's own start time has moved since the prober first read
// it, the wall clock was stepped, every start time moved with it, and a
// mismatch proves nothing: the prober must answer Unknown, not Dead.
func TestProbeMismatchAfterClockStepIsUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cmd := startSleeper(t)
	pid := cmd.Process.Pid
	p := New()
	start, err := p.StartTime(ctx, pid)
	if err != nil {
		t.Fatalf("StartTime: %v", err)
	}
	p.selfOnce.Do(p.readSelf)
	if p.selfStart == 0 {
		t.Fatal("prober could not read its own start time")
	}
	// Pretend the first reading was taken before a one-minute step.
	p.selfStart -= 60_000

	if got := p.Probe(ctx, pid, start+60_000); got != Unknown {
		t.Errorf("mismatch after step: Probe = %v, want unknown", got)
	}
	// A matching start time is still alive: the step check only guards
	// the mismatch verdict.
	if got := p.Probe(ctx, pid, start); got != Alive {
		t.Errorf("match after step: Probe = %v, want alive", got)
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
