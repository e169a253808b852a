package watchdog

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// worker is a real process standing in for a run's owner.
type worker struct {
	cmd *exec.Cmd
	pid int
	id  pidprobe.Identity
}

// run is the run the socket records for the worker on host: its pid and
// its exact identity.
func (w *worker) run(host string) board.Run {
	return board.Run{Host: host, PID: w.pid, PIDStart: w.id.StartMillis, PIDStartTicks: w.id.StartTicks, BootID: w.id.BootID}
}

// legacyRun is the run an older agent recorded: the inexact pid_start only.
func (w *worker) legacyRun(host string, shiftMillis int64) board.Run {
	return board.Run{Host: host, PID: w.pid, PIDStart: w.id.StartMillis + shiftMillis}
}

func startWorker(t *testing.T) *worker {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	w := &worker{cmd: cmd, pid: cmd.Process.Pid}
	t.Cleanup(func() { w.kill(t) })
	id, err := pidprobe.New().Identify(context.Background(), w.pid)
	if err != nil {
		t.Fatalf("Identify(%d): %v", w.pid, err)
	}
	w.id = id
	return w
}

// kill SIGKILLs the worker and reaps it, so its pid is provably gone.
func (w *worker) kill(t *testing.T) {
	t.Helper()
	if w.cmd.ProcessState != nil {
		return
	}
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
}

func (e *env) oracle(p Prober) *Oracle {
	return &Oracle{
		Store: e.faults, Host: agentHost, Prober: p,
		Lease:       func() time.Duration { return lease },
		OrphanGrace: func() time.Duration { return lease / 3 },
		Actor:       board.RecoveryMarker(agentMarker),
	}
}

