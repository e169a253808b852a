package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// The lifecycle edges of `leasekeeper claim`, with the real binary: a real
// agent, real claim processes and real signals.

// TestE2EClaimOnASinkMintsNothing: claim on a card in a terminal state is
// refused before anything is written — no claim, no epoch, no run — and
// exits with its own code, not "claim lost".
func TestE2EClaimOnASinkMintsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "sunk")
	e.MustRun("card", "move", "sunk", board.StateDone)
	before := e.Card("sunk")
	_, stderr, code := e.Run("claim", "sunk", "--", "true")
	if code != claimExitSink {
		t.Fatalf("claim on a sink exited %d, want %d; stderr:\n%s", code, claimExitSink, stderr)
	}
	after := e.Card("sunk")
	if after.ClaimEpoch != before.ClaimEpoch || after.Claimed() || len(after.Runs) != len(before.Runs) || after.State != board.StateDone {
		t.Errorf("a refused claim changed the card: %+v, was %+v", after, before)
	}
}

// TestE2EClaimOfACardWaitingOnItsBlockers: `claim` of a card that waits in
// waiting_deps on a blocker still in the pool exits claimExitWaiting,
// naming the blocker, without running CMD or writing anything
// (DESIGN.md#lifecycle-refusals). Once the blocker is done, the promoted
// card is claimed and filed as any other.
func TestE2EClaimOfACardWaitingOnItsBlockers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "blocker-B")
	e.MustRun("card", "create", "gated-D", "--depends-on", "blocker-B")
	before := e.Card("gated-D")
	if before.State != board.StateWaitingDeps {
		t.Fatalf("gated-D was created in %q, want waiting_deps", before.State)
	}
	events := len(e.Events())
	ran := filepath.Join(e.Dir, "ran")

	_, stderr, code := e.Run("claim", "gated-D", "--", "touch", ran)
	if code != claimExitWaiting {
		t.Fatalf("claim of a card waiting on its blocker exited %d, want %d; stderr:\n%s", code, claimExitWaiting, stderr)
	}
	for _, want := range []string{"gated-D", "waiting_deps", `"blocker-B" (in ready)`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("claim's refusal does not say %q:\n%s", want, stderr)
		}
	}
	if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CMD ran for a refused claim (stat: %v)", err)
	}
	after := e.Card("gated-D")
	if after.ClaimEpoch != before.ClaimEpoch || after.Claimed() || len(after.Runs) != 0 || after.State != board.StateWaitingDeps {
		t.Errorf("a refused claim changed the card: %+v, was %+v", after, before)
	}
	if n := len(e.Events()); n != events {
		t.Errorf("a refused claim wrote %d events", n-events)
	}

	if _, stderr, code := e.Run("claim", "blocker-B", "--", "true"); code != 0 {
		t.Fatalf("claim of the blocker exited %d: %s", code, stderr)
	}
	if _, stderr, code := e.Run("claim", "gated-D", "--", "touch", ran); code != 0 {
		t.Fatalf("claim of the promoted card exited %d: %s", code, stderr)
	}
	if _, err := os.Stat(ran); err != nil {
		t.Errorf("CMD did not run once the blocker was done: %v", err)
	}
	if c := e.Card("gated-D"); c.State != board.StateDone || c.Claimed() {
		t.Errorf("gated-D after its claim: %s, claimed %v; want done and free", c.State, c.Claimed())
	}
}

// TestE2EClaimPassesTheCommandsStatusThrough: CMD's own exit status is
// claim's; the card is filed by the verdict in the same write that
// releases it.
func TestE2EClaimPassesTheCommandsStatusThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "three")
	_, stderr, code := e.Run("claim", "three", "--", "sh", "-c", "exit 3")
	if code != 3 {
		t.Fatalf("claim exited %d, want CMD's 3; stderr:\n%s", code, stderr)
	}
	c := e.Card("three")
	if c.State != board.StateFailed || c.Claimed() {
		t.Fatalf("card after CMD failed: state %s claimed %v, want failed and free", c.State, c.Claimed())
	}
	if r := e.GetRun(c.LastRunID); r.Status != board.RunFailed || r.FailureCode != "EXIT_3" {
		t.Errorf("run %+v, want failed with EXIT_3", r)
	}
}

