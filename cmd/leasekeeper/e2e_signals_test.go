package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// The tests of this file hold `leasekeeper claim` to delivering each SIGINT
// and SIGTERM to its command exactly once, however it was sent: to claim
// alone, to its process group (a terminal's ^C, `kill -INT -PGID`), or to
// every process of its tree (systemd's control-group kill). CMD is this
// test binary, counting what it receives (countSignals).

// sigCountEnv makes this test binary, run as a claim's CMD, count the
// SIGINTs and SIGTERMs it receives instead of running the tests: one line
// per signal, appended to the file the variable names. sigExitEnv names
// the signal ("INT" or "TERM") after which it exits 0, once every signal
// sent to it before that one is counted.
const (
	sigCountEnv = "LEASEKEEPER_TEST_SIGCOUNT"
	sigExitEnv  = "LEASEKEEPER_TEST_SIGEXIT"
)

// countBarrier is the signal the counter sends itself before it exits. The
// kernel delivers pending signals lowest number first and Go's runtime
// hands a batch of them over lowest first too, so once this real-time
// signal (above SIGINT and SIGTERM) arrives, every SIGINT and SIGTERM
// generated for this process before it was sent has been counted.
const countBarrier = syscall.Signal(40)

// countSignals is main for the counting CMD. It writes its pid to
// worker.pid once it counts.
func countSignals() int {
	names := map[os.Signal]string{syscall.SIGINT: "INT", syscall.SIGTERM: "TERM"}
	c := make(chan os.Signal, 64)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM, countBarrier)
	out, err := os.OpenFile(os.Getenv(sigCountEnv), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := os.WriteFile("worker.pid", fmt.Appendf(nil, "%d\n", os.Getpid()), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for s := range c {
		if s == countBarrier {
			return 0
		}
		if _, err := fmt.Fprintln(out, names[s]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if names[s] == os.Getenv(sigExitEnv) {
			_ = syscall.Kill(os.Getpid(), countBarrier)
		}
	}
	return 2
}

// TestE2EEachSignalReachesTheCommandOnce sends one SIGINT or SIGTERM the
// ways it comes in practice and counts what CMD received. Then, to end
// the run, it sends the other signal to claim alone: claim passes it on
// after the first, so once CMD has it, every copy of the first has
// arrived; CMD exits on it.
func TestE2EEachSignalReachesTheCommandOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		sig  syscall.Signal
		// send sends sig; c is the running claim.
		send func(c *signalledClaim, t *testing.T)
		tty  bool
	}{
		{name: "^C at the terminal", sig: syscall.SIGINT, tty: true, send: func(c *signalledClaim, t *testing.T) {
			if _, err := c.tty.Write([]byte{3}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "SIGINT to the process group", sig: syscall.SIGINT, send: (*signalledClaim).toGroup},
		{name: "SIGINT to claim alone", sig: syscall.SIGINT, send: (*signalledClaim).toClaim},
		{name: "SIGTERM to the process group", sig: syscall.SIGTERM, send: (*signalledClaim).toGroup},
		{name: "SIGTERM to claim alone", sig: syscall.SIGTERM, send: (*signalledClaim).toClaim},
		{name: "SIGTERM to every process of the tree", sig: syscall.SIGTERM, send: (*signalledClaim).toTree},
		{name: "SIGTERM by pkill -f 'leasekeeper claim'", sig: syscall.SIGTERM, send: (*signalledClaim).toClaimPattern},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			other, otherName := syscall.SIGTERM, "TERM"
			if tc.sig == syscall.SIGTERM {
				other, otherName = syscall.SIGINT, "INT"
			}
			e := newEnv(t, "lease: 3s\n")
			e.Start()
			e.MustRun("card", "create", "sig")
			c := e.startSignalledClaim(tc.tty, otherName)
			c.sig = tc.sig
			tc.send(c, t)
			// claim says so once the signal reached it; anything it passes
			// on from then goes to the supervisor before `other` does.
			agentproc.WaitFor(t, 20*time.Second, "claim to take the signal", func() bool {
				return strings.Contains(c.output.String(), tc.sig.String()+": ")
			})
			if err := syscall.Kill(c.cmd.Process.Pid, other); err != nil {
				t.Fatal(err)
			}
			select {
			case <-c.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("claim still running 30s after CMD was told to exit; output:\n%s", c.output.String())
			}
			b, err := os.ReadFile(filepath.Join(e.Dir, "signals"))
			if err != nil {
				t.Fatal(err)
			}
			counts := map[string]int{}
			for _, l := range strings.Fields(string(b)) {
				counts[l]++
			}
			name := map[syscall.Signal]string{syscall.SIGINT: "INT", syscall.SIGTERM: "TERM"}[tc.sig]
			if counts[name] != 1 || counts[otherName] != 1 {
				t.Errorf("CMD received %d SIG%s and %d SIG%s, want exactly one of each; claim said:\n%s",
					counts[name], name, counts[otherName], otherName, c.output.String())
			}
		})
	}
}