func TestOracleProofs(t *testing.T) {
	t.Parallel()
	grace := lease / 3
	tests := []struct {
		name string
		// setup launches card c1 and returns the run to resolve; it may
		// move the clock.
		setup       func(t *testing.T, e *env) board.Run
		wantStatus  board.RunStatus
		wantOrphan  bool
		wantPromote bool
	}{
		{"same host, owner killed: promoted to failed", func(t *testing.T, e *env) board.Run {
			w := startWorker(t)
			_, r := e.launch("c1", board.RunRunning, w.run(agentHost))
			w.kill(t)
			return r
		}, board.RunFailed, true, true},
		{"same host, owner killed, run has a checkpoint: promoted to failed_resumable", func(t *testing.T, e *env) board.Run {
			w := startWorker(t)
			run := w.run(agentHost)
			run.Checkpoint = "step-2"
			_, r := e.launch("c1", board.RunRunning, run)
			w.kill(t)
			return r
		}, board.RunFailedResumable, true, true},
		{"same host, queued run whose owner was killed: never promoted (a queued run is never stolen from)", func(t *testing.T, e *env) board.Run {
			w := startWorker(t)
			_, r := e.launch("c1", board.RunQueued, w.run(agentHost))
			w.kill(t)
			e.clock.Advance(2 * lease)
			return r
		}, board.RunQueued, false, false},
		{"same host, owner alive: conserved", func(t *testing.T, e *env) board.Run {
			w := startWorker(t)
			_, r := e.launch("c1", board.RunRunning, w.run(agentHost))
			return r
		}, board.RunRunning, false, false},
		{"same host, the pid now names another process (started one tick later): promoted", func(t *testing.T, e *env) board.Run {
			w := startWorker(t)
			run := w.run(agentHost)
			run.PIDStartTicks--
			_, r := e.launch("c1", board.RunRunning, run)
			return r
		}, board.RunFailed, true, true},
		{"same host, the run is of another boot: promoted", func(t *testing.T, e *env) board.Run {
			w := startWorker(t)
			run := w.run(agentHost)
			run.BootID = "00000000-0000-0000-0000-000000000000"
			_, r := e.launch("c1", board.RunRunning, run)
			return r
		}, board.RunFailed, true, true},
		{"same host, legacy run (pid_start only), owner alive: conserved", func(t *testing.T, e *env) board.Run {
			w := startWorker(t)
			_, r := e.launch("c1", board.RunRunning, w.legacyRun(agentHost, 0))
			return r
		}, board.RunRunning, false, false},
		{"same host, legacy run whose pid_start is a minute off (reused): promoted", func(t *testing.T, e *env) board.Run {
			w := startWorker(t)
			_, r := e.launch("c1", board.RunRunning, w.legacyRun(agentHost, -60_000))
			return r
		}, board.RunFailed, true, true},
		{"another host's pid is never probed: conserved", func(t *testing.T, e *env) board.Run {
			w := startWorker(t)
			_, r := e.launch("c1", board.RunRunning, w.run("elsewhere"))
			w.kill(t)
			return r
		}, board.RunRunning, false, false},
		{"owner's lease ended longer ago than the grace: promoted", func(t *testing.T, e *env) board.Run {
			_, r := e.launch("c1", board.RunRunning, board.Run{})
			e.clock.Advance(lease + grace + time.Millisecond)
			return r
		}, board.RunFailed, true, true},
		{"owner's lease ended exactly the grace ago: conserved", func(t *testing.T, e *env) board.Run {
			_, r := e.launch("c1", board.RunRunning, board.Run{})
			e.clock.Advance(lease + grace)
			return r
		}, board.RunRunning, false, false},
		{"owner's lease still running: conserved", func(t *testing.T, e *env) board.Run {
			_, r := e.launch("c1", board.RunRunning, board.Run{})
			e.clock.Advance(lease / 2)
			return r
		}, board.RunRunning, false, false},
		// The transfer required the owner's lease to have ended, so the
		// recovery claim's claimed_at bounds that end.
		{"owner superseded by a transfer, the grace since: promoted", func(t *testing.T, e *env) board.Run {
			prev, r := e.launch("c1", board.RunRunning, board.Run{})
			e.expire()
			if _, err := e.store.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: prev, RecoveryMarker: otherReaper, Cutoff: e.clock.Now(), Lease: time.Hour}); err != nil {
				t.Fatalf("ReclaimExpired: %v", err)
			}
			e.clock.Advance(grace + time.Millisecond)
			return r
		}, board.RunFailed, true, true},
		{"owner superseded by a transfer, less than the grace since: conserved", func(t *testing.T, e *env) board.Run {
			prev, r := e.launch("c1", board.RunRunning, board.Run{})
			e.expire()
			if _, err := e.store.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: prev, RecoveryMarker: otherReaper, Cutoff: e.clock.Now(), Lease: time.Hour}); err != nil {
				t.Fatalf("ReclaimExpired: %v", err)
			}
			e.clock.Advance(grace / 2)
			return r
		}, board.RunRunning, false, false},
		{"a settled run is returned as it is", func(t *testing.T, e *env) board.Run {
			_, r := e.launch("c1", board.RunPausedOperator, board.Run{})
			e.clock.Advance(time.Hour)
			return r
		}, board.RunPausedOperator, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.card("c1", board.StateReady)
			r := tc.setup(t, e)
			o := e.oracle(pidprobe.New())

			preview, err := resolved(o.Preview(e.ctx, e.get("c1"), e.clock.Now()))
			if err != nil {
				t.Fatalf("Preview: %v", err)
			}
			if stored := e.getRun(r.ID); stored.Status != r.Status {
				t.Fatalf("Preview wrote the run: %s, want %s", stored.Status, r.Status)
			}
			got, err := resolved(o.ResolveAfterTransfer(e.ctx, e.get("c1"), e.get("c1"), e.clock.Now()))
			if err != nil {
				t.Fatalf("ResolveAfterTransfer: %v", err)
			}
			if got == nil || got.Status != tc.wantStatus || preview.Status != tc.wantStatus {
				t.Fatalf("ResolveAfterTransfer = %+v (preview %+v), want status %s", got, preview, tc.wantStatus)
			}
			if orphan := got.FailureCode == board.FailureProcessOrphaned; orphan != tc.wantOrphan {
				t.Errorf("failure code = %q, want PROCESS_ORPHANED %v", got.FailureCode, tc.wantOrphan)
			}
			stored := e.getRun(r.ID)
			if promoted := stored.Status != r.Status; promoted != tc.wantPromote || stored.Status != got.Status {
				t.Errorf("stored run %s, returned %s, launched %s: want promoted=%v", stored.Status, got.Status, r.Status, tc.wantPromote)
			}
		})
	}
}

