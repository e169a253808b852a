package supervise

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/waitbound"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// The test binary plays every part. Run with supervisorArg first it is the
// supervisor (what `leasekeeper claim` re-executes itself as); with
// helperEnv=claimer it is a claimer: it starts the script in helperScript
// under a supervisor, prints "child PID" and "supervisor PID", then "done
// CODE" once the command's tree is gone, and waits to be killed.
const (
	supervisorArg = "supervise-test-supervisor"
	helperEnv     = "SUPERVISE_TEST_HELPER"
	helperScript  = "SUPERVISE_TEST_SCRIPT"
)

var launcher Launcher

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervisorArg {
		os.Exit(Serve(os.Args[2:]))
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	launcher = Launcher{Path: exe, Args: []string{supervisorArg}}
	if os.Getenv(helperEnv) == "claimer" {
		runClaimerHelper()
		return
	}
	waitbound.Widen()
	os.Exit(m.Run())
}

func runClaimerHelper() {
	l := launcher
	l.Subreaper = true // the helper's only children are supervisors
	c, err := Start(l, exec.Command("sh", "-c", os.Getenv(helperScript)))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	// Retire OS threads the way the runtime may: a goroutine that exits
	// while locked to its thread terminates that thread. Nothing of the
	// command may depend on the thread that started it.
	done := make(chan struct{})
	for range 16 {
		go func() {
			runtime.LockOSThread()
			done <- struct{}{}
		}()
	}
	for range 16 {
		<-done
	}
	fmt.Println("child", c.Pid())
	fmt.Println("supervisor", c.sup.Process.Pid)
	code, _ := c.Wait(context.Background())
	fmt.Println("done", code, len(c.Survivors()), c.SupervisorErr() != nil)
	select {}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		script string
		want   int
	}{
		{"success", "exit 0", 0},
		{"failure status passes through", "exit 7", 7},
		{"killed by a signal is 128+signal", "kill -TERM $$", 128 + int(syscall.SIGTERM)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := Start(launcher, exec.Command("sh", "-c", tc.script))
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Wait(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("exit code = %d, want %d", got, tc.want)
			}
			if err := c.SupervisorErr(); err != nil {
				t.Errorf("SupervisorErr = %v, want nil", err)
			}
		})
	}
}

func TestStartFailureIsReported(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"/nonexistent/leasekeeper-cmd", "leasekeeper-no-such-command"} {
		_, err := Start(launcher, exec.Command(name))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Start(%s) err = %v, want an error naming it", name, err)
		}
	}
}

// The command runs with the environment, directory and streams given, and
// holds no descriptor a command started directly would not: none of the
// supervisor's pipes.
func TestCommandEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := `echo "$LK_TEST_VAR $(pwd)"; ls /proc/self/fd`
	run := func(start func(*exec.Cmd) (int, error)) []string {
		t.Helper()
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = append(os.Environ(), "LK_TEST_VAR=seen")
		cmd.Dir = dir
		var out strings.Builder
		cmd.Stdout = &out
		if code, err := start(cmd); err != nil || code != 0 {
			t.Fatalf("exit code = %d (%v), want 0", code, err)
		}
		return strings.Fields(out.String())
	}
	direct := run(func(cmd *exec.Cmd) (int, error) { err := cmd.Run(); return cmd.ProcessState.ExitCode(), err })
	got := run(func(cmd *exec.Cmd) (int, error) {
		c, err := Start(launcher, cmd)
		if err != nil {
			return -1, err
		}
		return c.Wait(context.Background())
	})
	if len(got) < 2 || got[0] != "seen" || got[1] != dir {
		t.Fatalf("command said %q, want %q then its directory %q", got, "seen", dir)
	}
	// A subset, not the same set: a descriptor the test process inherited
	// without close-on-exec (from a wrapper such as time -o) reaches the
	// command started directly, and rightly not the supervised one.
	if len(direct) < 2 || !slices.Equal(got[:2], direct[:2]) {
		t.Fatalf("supervised command said %q, want what it says started directly: %q", got, direct)
	}
	for _, fd := range got[2:] {
		if !slices.Contains(direct[2:], fd) {
			t.Errorf("supervised command holds fd %s, which a command started directly does not (supervised %q, direct %q)", fd, got[2:], direct[2:])
		}
	}
}