// TestE2EInterruptReturnsTheCardToThePool: SIGINT to claim reaches CMD;
// CMD's own exit status is claim's; the card goes back to the pool with
// its run resumable (never into a sink), and the next claim resumes that
// run — CMD sees its checkpoint.
func TestE2EInterruptReturnsTheCardToThePool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "stop")
	script := `echo $$ > "$1"; trap 'exit 130' INT; while :; do sleep 0.05; done`
	claim := e.startClaim("stop", "--resumable", "--", "sh", "-c", script, "sh", "worker.pid")
	e.workerPID("worker.pid")
	if err := claim.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if got := claim.wait(t, 10*time.Second); got != 130 {
		t.Fatalf("claim exited %d after SIGINT, want CMD's 130; output:\n%s", got, claim.output.String())
	}
	c := e.Card("stop")
	if c.Claimed() || board.DefaultBoard(true).IsTerminal(c.State) {
		t.Fatalf("interrupted card: state %s claimed %v, want free in a working state", c.State, c.Claimed())
	}
	first := e.GetRun(c.LastRunID)
	if first.Status != board.RunFailedResumable || first.FailureCode != "INTERRUPTED" {
		t.Fatalf("interrupted run %+v, want failed_resumable/INTERRUPTED", first)
	}

	out, stderr, code := e.Run("claim", "stop", "--", "sh", "-c", `echo "$LEASEKEEPER_RUN $LEASEKEEPER_CHECKPOINT"`)
	if code != 0 {
		t.Fatalf("re-claim exited %d; stderr:\n%s", code, stderr)
	}
	if got, want := strings.TrimSpace(out), first.ID+" "+first.Checkpoint; got != want {
		t.Errorf("the re-claim's CMD saw %q, want the resumed run and checkpoint %q", got, want)
	}
	if !strings.Contains(stderr, "resumed run "+first.ID) {
		t.Errorf("the re-claim does not say it resumed %s:\n%s", first.ID, stderr)
	}
	if c := e.Card("stop"); c.State != board.StateDone || len(c.Runs) != 1 {
		t.Errorf("after the resumed run finished: state %s runs %v, want done with one run", c.State, c.Runs)
	}
}

// TestE2EClaimOfABacklogCardReturnsItThere: a card claimed by id out of
// backlog, a column outside the pool, goes back to backlog when its run
// ends resumable — by an interrupt or a non-zero exit with --resumable —
// not into the pool, where `claim --next` would take it.
func TestE2EClaimOfABacklogCardReturnsItThere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "later", "--state", board.StateBacklog)
	script := `echo $$ > "$1"; trap 'exit 130' INT; while :; do sleep 0.05; done`
	claim := e.startClaim("later", "--", "sh", "-c", script, "sh", "worker.pid")
	e.workerPID("worker.pid")
	if err := claim.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if got := claim.wait(t, 10*time.Second); got != 130 {
		t.Fatalf("claim exited %d after SIGINT, want 130; output:\n%s", got, claim.output.String())
	}
	if c := e.Card("later"); c.Claimed() || c.State != board.StateBacklog {
		t.Fatalf("interrupted card: state %s claimed %v, want free in %s", c.State, c.Claimed(), board.StateBacklog)
	}
	if _, stderr, code := e.Run("claim", "later", "--resumable", "--", "sh", "-c", "exit 7"); code != 7 {
		t.Fatalf("claim --resumable exited %d, want 7; stderr:\n%s", code, stderr)
	}
	if c := e.Card("later"); c.Claimed() || c.State != board.StateBacklog {
		t.Fatalf("card after a resumable failure: state %s claimed %v, want free in %s", c.State, c.Claimed(), board.StateBacklog)
	}
	if _, stderr, code := e.Run("claim", "--next", "--", "true"); code != claimExitNothing {
		t.Errorf("claim --next exited %d, want %d: nothing is in the pool; stderr:\n%s", code, claimExitNothing, stderr)
	}
}

// TestE2EInterruptGraceEndsInAKill: a CMD that ignores the signal is
// killed when --grace runs out, and claim reports the kill in its status.
func TestE2EInterruptGraceEndsInAKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "stubborn")
	script := `echo $$ > "$1"; trap '' INT TERM; while :; do sleep 0.05; done`
	claim := e.startClaim("stubborn", "--grace", "300ms", "--", "sh", "-c", script, "sh", "worker.pid")
	pid := e.workerPID("worker.pid")
	if err := claim.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := claim.wait(t, 10*time.Second); got != 128+int(syscall.SIGKILL) {
		t.Fatalf("claim exited %d, want %d (CMD killed after its grace); output:\n%s", got, 128+int(syscall.SIGKILL), claim.output.String())
	}
	if !dead(pid) {
		t.Errorf("CMD %d outlived its grace", pid)
	}
	if c := e.Card("stubborn"); c.Claimed() || board.DefaultBoard(true).IsTerminal(c.State) {
		t.Errorf("card after the kill: state %s claimed %v, want free in a working state", c.State, c.Claimed())
	}
}

// TestE2EClaimExitsWhileItsAgentIsFrozen: with the agent stopped (SIGSTOP:
// it neither answers nor closes its socket), claim gives the claim up at
// its trusted deadline, stops CMD and exits "lost" in bounded time, without
// waiting for the agent to come back.
func TestE2EClaimExitsWhileItsAgentIsFrozen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	agent := e.Start()
	e.MustRun("card", "create", "frozen")
	claim := e.startClaim("frozen", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	pid := e.workerPID("worker.pid")
	if err := agent.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Signal(syscall.SIGCONT) })
	frozen := time.Now()
	// Bound: the lease (the trusted deadline is inside it) plus the late
	// write's own timeout plus slack for a loaded machine.
	if got := claim.wait(t, 3*time.Second+lateWriteTimeout+5*time.Second); got != claimExitLost {
		t.Fatalf("claim exited %d, want %d; output:\n%s", got, claimExitLost, claim.output.String())
	}
	t.Logf("claim exited %s after its agent froze", time.Since(frozen).Round(time.Millisecond))
	if !dead(pid) {
		t.Errorf("CMD %d outlived the lost claim", pid)
	}
}

