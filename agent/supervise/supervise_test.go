package supervise

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// helperEnv switches the test binary into a helper process: a "claimer"
// that starts a long-running child through Start, churns OS threads, prints
// the child's pid and waits to be killed.
const helperEnv = "SUPERVISE_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "claimer" {
		runClaimerHelper()
		return
	}
	os.Exit(m.Run())
}

func runClaimerHelper() {
	c, err := Start(exec.Command("sleep", "1000"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	// Retire OS threads the way the runtime may: a goroutine that exits
	// while locked to its thread terminates that thread. Had the child been
	// forked from one of them, its parent-death signal would fire now.
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
			c, err := Start(exec.Command("sh", "-c", tc.script))
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
		})
	}
}

func TestStartFailureIsReported(t *testing.T) {
	t.Parallel()
	if _, err := Start(exec.Command("/nonexistent/leasekeeper-cmd")); err == nil {
		t.Fatal("Start of a missing binary = nil error")
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
	c, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Signal(syscall.SIGKILL); <-c.Done() })
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
	// Signalling a reaped child is a no-op, not an error.
	if err := c.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("Signal after exit = %v, want nil", err)
	}
}

// TestChildDiesWithKilledClaimer kills a claimer process with SIGKILL and
// checks that its child follows, even though the claimer retired OS threads
// after starting it (the parent-death signal follows the forking thread).
func TestChildDiesWithKilledClaimer(t *testing.T) {
	t.Parallel()
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=claimer")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading helper: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "child" {
		t.Fatalf("helper said %q", line)
	}
	childPID, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(childPID, syscall.SIGKILL) })

	ctx := context.Background()
	probe := pidprobe.New()
	if got := probe.Probe(ctx, childPID, 0); got != pidprobe.Alive {
		t.Fatalf("child after thread churn: %v, want alive (parent-death fired early)", got)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()

	// The kernel delivers the signal asynchronously: poll with a bound.
	deadline := time.Now().Add(10 * time.Second)
	for probe.Probe(ctx, childPID, 0) != pidprobe.Dead {
		if time.Now().After(deadline) {
			t.Fatalf("child %d still alive 10s after its claimer was killed", childPID)
		}
		runtime.Gosched()
		time.Sleep(20 * time.Millisecond)
	}
}
