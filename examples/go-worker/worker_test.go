package main

import (
	"fmt"
	"os/exec"
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
	agentproc.Main(m, map[string]*string{"./cmd/leasekeeper": &leasekeeperBin, "./examples/go-worker": &workerBin})
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
// the worker process, one run per card, and no claim is left behind.
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
		wantCode   string
	}{
		{"build-1", board.StateDone, board.ReasonRunFinished, board.RunFinished, ""},
		{"build-2", board.StateDone, board.ReasonRunFinished, board.RunFinished, ""},
		{"build-3", board.StateDone, board.ReasonRunFinished, board.RunFinished, ""},
		{"broken", board.StateFailed, board.ReasonRunFailed, board.RunFailed, "WORK_FAILED"},
	} {
		t.Run(tc.card, func(t *testing.T) {
			c := a.Card(tc.card)
			if c.State != tc.wantState || c.StateReason != tc.wantReason {
				t.Errorf("card %s in %s (reason %q), want %s (reason %q)", tc.card, c.State, c.StateReason, tc.wantState, tc.wantReason)
			}
			if c.Claim != "" || c.ClaimEpoch != 1 {
				t.Errorf("card %s claim %q epoch %d, want released after one claim (epoch 1)", tc.card, c.Claim, c.ClaimEpoch)
			}
			if c.LastRunID == "" || len(c.Runs) != 1 {
				t.Fatalf("card %s records run %q of runs %v, want exactly one", tc.card, c.LastRunID, c.Runs)
			}
			run := a.GetRun(c.LastRunID)
			if run.Status != tc.wantRun || run.FailureCode != tc.wantCode {
				t.Errorf("run %s status %s (failure %q), want %s (failure %q)", run.ID, run.Status, run.FailureCode, tc.wantRun, tc.wantCode)
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
// worker's claim Context is cancelled and it stops at once. Its one late
// Finish is refused by the fence and writes nothing: the run stays as the
// force-release closed it (resumable, CLAIM_RELEASED), the card where it
// was. The next worker's Start resumes that same run at a higher epoch.
func TestStopsWhenTheClaimIsLost(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, leasekeeperBin, "")
	a.Start()
	a.MustRun("card", "create", "long-job")

	w := startWorker(t, a, "-work", "10m", "-max", "1")
	started := a.StartedRun("long-job")
	runID, marker := started.LastRunID, started.Claim
	a.MustRun("card", "release", "long-job", "--force")

	// -work 10m: only the cancelled claim Context can end the work this
	// soon.
	w.wait(t, 30*time.Second)
	out := w.out.String()
	for _, want := range []string{"lost while working", "force_released", "refused by the fence"} {
		if !strings.Contains(out, want) {
			t.Errorf("worker output lacks %q:\n%s", want, out)
		}
	}
	c := a.Card("long-job")
	if c.State != board.StateInProgress || c.Claimed() || c.StateReason != board.ReasonNone {
		t.Errorf("card in %s (reason %q) claimed by %q; want it left in %s, unclaimed (the worker must not file it)", c.State, c.StateReason, c.Claim, board.StateInProgress)
	}
	run := a.GetRun(runID)
	if run.Status != board.RunFailedResumable || run.FailureCode != board.FailureClaimReleased || run.Checkpoint != "worked-ms=0" {
		t.Errorf("run %s status %s, failure %q, checkpoint %q; want %s, %q, %q as the force-release left it (the late Finish must write nothing)",
			runID, run.Status, run.FailureCode, run.Checkpoint, board.RunFailedResumable, board.FailureClaimReleased, "worked-ms=0")
	}
	if evs := a.WritesAfterRelease("long-job", marker); len(evs) != 0 {
		t.Errorf("the worker wrote after losing its claim: %+v", evs)
	}

	// The running column is a pool state on the local store: a fresh
	// worker's Start takes the card under a new epoch and resumes its run.
	w2 := startWorker(t, a, "-work", "20ms")
	w2.wait(t, 60*time.Second)
	if want := fmt.Sprintf("resumed run %s at checkpoint %q", runID, "worked-ms=0"); !strings.Contains(w2.out.String(), want) {
		t.Errorf("second worker output lacks %q:\n%s", want, w2.out.String())
	}
	c = a.Card("long-job")
	if c.State != board.StateDone || c.ClaimEpoch != 2 || c.LastRunID != runID || len(c.Runs) != 1 {
		t.Errorf("after a second worker: card in %s at epoch %d, run %s of %v; want %s at epoch 2, run %s alone",
			c.State, c.ClaimEpoch, c.LastRunID, c.Runs, board.StateDone, runID)
	}
	run = a.GetRun(runID)
	if run.Status != board.RunFinished || run.Epoch != 2 || run.PID != w2.cmd.Process.Pid {
		t.Errorf("resumed run %s: status %s, epoch %d, pid %d; want %s, epoch 2, the second worker's pid %d",
			runID, run.Status, run.Epoch, run.PID, board.RunFinished, w2.cmd.Process.Pid)
	}
}

// TestSIGTERMHandsTheCardBackToBeResumed: a stopped worker finishes its run
// as resumable with the progress it made as checkpoint, which releases the
// card instead of leaving it to the watchdog; the next worker's Start
// resumes that run, checkpoint and all.
func TestSIGTERMHandsTheCardBackToBeResumed(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, leasekeeperBin, "")
	a.Start()
	a.MustRun("card", "create", "job")

	w := startWorker(t, a, "-work", "10m")
	runID := a.StartedRun("job").LastRunID
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	w.wait(t, 30*time.Second)
	if out := w.out.String(); !strings.Contains(out, "handed back") {
		t.Errorf("worker output does not report the hand-back:\n%s", out)
	}
	c := a.Card("job")
	if c.Claimed() || c.State != board.StateInProgress {
		t.Errorf("card in %s claimed by %q after SIGTERM; want it released in the pool state %s", c.State, c.Claim, board.StateInProgress)
	}
	run := a.GetRun(runID)
	if run.Status != board.RunFailedResumable || run.FailureCode != "INTERRUPTED" || !strings.HasPrefix(run.Checkpoint, "worked-ms=") {
		t.Fatalf("run status %s, failure %q, checkpoint %q; want %s, INTERRUPTED, the progress made", run.Status, run.FailureCode, run.Checkpoint, board.RunFailedResumable)
	}
	if want := fmt.Sprintf("run %s resumable at checkpoint %q", runID, run.Checkpoint); !strings.Contains(w.out.String(), want) {
		t.Errorf("worker output lacks %q:\n%s", want, w.out.String())
	}

	w2 := startWorker(t, a, "-work", "20ms")
	w2.wait(t, 60*time.Second)
	if want := fmt.Sprintf("resumed run %s at checkpoint %q", runID, run.Checkpoint); !strings.Contains(w2.out.String(), want) {
		t.Errorf("second worker output lacks %q:\n%s", want, w2.out.String())
	}
	c = a.Card("job")
	if c.State != board.StateDone || c.ClaimEpoch != 2 || c.LastRunID != runID || len(c.Runs) != 1 {
		t.Errorf("after a second worker: card in %s at epoch %d, run %s of %v; want %s at epoch 2, run %s alone",
			c.State, c.ClaimEpoch, c.LastRunID, c.Runs, board.StateDone, runID)
	}
	if run := a.GetRun(runID); run.Status != board.RunFinished || run.FailureCode != "" || run.PID != w2.cmd.Process.Pid {
		t.Errorf("resumed run %s: status %s, failure %q, pid %d; want %s, none, the second worker's pid %d",
			runID, run.Status, run.FailureCode, run.PID, board.RunFinished, w2.cmd.Process.Pid)
	}
}

// TestStopsAtTheTrustedDeadline: when the agent goes away mid-work, the
// worker hears nothing more and must stop by itself once the lease the
// agent last vouched for runs out (the watchdog's orphan proof relies on
// it), and its late Finish, unanswered, must not keep it from exiting.
func TestStopsAtTheTrustedDeadline(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, leasekeeperBin, "lease: 3s\n")
	agentPID := a.Start().Pid()
	a.MustRun("card", "create", "orphan")

	w := startWorker(t, a, "-work", "10m", "-max", "1")
	a.StartedRun("orphan")
	// The worker must hold the grant before the agent stops: a Start that
	// landed but whose answer was never sent is another story (the worker
	// never learns it holds the card).
	a.WaitFor(30*time.Second, "the worker to report its claim", func() bool {
		return strings.Contains(w.out.String(), "claimed orphan")
	})
	// SIGSTOP, not SIGTERM: a stopped agent neither answers nor says
	// goodbye, which is what a hung or partitioned agent looks like.
	if err := syscall.Kill(agentPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(agentPID, syscall.SIGCONT) }()
	w.wait(t, 30*time.Second)
	out := w.out.String()
	for _, want := range []string{"no word from the agent", "late verdict on orphan not answered"} {
		if !strings.Contains(out, want) {
			t.Errorf("worker output lacks %q:\n%s", want, out)
		}
	}
}

// TestKeepaliveMode: against an agent in keepalive liveness mode the client
// pings for the worker, so a card whose work outlasts the lease (and the
// keepalive window of two heartbeat intervals) is renewed throughout and
// filed by the same claim.
func TestKeepaliveMode(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, leasekeeperBin, "lease: 3s\nliveness: keepalive\n")
	a.Start()
	a.MustRun("card", "create", "keepalive")

	w := startWorker(t, a, "-work", "5s")
	w.wait(t, 60*time.Second)
	c := a.Card("keepalive")
	if c.State != board.StateDone || c.ClaimEpoch != 1 {
		t.Errorf("card in %s at epoch %d, want %s at epoch 1 (one claim, renewed throughout)", c.State, c.ClaimEpoch, board.StateDone)
	}
	if strings.Contains(w.out.String(), "lost") {
		t.Errorf("worker lost its claim in keepalive mode:\n%s", w.out.String())
	}
}