// readyChild starts a shell script that prints "ready" once its traps are
// installed, so the test signals it only after that.
func readyChild(t *testing.T, script string) *Child {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(launcher, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Terminate(0) })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("child said %q, %v; want ready", line, err)
	}
	return c
}

func TestTerminate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		script     string
		grace      time.Duration
		wantKilled bool
		wantCode   int
	}{
		{
			name:     "a child that honours SIGTERM stops within the grace",
			script:   `trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done`,
			grace:    time.Minute,
			wantCode: 42,
		},
		{
			name:       "a child that ignores SIGTERM is killed after the grace",
			script:     `trap '' TERM; echo ready; while :; do sleep 0.05; done`,
			grace:      200 * time.Millisecond,
			wantKilled: true,
			wantCode:   128 + int(syscall.SIGKILL),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := readyChild(t, tc.script)
			if got := c.Terminate(tc.grace); got != tc.wantKilled {
				t.Errorf("Terminate killed = %v, want %v", got, tc.wantKilled)
			}
			got, err := c.Wait(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.wantCode {
				t.Errorf("exit code = %d, want %d", got, tc.wantCode)
			}
		})
	}
}

func TestSignalForwarding(t *testing.T) {
	t.Parallel()
	c := readyChild(t, `trap 'exit 3' INT; echo ready; while :; do sleep 0.05; done`)
	if err := c.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != 3 {
		t.Errorf("exit code = %d, want 3", got)
	}
	// Signalling a finished child is a no-op, not an error.
	if err := c.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("Signal after exit = %v, want nil", err)
	}
}

// treeShapes are commands that leave a process behind that tries to
// outlive them: in bg.pid, under the command's directory. Each writes
// "ready" once that process is where it wants to be, then keeps running
// ($1 = hold) or, once the test has looked and created "go", exits 0
// ($1 = exit). Output goes nowhere, so a survivor cannot hold a test's
// pipe open.
var treeShapes = []struct {
	name, script string
	settled      func(pid int) bool
}{
	{
		name:   "background job",
		script: `sleep 600 & echo $! > bg.pid; echo ready > ready; then_exit "$1"; sleep 600`,
		settled: func(pid int) bool {
			st, err := pidprobe.ReadStat(pid)
			return err == nil && st.Comm == "sleep"
		},
	},
	{
		name:   "new session",
		script: `setsid sleep 600 & echo $! > bg.pid; echo ready > ready; then_exit "$1"; sleep 600`,
		settled: func(pid int) bool {
			st, err := pidprobe.ReadStat(pid)
			return err == nil && st.Comm == "sleep" && st.SID == pid
		},
	},
	{
		name: "double-forked daemon",
		script: `(setsid sh -c 'sleep 600 & echo $! > bg.pid' &)
while [ ! -s bg.pid ]; do sleep 0.01; done
echo ready > ready; then_exit "$1"; sleep 600`,
		settled: func(pid int) bool {
			st, err := pidprobe.ReadStat(pid)
			if err != nil || st.Comm != "sleep" {
				return false
			}
			parent, err := pidprobe.ReadStat(st.PPID)
			return err == nil && parent.Comm != "sh" // its parents have exited
		},
	},
}

// tree is one command's process tree as a test recorded it.
type tree struct {
	t    *testing.T
	dir  string
	pids map[int]bool
}

func newTree(t *testing.T) *tree { return &tree{t: t, dir: t.TempDir(), pids: map[int]bool{}} }

// scriptPrelude starts every tree script: output goes nowhere, and
// then_exit exits 0 once the test created "go" if $1 is "exit".
const scriptPrelude = `exec </dev/null >/dev/null 2>&1
then_exit() { [ "$1" = exit ] || return 0; while [ ! -f go ]; do sleep 0.01; done; exit 0; }
`

func (tr *tree) command(script, arg string) *exec.Cmd {
	cmd := exec.Command("sh", "-c", scriptPrelude+script, "sh", arg)
	cmd.Dir = tr.dir
	return cmd
}

