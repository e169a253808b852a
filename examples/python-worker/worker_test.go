// Package pythonworker_test runs the Python example worker (worker.py)
// against a real agent process, so the socket API it documents for other
// languages is exercised exactly as a non-Go worker uses it.
package pythonworker_test

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

var leasekeeperBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "python-worker-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	leasekeeperBin = filepath.Join(dir, "leasekeeper")
	if err := agentproc.Build("./cmd/leasekeeper", leasekeeperBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// python3 finds the interpreter. A machine without one skips these tests,
// but CI must not: there the skip would hide the only test of the API from
// outside Go.
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is missing in CI: the Python example worker must run there")
		}
		t.Skip("python3 not installed")
	}
	return p
}

type workerProc struct {
	cmd  *exec.Cmd
	out  *agentproc.Buffer
	done chan struct{}
	err  error
}

func startWorker(t *testing.T, a *agentproc.Agent, args ...string) *workerProc {
	t.Helper()
	argv := append([]string{"worker.py"}, args...)
	p := &workerProc{cmd: exec.Command(python3(t), argv...), out: &agentproc.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = a.Environ("PYTHONDONTWRITEBYTECODE=1")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("worker.py output:\n%s", p.out.String())
		}
	})
	return p
}

func (p *workerProc) wait(t *testing.T, bound time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(bound):
		t.Fatalf("worker.py still running after %s:\n%s", bound, p.out.String())
	}
	if p.err != nil {
		t.Fatalf("worker.py: %v\n%s", p.err, p.out.String())
	}
}

// TestDrainsThePool: the Python worker claims every card, records a run
// owned by its own pid, files the card by the run's verdict and releases.
func TestDrainsThePool(t *testing.T) {
	t.Parallel()
	python3(t)
	a := agentproc.New(t, leasekeeperBin, "")
	a.Start()
	for _, id := range []string{"py-1", "py-2", "py-3"} {
		a.MustRun("card", "create", id)
	}
	a.MustRun("card", "create", "py-broken", "--label", "fail")

	w := startWorker(t, a, "--work", "0.02")
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
		{"py-1", board.StateDone, board.ReasonRunFinished, board.RunFinished},
		{"py-2", board.StateDone, board.ReasonRunFinished, board.RunFinished},
		{"py-3", board.StateDone, board.ReasonRunFinished, board.RunFinished},
		{"py-broken", board.StateFailed, board.ReasonRunFailed, board.RunFailed},
	} {
		t.Run(tc.card, func(t *testing.T) {
			c := a.Card(tc.card)
			if c.State != tc.wantState || c.StateReason != tc.wantReason {
				t.Errorf("card %s in %s (reason %q), want %s (reason %q)", tc.card, c.State, c.StateReason, tc.wantState, tc.wantReason)
			}
			if c.Claimed() || c.ClaimEpoch != 1 {
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
				t.Errorf("run %s owned by pid %d, want the Python process's pid %d", run.ID, got, want)
			}
		})
	}
	if st := a.Status(); len(st.Claims) != 0 {
		t.Errorf("the agent still renews %d claims after the worker exited: %+v", len(st.Claims), st.Claims)
	}
}

// TestNoticesClaimLost: an operator's force-release reaches the Python
// worker on its watch stream; it stops working at once and writes nothing
// more for the card.
func TestNoticesClaimLost(t *testing.T) {
	t.Parallel()
	python3(t)
	a := agentproc.New(t, leasekeeperBin, "")
	a.Start()
	a.MustRun("card", "create", "py-long")

	w := startWorker(t, a, "--work", "600", "--max", "1")
	var runID string
	a.WaitFor(30*time.Second, "the worker to start its run", func() bool {
		c := a.Card("py-long")
		runID = c.LastRunID
		return c.State == board.StateInProgress && runID != ""
	})
	a.MustRun("card", "release", "py-long", "--force")

	// --work 600: only the claim_lost frame can end the work this soon.
	w.wait(t, 30*time.Second)
	out := w.out.String()
	if !strings.Contains(out, "lost while working") || !strings.Contains(out, "force_released") {
		t.Errorf("worker output does not report the claim_lost frame:\n%s", out)
	}
	c := a.Card("py-long")
	if c.State != board.StateInProgress || c.Claimed() {
		t.Errorf("card in %s claimed by %q; want it left in %s, unclaimed", c.State, c.Claim, board.StateInProgress)
	}
	if run := a.GetRun(runID); run.Status != board.RunRunning {
		t.Errorf("run %s status %s; the worker wrote after losing its claim", runID, run.Status)
	}
}