// TestWaitsForNewWork: with -wait an empty pool does not end the worker:
// it says it waits, takes each card as it is created (woken by the
// agent's event log, DESIGN.md#waiting), and SIGTERM ends the wait with
// nothing claimed.
func TestWaitsForNewWork(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, leasekeeperBin, "")
	a.Start()
	w := startWorker(t, a, "-work", "20ms", "-wait", "-label", "gpu")
	waiting := func(n int) {
		t.Helper()
		a.WaitFor(20*time.Second, fmt.Sprintf("the worker to wait for work (%d)", n), func() bool {
			select {
			case <-w.done:
				t.Fatalf("the waiting worker exited: %v\n%s", w.err, w.out.String())
			default:
			}
			return strings.Count(w.out.String(), "waiting for work") >= n
		})
	}
	waiting(1)
	a.MustRun("card", "create", "cpu-1", "--label", "cpu")
	a.MustRun("card", "create", "gpu-1", "--label", "gpu")
	waiting(2)
	if out := w.out.String(); !strings.Contains(out, "gpu-1: run") || strings.Contains(out, "cpu-1") {
		t.Fatalf("worker output, want gpu-1 worked and cpu-1 left alone:\n%s", out)
	}
	a.MustRun("card", "create", "gpu-2", "--label", "gpu")
	waiting(3)
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	w.wait(t, 30*time.Second)
	for id, want := range map[string]string{"gpu-1": board.StateDone, "gpu-2": board.StateDone, "cpu-1": board.StateReady} {
		if c := a.Card(id); c.State != want || c.Claimed() {
			t.Errorf("card %s in %s claimed by %q, want %s and free", id, c.State, c.Claim, want)
		}
	}
}