// settle waits for the script's escaping process to settle, then records
// it and every live descendant of root.
func (tr *tree) settle(settled func(int) bool, root int) {
	tr.t.Helper()
	var bg int
	waitFor(tr.t, "the command to be ready", func() bool {
		b, err := os.ReadFile(filepath.Join(tr.dir, "bg.pid"))
		if err != nil {
			return false
		}
		bg, err = strconv.Atoi(strings.TrimSpace(string(b)))
		_, rerr := os.Stat(filepath.Join(tr.dir, "ready"))
		return err == nil && rerr == nil
	})
	tr.add(bg)
	waitFor(tr.t, "the escaping process to settle", func() bool { return settled(bg) })
	ds, err := descendants(root, nil)
	if err != nil {
		tr.t.Fatal(err)
	}
	for _, p := range ds {
		tr.add(p)
	}
}

// release lets an "exit" script exit.
func (tr *tree) release() {
	tr.t.Helper()
	if err := os.WriteFile(filepath.Join(tr.dir, "go"), nil, 0o600); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) add(pid int) {
	if !tr.pids[pid] {
		tr.pids[pid] = true
		tr.t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
}

func (tr *tree) alive() []int {
	var out []int
	for pid := range tr.pids {
		if pidprobe.New().Probe(context.Background(), pid, pidprobe.Identity{}) != pidprobe.Dead {
			out = append(out, pid)
		}
	}
	return out
}

func (tr *tree) checkGone() {
	tr.t.Helper()
	for _, pid := range tr.alive() {
		st, _ := pidprobe.ReadStat(pid)
		tr.t.Errorf("pid %d (%s, parent %d, session %d) survived", pid, st.Comm, st.PPID, st.SID)
	}
}

// TestTreeIsGoneWhenChildIsDone ends the command in-process: it exits on its
// own, or Terminate stops it. Either way, once Done is closed nothing of
// its tree is left.
func TestTreeIsGoneWhenChildIsDone(t *testing.T) {
	t.Parallel()
	for _, shape := range treeShapes {
		t.Run(shape.name+"/command exits", func(t *testing.T) {
			t.Parallel()
			tr := newTree(t)
			c, err := Start(launcher, tr.command(shape.script, "exit"))
			if err != nil {
				t.Fatal(err)
			}
			tr.settle(shape.settled, c.sup.Process.Pid)
			tr.release()
			if code, _ := c.Wait(context.Background()); code != 0 {
				t.Errorf("exit code = %d, want 0", code)
			}
			tr.checkGone()
		})
		t.Run(shape.name+"/terminate", func(t *testing.T) {
			t.Parallel()
			tr := newTree(t)
			c, err := Start(launcher, tr.command(shape.script, "hold"))
			if err != nil {
				t.Fatal(err)
			}
			tr.settle(shape.settled, c.sup.Process.Pid)
			if killed := c.Terminate(time.Minute); killed {
				t.Errorf("Terminate killed = true, want false (sh honours SIGTERM)")
			}
			tr.checkGone()
			if s := c.Survivors(); len(s) != 0 {
				t.Errorf("Survivors = %v, want none", s)
			}
		})
	}
}

// claimer is a claimer helper process.
type claimer struct {
	cmd             *exec.Cmd
	out             *bufio.Reader
	child, superPID int
	reaped          chan struct{}
}

func startClaimer(t *testing.T, tr *tree, script string, ownGroup bool) *claimer {
	t.Helper()
	cmd := exec.Command(launcher.Path, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=claimer", helperScript+"="+scriptPrelude+script)
	cmd.Dir = tr.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: ownGroup}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &claimer{cmd: cmd, out: bufio.NewReader(out), reaped: make(chan struct{})}
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-c.reaped })
	c.child = c.expect(t, "child")
	c.superPID = c.expect(t, "supervisor")
	go func() { _ = cmd.Wait(); close(c.reaped) }()
	return c
}