// signalledClaim is a `leasekeeper claim` in a process group of its own,
// as a shell starts a job, whose CMD counts signals.
type signalledClaim struct {
	t      *testing.T
	cmd    *exec.Cmd
	sig    syscall.Signal
	tty    *os.File // the terminal's master side, when it has one
	output *agentproc.Buffer
	done   chan struct{}
	worker int
}

// startSignalledClaim starts claim on card "sig" with the counting CMD.
// With tty, claim leads a session whose controlling terminal is a new
// pseudo-terminal, in the foreground, as in an interactive shell.
func (e *env) startSignalledClaim(tty bool, exitOn string) *signalledClaim {
	t := e.t
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "claim", "sig", "--", self)
	cmd.Env = e.Environ(sigCountEnv+"="+filepath.Join(e.Dir, "signals"), sigExitEnv+"="+exitOn)
	cmd.Dir = e.Dir
	c := &signalledClaim{t: t, cmd: cmd, output: &agentproc.Buffer{}, done: make(chan struct{})}
	copied := make(chan struct{})
	if tty {
		master, slave := openPTY(t)
		c.tty = master
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		go func() {
			// Ends with EIO once every process holding the terminal is gone.
			_, _ = io.Copy(c.output, master)
			close(copied)
		}()
		defer slave.Close()
	} else {
		close(copied)
		cmd.Stdout, cmd.Stderr = c.output, c.output
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		<-copied
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
		if c.tty != nil {
			_ = c.tty.Close()
		}
	})
	c.worker = e.workerPID("worker.pid")
	return c
}

// openPTY opens a new pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		_ = m.Close()
		t.Fatal(err)
	}
	return m, s
}

func (c *signalledClaim) toClaim(t *testing.T) {
	if err := syscall.Kill(c.cmd.Process.Pid, c.sig); err != nil {
		t.Fatal(err)
	}
}

func (c *signalledClaim) toGroup(t *testing.T) {
	if err := syscall.Kill(-c.cmd.Process.Pid, c.sig); err != nil {
		t.Fatal(err)
	}
}

// toTree sends the signal to claim and then to each of its descendants,
// as systemd stops a unit (KillMode=control-group): the main process
// first, then every other process of the unit's cgroup.
func (c *signalledClaim) toTree(t *testing.T) {
	pids := descendants(c.cmd.Process.Pid)
	if !slices.Contains(pids, c.worker) {
		t.Fatalf("claim's tree %v lacks CMD %d", pids, c.worker)
	}
	c.toClaim(t)
	for _, pid := range pids {
		if err := syscall.Kill(pid, c.sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatal(err)
		}
	}
}

// toClaimPattern signals, one by one, every process of claim's tree whose
// command line names "leasekeeper claim", as `pkill -f 'leasekeeper claim'`
// does: claim and its supervisor, never CMD. The witness must not match,
// or the signal it saw would pass for one the kernel gave CMD too.
func (c *signalledClaim) toClaimPattern(t *testing.T) {
	pids := append([]int{c.cmd.Process.Pid}, descendants(c.cmd.Process.Pid)...)
	matched := 0
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(raw), "\x00", " ")
		if pid == c.worker || !strings.Contains(filepath.Base(strings.Fields(cmdline)[0])+" "+strings.Join(strings.Fields(cmdline)[1:], " "), "leasekeeper claim") {
			continue
		}
		matched++
		if err := syscall.Kill(pid, c.sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatal(err)
		}
	}
	if matched == 0 {
		t.Fatal("no process of claim's tree names \"leasekeeper claim\"")
	}
}
