// Package pidreuse lets a test land a new process on the pid of one that
// just died, the way the kernel eventually recycles every pid: it re-runs
// the calling test inside a fresh pid namespace (unshare --pid --fork
// --mount-proc, as root), where writing /proc/sys/kernel/ns_last_pid
// chooses the next pid the kernel hands out. Tests of the pid prober, the
// boot sweep, the watchdog's oracle and the socket's peer identity use it
// to check that a reused pid is never taken for its dead owner.
package pidreuse

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const insideEnv = "LEASEKEEPER_PIDREUSE_INSIDE"

// Enter re-runs the calling top-level test in a new pid namespace and
// returns false, or, inside that namespace, returns true: the caller does
// its work only then.
//
//	func TestX(t *testing.T) {
//		if !pidreuse.Enter(t) {
//			return
//		}
//		...
//	}
//
// The test is skipped where a pid namespace cannot be made (not root, no
// unshare): reusing a chosen pid needs that privilege.
func Enter(t *testing.T) bool {
	t.Helper()
	if os.Getenv(insideEnv) == t.Name() {
		if os.Getpid() != 1 {
			t.Fatalf("inside the pid namespace, but pid %d, not 1", os.Getpid())
		}
		return true
	}
	if strings.Contains(t.Name(), "/") {
		t.Fatal("pidreuse.Enter works on top-level tests only")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1) here: cannot make a pid namespace")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot make a pid namespace")
	}
	args := []string{"--pid", "--fork", "--mount-proc", os.Args[0], "-test.run=^" + t.Name() + "$", "-test.count=1", "-test.v"}
	cmd := exec.Command(unshare, args...)
	cmd.Env = append(os.Environ(), insideEnv+"="+t.Name())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if err != nil && strings.Contains(out.String(), "unshare failed") {
		t.Skipf("cannot make a pid namespace here: %s", strings.TrimSpace(out.String()))
	}
	if err != nil || !strings.Contains(out.String(), "--- PASS: "+t.Name()) {
		t.Errorf("in a pid namespace: %v\n%s", err, out.String())
		return false
	}
	t.Logf("in a pid namespace:\n%s", out.String())
	return false
}

// StartOnPID starts cmd so that the kernel gives it pid, which must be free:
// the pid of a process that has exited and been reaped. It sets
// ns_last_pid to pid-1 and starts cmd at once; nothing else forks in the
// namespace meanwhile, so the kernel's next pid is cmd's. The process is
// killed when the test ends.
func StartOnPID(t *testing.T, pid int, cmd *exec.Cmd) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
		t.Fatalf("set ns_last_pid: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if got := cmd.Process.Pid; got != pid {
		t.Fatalf("the new process got pid %d, want the dead one's %d", got, pid)
	}
}

// Dead starts cmd (`sleep 600` when nil), hands its pid to record while it
// runs, then kills and reaps it, so that its pid is free for StartOnPID. It
// returns the pid and the process's start time in clock ticks after boot.
func Dead(t *testing.T, cmd *exec.Cmd, record func(pid int)) (pid int, startTicks int64) {
	t.Helper()
	if cmd == nil {
		cmd = exec.Command("sleep", "600")
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid = cmd.Process.Pid
	record(pid)
	startTicks = StartTicks(t, pid)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	return pid, startTicks
}

// StartTicks reads field 22 of /proc/PID/stat: the start in clock ticks.
func StartTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	n, err := strconv.ParseInt(f[22-3], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// WaitPastTicks returns once the boot clock (/proc/uptime, in hundredths of
// a second: clock ticks) has passed ticks, so that a process started now
// starts later than that. It waits on the clock, the one thing the case is
// about; nothing else is synchronised by it.
func WaitPastTicks(t *testing.T, ticks int64) {
	t.Helper()
	deadline := time.Now().Add(time.Duration(ticks-uptimeTicks(t))*10*time.Millisecond + 10*time.Second)
	for uptimeTicks(t) <= ticks {
		if time.Now().After(deadline) {
			t.Fatalf("the boot clock never passed tick %d", ticks)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func uptimeTicks(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	sec, frac, ok := strings.Cut(strings.Fields(string(b))[0], ".")
	s, err1 := strconv.ParseInt(sec, 10, 64)
	c, err2 := strconv.ParseInt(frac, 10, 64)
	if !ok || len(frac) != 2 || err1 != nil || err2 != nil {
		t.Fatalf("/proc/uptime = %q", b)
	}
	return s*100 + c
}

// Cases are the two delays the tests reuse a pid after: within one second
// of the dead process's start (one tick later: the earliest a process can
// be told apart by its start time), and beyond one second but within two
// (where a start-time tolerance of a second or two still matches).
var Cases = []struct {
	Name  string
	Ticks int64 // after the dead process's start
}{
	{"within a second", 1},
	{"beyond a second", 130},
}

// Describe names a reuse for failure messages.
func Describe(pid int, deadStart, newStart int64) string {
	return fmt.Sprintf("pid %d (dead process started at tick %d, its reuser at tick %d: %d ms later)",
		pid, deadStart, newStart, (newStart-deadStart)*10)
}