func (c *claimer) expect(t *testing.T, what string) int {
	t.Helper()
	line, err := c.out.ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) < 2 || f[0] != what {
		t.Fatalf("claimer said %q (%v), want %q", line, err, what)
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTreeDiesWithItsClaimer kills the claimer, its whole process group or
// its supervisor with SIGKILL, and checks that nothing of the command's tree
// survives: the supervisor outlives a killed claimer and kills the tree,
// and a claimer (a subreaper) whose supervisor was killed kills what the
// supervisor left.
func TestTreeDiesWithItsClaimer(t *testing.T) {
	t.Parallel()
	ends := []struct {
		name     string
		ownGroup bool
		kill     func(c *claimer) error
	}{
		{"claimer killed", false, func(c *claimer) error { return c.cmd.Process.Signal(syscall.SIGKILL) }},
		{"claimer's process group killed", true, func(c *claimer) error { return syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL) }},
		{"supervisor killed", false, func(c *claimer) error { return syscall.Kill(c.superPID, syscall.SIGKILL) }},
	}
	for _, shape := range treeShapes {
		for _, end := range ends {
			t.Run(shape.name+"/"+end.name, func(t *testing.T) {
				t.Parallel()
				tr := newTree(t)
				c := startClaimer(t, tr, shape.script, end.ownGroup)
				tr.settle(shape.settled, c.cmd.Process.Pid)
				if !tr.pids[c.child] || !tr.pids[c.superPID] {
					t.Fatalf("recorded tree %v lacks the command %d or the supervisor %d", tr.pids, c.child, c.superPID)
				}
				if err := end.kill(c); err != nil {
					t.Fatal(err)
				}
				if end.name == "supervisor killed" {
					// The claimer lives on and reports once it has killed
					// what the supervisor left.
					line, err := c.out.ReadString('\n')
					if f := strings.Fields(line); err != nil || len(f) != 4 || f[0] != "done" || f[2] != "0" || f[3] != "true" {
						t.Errorf("claimer said %q (%v), want done, no survivors, the supervisor's death noted", line, err)
					}
					tr.checkGone()
					return
				}
				waitFor(t, "the command's tree to die", func() bool { return len(tr.alive()) == 0 })
			})
		}
	}
}

// waitFor polls cond until it holds, for up to 20s. It is only for waiting
// on other processes, which offer nothing to block on.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKillByStopsTheCommandAtTheDeadline: the supervisor keeps the last
// deadline handed to KillBy on its own — SIGTERM grace before it, SIGKILL
// at it — and a later KillBy replaces an earlier one (DESIGN.md#process-tree).
func TestKillByStopsTheCommandAtTheDeadline(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		script       string
		wantCode     int
		wantKilled   bool
		notBeforeEnd bool // stopped only by the SIGKILL at the deadline
	}{
		{"a command that honours SIGTERM stops at deadline minus grace", `trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done`, 42, false, false},
		{"a command that ignores SIGTERM is killed at the deadline", `trap '' TERM; echo ready; while :; do sleep 0.05; done`, 128 + int(syscall.SIGKILL), true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const grace = 200 * time.Millisecond
			c := readyChild(t, tc.script)
			// The first deadline is replaced before it comes, by one that
			// never comes and then by the one that ends the command.
			start := time.Now()
			c.KillBy(start.Add(300*time.Millisecond), grace)
			c.KillBy(start.Add(time.Hour), grace)
			deadline := start.Add(900 * time.Millisecond)
			c.KillBy(deadline, grace)
			code, err := c.Wait(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ended := time.Now()
			if code != tc.wantCode || !c.Expired() {
				t.Errorf("exit code %d, Expired %v; want %d and true", code, c.Expired(), tc.wantCode)
			}
			if killed := c.Terminate(0); killed != tc.wantKilled {
				t.Errorf("killed = %v, want %v", killed, tc.wantKilled)
			}
			earliest := deadline.Add(-grace)
			if tc.notBeforeEnd {
				earliest = deadline
			}
			if ended.Before(earliest) {
				t.Errorf("the command ended %s after the first KillBy, before %s: a replaced deadline was kept", ended.Sub(start), earliest.Sub(start))
			}
			if late := ended.Sub(deadline); late > 2*time.Second {
				t.Errorf("the command ended %s after its deadline", late)
			}
		})
	}
}

// The first deadline travels with the start: a caller stopped right after
// Start, before it could hand any deadline on, still has its command
// stopped by it.
//
// The command must have set its trap before the deadline, or SIGTERM ends
// it before the kill and the run proves nothing: a run whose "ready" is
// read only after the deadline (a loaded machine) is repeated with a
// deadline four times as far, never judged.
func TestTheFirstDeadlineComesWithTheStart(t *testing.T) {
	t.Parallel()
	const grace = 200 * time.Millisecond
	for lead := 700 * time.Millisecond; lead <= 45*time.Second; lead *= 4 {
		if firstDeadlineRun(t, lead, grace) {
			return
		}
		t.Logf("the command was not ready %v after its start; again with a longer deadline", lead)
	}
	t.Fatal("the command never set its trap before its deadline")
}