// TestE2EClaimOnAHeldCard: a card held by someone else exits 3 (scripts
// rely on it), writes nothing, and --held-exit moves the code out of CMD's
// way, as flock -E does.
func TestE2EClaimOnAHeldCard(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "held")
	holder := e.startClaim("held", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	e.workerPID("worker.pid")
	before := e.Card("held")
	if _, stderr, code := e.Run("claim", "held", "--", "true"); code != claimExitHeld {
		t.Fatalf("claim on a held card exited %d, want %d; stderr:\n%s", code, claimExitHeld, stderr)
	}
	if _, stderr, code := e.Run("claim", "held", "--held-exit", "75", "--", "true"); code != 75 {
		t.Fatalf("claim --held-exit 75 on a held card exited %d; stderr:\n%s", code, stderr)
	}
	if after := e.Card("held"); after.Token() != before.Token() || after.LastRunID != before.LastRunID {
		t.Errorf("refused claims changed the card: %+v, was %+v", after, before)
	}
	if err := os.WriteFile(filepath.Join(e.Dir, "finish"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := holder.wait(t, 10*time.Second); got != 0 {
		t.Errorf("the holder exited %d, want 0; output:\n%s", got, holder.output.String())
	}
}

// TestE2EClaimOfACommandThatCannotRun: a CMD that does not exist exits 127
// (not found), whether it is named by a path or looked up in PATH; one
// that exists but cannot be executed exits 126, as a shell reports them
// (claim --help). Either way the card goes back to the pool, its run
// resumable, nothing having run.
func TestE2EClaimOfACommandThatCannotRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	notExec := filepath.Join(e.Dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\ntrue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  string
		want int
	}{
		{"a path that does not exist", filepath.Join(e.Dir, "no", "such", "binary"), claimExitNotFound},
		{"a name not in PATH", "leasekeeper-no-such-command", claimExitNotFound},
		{"a file without execute permission", notExec, claimExitCannotRun},
	} {
		card := "c-" + strings.ReplaceAll(tc.name, " ", "-")
		e.MustRun("card", "create", card)
		_, stderr, code := e.Run("claim", card, "--", tc.cmd)
		if code != tc.want {
			t.Errorf("%s: claim exited %d, want %d; stderr:\n%s", tc.name, code, tc.want, stderr)
		}
		if c := e.Card(card); c.Claimed() || c.State == board.StateFailed {
			t.Errorf("%s: card after a CMD that never ran: state %s claimed %v, want free in the pool", tc.name, c.State, c.Claimed())
		}
	}
}

// TestE2EClaimNextRoutedByLabel: DESIGN.md#label-routing end to end. A
// worker that asks for a label takes the oldest free pool card carrying it
// and passes over older cards without it; with none left it exits 122
// naming the labels, and an unlabelled worker still takes the rest.
func TestE2EClaimNextRoutedByLabel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "cpu-job")
	e.MustRun("card", "create", "gpu-job", "--label", "gpu")
	e.MustRun("card", "create", "big-gpu-job", "--label", "gpu", "--label", "big")
	stdout, stderr, code := e.Run("claim", "--next", "--label", "gpu", "--label", "big", "--", "sh", "-c", `echo "$LEASEKEEPER_CARD"`)
	if code != 0 || strings.TrimSpace(stdout) != "big-gpu-job" {
		t.Fatalf("claim --next --label gpu --label big ran on %q (exit %d), want big-gpu-job; stderr:\n%s", stdout, code, stderr)
	}
	// A label is read as a card stores it: trimmed.
	stdout, stderr, code = e.Run("claim", "--next", "--label", " gpu ", "--", "sh", "-c", `echo "$LEASEKEEPER_CARD"`)
	if code != 0 || strings.TrimSpace(stdout) != "gpu-job" {
		t.Fatalf("claim --next --label gpu ran on %q (exit %d), want gpu-job, not the older cpu-job; stderr:\n%s", stdout, code, stderr)
	}
	_, stderr, code = e.Run("claim", "--next", "--label", "gpu", "--", "true")
	if code != claimExitNothing || !strings.Contains(stderr, `"gpu"`) {
		t.Errorf("claim --next --label gpu with no gpu card left exited %d, want %d naming the label; stderr:\n%s", code, claimExitNothing, stderr)
	}
	stdout, stderr, code = e.Run("claim", "--next", "--", "sh", "-c", `echo "$LEASEKEEPER_CARD"`)
	if code != 0 || strings.TrimSpace(stdout) != "cpu-job" {
		t.Errorf("claim --next ran on %q (exit %d), want cpu-job; stderr:\n%s", stdout, code, stderr)
	}
	if c := e.Card("cpu-job"); c.State != board.StateDone {
		t.Errorf("cpu-job is %s after its run finished, want done", c.State)
	}
}