// TestStopsAtTheTrustedDeadline: when the agent goes away mid-work, the
// worker hears nothing more and must stop by itself once the lease the agent
// last vouched for runs out (the orphan proof of the watchdog relies on it).
func TestStopsAtTheTrustedDeadline(t *testing.T) {
	t.Parallel()
	python3(t)
	a := agentproc.New(t, leasekeeperBin, "lease: 3s\n")
	agentPID := a.Start().Pid()
	a.MustRun("card", "create", "py-orphan")

	w := startWorker(t, a, "--work", "600", "--max", "1")
	a.WaitFor(30*time.Second, "the worker to start its run", func() bool {
		return a.Card("py-orphan").LastRunID != ""
	})
	// SIGSTOP, not SIGTERM: a stopped agent neither answers nor says
	// goodbye, which is what a hung or partitioned agent looks like.
	if err := syscall.Kill(agentPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(agentPID, syscall.SIGCONT) }()
	w.wait(t, 30*time.Second)
	if out := w.out.String(); !strings.Contains(out, "no word from the agent") {
		t.Errorf("worker did not stop on its own deadline:\n%s", out)
	}
}

// TestKeepaliveMode: against an agent in keepalive liveness mode the worker
// pings, so a card whose work outlasts the lease (and the keepalive window
// of two heartbeat intervals) is still renewed throughout and filed by the
// same claim.
func TestKeepaliveMode(t *testing.T) {
	t.Parallel()
	python3(t)
	a := agentproc.New(t, leasekeeperBin, "lease: 3s\nliveness: keepalive\n")
	a.Start()
	a.MustRun("card", "create", "py-keepalive")

	w := startWorker(t, a, "--work", "5")
	w.wait(t, 60*time.Second)
	c := a.Card("py-keepalive")
	if c.State != board.StateDone || c.ClaimEpoch != 1 {
		t.Errorf("card in %s at epoch %d, want %s at epoch 1 (one claim, renewed throughout)", c.State, c.ClaimEpoch, board.StateDone)
	}
	if strings.Contains(w.out.String(), "lost") {
		t.Errorf("worker lost its claim in keepalive mode:\n%s", w.out.String())
	}
}

// TestSIGTERMHandsTheCardBack: a stopped worker records its run as
// resumable and releases the card.
func TestSIGTERMHandsTheCardBack(t *testing.T) {
	t.Parallel()
	python3(t)
	a := agentproc.New(t, leasekeeperBin, "")
	a.Start()
	a.MustRun("card", "create", "py-job")

	w := startWorker(t, a, "--work", "600")
	var runID string
	a.WaitFor(30*time.Second, "the worker to start its run", func() bool {
		runID = a.Card("py-job").LastRunID
		return runID != ""
	})
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	w.wait(t, 30*time.Second)
	if out := w.out.String(); !strings.Contains(out, "handed back") {
		t.Errorf("worker output does not report the hand-back:\n%s", out)
	}
	if c := a.Card("py-job"); c.Claimed() {
		t.Errorf("card still claimed by %s after SIGTERM", c.Claim)
	}
	if run := a.GetRun(runID); run.Status != board.RunFailedResumable {
		t.Errorf("run status %s, want %s", run.Status, board.RunFailedResumable)
	}
}