func TestOracleUnknownLivenessConserves(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.probe.SetUnknown(777, true)
	e.card("c1", board.StateReady)
	_, r := e.launch("c1", board.RunRunning, board.Run{Host: agentHost, PID: 777, PIDStart: 1_000})
	e.expire()

	got, err := resolved(e.oracle(e.probe).ResolveAfterTransfer(e.ctx, e.get("c1"), e.get("c1"), e.clock.Now()))
	if err != nil {
		t.Fatalf("ResolveAfterTransfer: %v", err)
	}
	if got.Status != board.RunRunning {
		t.Errorf("status = %s, want running: an unknown probe proves nothing", got.Status)
	}
	if e.probe.Probes() == 0 {
		t.Error("the same-host pid was never probed")
	}
	if stored := e.getRun(r.ID); stored.Status != board.RunRunning {
		t.Errorf("stored status = %s, want running", stored.Status)
	}
}

// TestOracleNeverOverwritesALateVerdict: the oracle read "running", the owner
// then wrote its own verdict, and the promotion's CAS on the status it read
// must lose — the owner's verdict stands, and is what the oracle returns.
func TestOracleNeverOverwritesALateVerdict(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	_, r := e.launch("c1", board.RunFinished, board.Run{})
	e.clock.Advance(time.Hour)
	stale := e.getRun(r.ID)
	stale.Status = board.RunRunning
	e.faults.mu.Lock()
	e.faults.staleRun = &stale
	e.faults.mu.Unlock()

	got, err := resolved(e.oracle(e.probe).ResolveAfterTransfer(e.ctx, e.get("c1"), e.get("c1"), e.clock.Now()))
	if err != nil {
		t.Fatalf("ResolveAfterTransfer: %v", err)
	}
	if got.Status != board.RunFinished || got.FailureCode != "" {
		t.Errorf("ResolveAfterTransfer = %s/%q, want the owner's finished verdict", got.Status, got.FailureCode)
	}
	if stored := e.getRun(r.ID); stored.Status != board.RunFinished || stored.FailureCode != "" {
		t.Errorf("stored run = %s/%q, want finished untouched", stored.Status, stored.FailureCode)
	}
}

func TestOracleNoRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	tok := e.claim("c1", workerMarker)
	o := e.oracle(e.probe)

	got, err := resolved(o.ResolveAfterTransfer(e.ctx, e.get("c1"), e.get("c1"), e.clock.Now()))
	if got != nil || err != nil {
		t.Errorf("no pointer: Resolve = %+v, %v; want nil, nil", got, err)
	}
	if err := e.store.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "run-pruned"}); err != nil {
		t.Fatalf("SetLastRunOwned: %v", err)
	}
	got, err = resolved(o.ResolveAfterTransfer(e.ctx, e.get("c1"), e.get("c1"), e.clock.Now()))
	if got != nil || err != nil {
		t.Errorf("pruned pointer: Resolve = %+v, %v; want nil, nil (not found is an answer, not a read error)", got, err)
	}
}

func TestOracleReadErrorIsAnError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.card("c1", board.StateReady)
	e.launch("c1", board.RunRunning, board.Run{})
	c := e.get("c1")
	b := loadBoard(t, e.store)
	if err := e.store.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	got, err := resolved(e.oracle(e.probe).ResolveAfterTransfer(e.ctx, c, c, e.clock.Now()))
	if got != nil || err == nil || errors.Is(err, board.ErrNotFound) {
		t.Errorf("Resolve on a closed store = %+v, %v; want a read error", got, err)
	}
	if d := DecideStuckCard(StuckCard{Run: got, RunErr: err, Card: c, Board: b, Now: e.clock.Now(), Lease: lease}); d.Row != 1 {
		t.Errorf("decision on the read error = row %d (%s), want row 1", d.Row, d.Rule)
	}
}

// resolved splits a Resolution into the run and the error, as callers of
// the table read them.
func resolved(r Resolution) (*board.Run, error) { return r.Run, r.Err }