// firstDeadlineRun runs one command whose only deadline is the one given at
// its start, lead from now, and reports false when the run is not a fair
// test of it (the command was not ready before the deadline).
func firstDeadlineRun(t *testing.T, lead, grace time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(lead)
	l := launcher
	l.KillBy, l.KillGrace = deadline, grace
	cmd := exec.Command("sh", "-c", `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(l, cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Terminate(0)
	// Read "ready" beside the wait: a shell the TERM reached before its
	// trap never says it, and the read ends only when Wait closes the pipe.
	readyAt := make(chan time.Time, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) == "ready" {
			readyAt <- time.Now()
		}
		close(readyAt)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), lead+30*time.Second)
	defer cancel()
	code, err := c.Wait(ctx)
	if err != nil {
		t.Fatalf("the command outlived a deadline given only at its start: %v", err)
	}
	if at, ok := <-readyAt; !ok || !at.Before(deadline.Add(-grace)) {
		return false
	}
	if !c.Expired() || code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit code %d, Expired %v; want killed at the deadline", code, c.Expired())
	}
	if ended := time.Now(); ended.Before(deadline) {
		t.Errorf("killed %v before its deadline", deadline.Sub(ended))
	}
	return true
}

// TestStartErrorCarriesTheErrno: a command the supervisor cannot exec is
// refused with the exec's errno wrapped, so the claimer tells a missing
// command (os.ErrNotExist: exit 127) from one that cannot run
// (os.ErrPermission: exit 126).
func TestStartErrorCarriesTheErrno(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\ntrue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path               string
		notExist, noAccess bool
	}{
		{filepath.Join(dir, "no", "such", "binary"), true, false},
		{notExec, false, true},
	} {
		c, err := Start(launcher, exec.Command(tc.path))
		if err == nil {
			_, _ = c.Wait(context.Background())
			t.Fatalf("Start(%s) = nil error", tc.path)
		}
		if got := errors.Is(err, os.ErrNotExist); got != tc.notExist {
			t.Errorf("Start(%s) = %v: errors.Is(os.ErrNotExist) = %v, want %v", tc.path, err, got, tc.notExist)
		}
		if got := errors.Is(err, os.ErrPermission); got != tc.noAccess {
			t.Errorf("Start(%s) = %v: errors.Is(os.ErrPermission) = %v, want %v", tc.path, err, got, tc.noAccess)
		}
		if !strings.Contains(err.Error(), tc.path) {
			t.Errorf("Start(%s) = %v: does not name the command", tc.path, err)
		}
	}
}

// TestThreadsOfAnExitedMainThreadAreKilled: a process whose main thread
// exited while its other threads run shows as a zombie in its stat (the
// state is its main thread's), yet it runs, and can fork. The sweep must
// kill it like any other process of the tree, not pass it over as exited.
func TestThreadsOfAnExitedMainThreadAreKilled(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 for a process whose main thread exits first")
	}
	tr := newTree(t)
	// The second thread says ready once the main thread is gone, then runs
	// until the test creates "stop" or its directory is removed.
	py := `import ctypes, os, threading, time
def run():
    while open("/proc/self/stat").read().rsplit(") ", 1)[1][0] != "Z":
        time.sleep(0.01)
    open("ready", "w").close()
    while os.path.exists("ready") and not os.path.exists("stop"):
        time.sleep(0.05)
threading.Thread(target=run).start()
ctypes.CDLL(None).syscall(60, 0)  # exit(2): this thread only
`
	stop := filepath.Join(tr.dir, "stop")
	t.Cleanup(func() { _ = os.WriteFile(stop, nil, 0o644) })
	cmd := tr.command(`python3 -c "$1" & echo $! > py.pid
while [ ! -f ready ]; do sleep 0.01; done`, py)
	c, err := Start(launcher, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(tr.dir, "py.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/stat")
		if err != nil {
			continue // exited since the listing
		}
		if st, err := pidprobe.ParseStat(b); err != nil || !st.Zombie() {
			t.Fatalf("Done (survivors %v) but thread %s of process %d, whose main thread exited, still runs", c.Survivors(), task.Name(), pid)
		}
	}
}
