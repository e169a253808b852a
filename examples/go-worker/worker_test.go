package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// The example runs as a real process against a real agent process, as a
// user would run it: both binaries are built once for the test binary.
var leasekeeperBin, workerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "go-worker-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	leasekeeperBin = filepath.Join(dir, "leasekeeper")
	workerBin = filepath.Join(dir, "go-worker")
	for pkg, out := range map[string]string{"./cmd/leasekeeper": leasekeeperBin, "./examples/go-worker": workerBin} {
		if err := agentproc.Build(pkg, out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// workerProc is a running go-worker.
type workerProc struct {
	cmd  *exec.Cmd
	out  *agentproc.Buffer
	done chan struct{}
	err  error
}

func startWorker(t *testing.T, a *agentproc.Agent, args ...string) *workerProc {
	t.Helper()
	p := &workerProc{cmd: exec.Command(workerBin, args...), out: &agentproc.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = a.Environ()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("go-worker output:\n%s", p.out.String())
		}
	})
	return p
}

// wait waits for the worker to exit and fails the test unless it exited 0.
func (p *workerProc) wait(t *testing.T, bound time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(bound):
		t.Fatalf("go-worker still running after %s:\n%s", bound, p.out.String())
	}
	if p.err != nil {
		t.Fatalf("go-worker: %v\n%s", p.err, p.out.String())
	}
}

// TestDrainsThePool: every card ends filed with a recorded verdict, owned by
// the worker process, and no claim is left behind.
func TestDrainsThePool(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, leasekeeperBin, "")
	a.Start()
	for _, id := range []string{"build-1", "build-2", "build-3"} {
		a.MustRun("card", "create", id, "--title", "nightly "+id)
	}
	a.MustRun("card", "create", "broken", "--label", "fail")

	w := startWorker(t, a, "-work", "20ms")
	w.wait(t, 60*time.Second)
	if out := w.out.String(); !strings.Contains(out, "pool empty") {
		t.Errorf("worker output does not say the pool ran dry:\n%s", out)
	}

	for _, tc := range []struct {
		card       string
		wantState  string
		wantReason board.Reason
		wantRun    board.RunStatus
	}{
		{"build-1", board.StateDone, board.ReasonRunFinished, board.RunFinished},
		{"build-2", board.StateDone, board.ReasonRunFinished, board.RunFinished},
		{"build-3", board.StateDone, board.ReasonRunFinished, board.RunFinished},
		{"broken", board.StateFailed, board.ReasonRunFailed, board.RunFailed},
	} {
		t.Run(tc.card, func(t *testing.T) {
			c := a.Card(tc.card)
			if c.State != tc.wantState || c.StateReason != tc.wantReason {
				t.Errorf("card %s in %s (reason %q), want %s (reason %q)", tc.card, c.State, c.StateReason, tc.wantState, tc.wantReason)
			}
			if c.Claim != "" || c.ClaimEpoch != 1 {
				t.Errorf("card %s claim %q epoch %d, want released after one claim (epoch 1)", tc.card, c.Claim, c.ClaimEpoch)
			}
			if c.LastRunID == "" {
				t.Fatalf("card %s records no run", tc.card)
			}
			run := a.GetRun(c.LastRunID)
			if run.Status != tc.wantRun {
				t.Errorf("run %s status %s, want %s", run.ID, run.Status, tc.wantRun)
			}
			if got, want := run.PID, w.cmd.Process.Pid; got != want {
				t.Errorf("run %s owned by pid %d, want the worker's pid %d", run.ID, got, want)
			}
		})
	}
	if st := a.Status(); len(st.Claims) != 0 {
		t.Errorf("the agent still renews %d claims after the worker exited: %+v", len(st.Claims), st.Claims)
	}
}

// TestStopsWhenTheClaimIsLost: an operator steals the claim mid-work; the
// worker's claim Context is cancelled, it stops at once and writes nothing
// more for the card (no verdict, no filing), and another worker can take
// the card over at a higher epoch.
func TestStopsWhenTheClaimIsLost(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, leasekeeperBin, "")
	a.Start()
	a.MustRun("card", "create", "long-job")

	w := startWorker(t, a, "-work", "10m", "-max", "1")
	var runID string
	a.WaitFor(30*time.Second, "the worker to start its run", func() bool {
		c := a.Card("long-job")
		runID = c.LastRunID
		return c.State == board.StateInProgress && runID != ""
	})
	a.MustRun("card", "release", "long-job", "--force")

	// -work 10m: only the cancelled claim Context can end the work this
	// soon.
	w.wait(t, 30*time.Second)
	out := w.out.String()
	if !strings.Contains(out, "lost while working") || !strings.Contains(out, "force_released") {
		t.Errorf("worker output does not report the force-release:\n%s", out)
	}
	c := a.Card("long-job")
	if c.State != board.StateInProgress || c.Claimed() {
		t.Errorf("card in %s claimed by %q; want it left in %s, unclaimed (the worker must not file it)", c.State, c.Claim, board.StateInProgress)
	}
	if run := a.GetRun(runID); run.Status != board.RunRunning {
		t.Errorf("run %s status %s; the worker wrote after losing its claim", runID, run.Status)
	}

	// The running column is a pool state on the local twin: a fresh worker
	// resumes the card under a new epoch.
	w2 := startWorker(t, a, "-work", "20ms")
	w2.wait(t, 60*time.Second)
	c = a.Card("long-job")
	if c.State != board.StateDone || c.ClaimEpoch != 2 {
		t.Errorf("after a second worker: card in %s at epoch %d, want %s at epoch 2", c.State, c.ClaimEpoch, board.StateDone)
	}
}

// TestSIGTERMHandsTheCardBack: a stopped worker records its run as
// resumable and releases the card instead of leaving it to the watchdog.
func TestSIGTERMHandsTheCardBack(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, leasekeeperBin, "")
	a.Start()
	a.MustRun("card", "create", "job")

	w := startWorker(t, a, "-work", "10m")
	var runID string
	a.WaitFor(30*time.Second, "the worker to start its run", func() bool {
		runID = a.Card("job").LastRunID
		return runID != ""
	})
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	w.wait(t, 30*time.Second)
	if out := w.out.String(); !strings.Contains(out, "handed back") {
		t.Errorf("worker output does not report the hand-back:\n%s", out)
	}
	c := a.Card("job")
	if c.Claimed() {
		t.Errorf("card still claimed by %s after SIGTERM", c.Claim)
	}
	if run := a.GetRun(runID); run.Status != board.RunFailedResumable {
		t.Errorf("run status %s, want %s", run.Status, board.RunFailedResumable)
	}
}
