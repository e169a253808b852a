package main

import (
	"errors"
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

// Waiting from the command line (DESIGN.md#waiting): real agents, real
// `leasekeeper claim --wait` and `card wait` processes. Each test waits for
// the waiter to say on stderr that it waits before it changes anything, so
// the change reaches a process that is waiting, and checks that nothing was
// claimed before it.

// startLK runs `leasekeeper ARGS...` in the background.
func (e *env) startLK(args ...string) *claimProc {
	e.t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = e.Environ()
	cmd.Dir = e.Dir
	p := &claimProc{cmd: cmd, output: &agentproc.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.output, p.output
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
		}
		close(p.done)
	}()
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// waiting waits for p to say on stderr that it waits.
func (p *claimProc) waiting(t *testing.T, what string) {
	t.Helper()
	agentproc.WaitFor(t, 20*time.Second, what+" to say it waits", func() bool {
		select {
		case <-p.done:
			t.Fatalf("%s exited %d instead of waiting:\n%s", what, p.code, p.output.String())
		default:
		}
		return strings.Contains(p.output.String(), "waiting")
	})
}

func (p *claimProc) running(t *testing.T, what string) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("%s exited %d while what it waits for had not happened:\n%s", what, p.code, p.output.String())
	default:
	}
}

// holderScript is a holder's CMD: it records its pid, then exits 75 when
// the file "let-go" appears; with --resumable that hands the card back to
// the pool.
const holderScript = `echo $$ > "$1"; while [ ! -f let-go ]; do sleep 0.05; done; exit 75`

func (e *env) letGo() {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.Dir, "let-go"), nil, 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// TestE2EClaimWaitTakesTheCardWhenItsHolderReleases: a waiter on a held
// card does not claim it while it is held, and runs its command on it
// right after the holder hands it back.
func TestE2EClaimWaitTakesTheCardWhenItsHolderReleases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.Start()
	e.MustRun("card", "create", "c1")
	holder := e.startClaim("--resumable", "c1", "--", "sh", "-c", holderScript, "sh", "holder.pid")
	e.workerPID("holder.pid")
	held := e.Card("c1")

	waiter := e.startClaim("--wait", "c1", "--", "sh", "-c", `echo "$LEASEKEEPER_EPOCH" > got`)
	waiter.waiting(t, "claim --wait")
	if out := waiter.output.String(); !strings.Contains(out, "card c1 is held by "+held.Claim) {
		t.Errorf("the waiter does not say who holds the card:\n%s", out)
	}
	if c := e.Card("c1"); c.Claim != held.Claim || c.ClaimEpoch != held.ClaimEpoch {
		t.Fatalf("card c1 held by %s@%d while its holder runs, want %s@%d", c.Claim, c.ClaimEpoch, held.Claim, held.ClaimEpoch)
	}
	if _, err := os.Stat(filepath.Join(e.Dir, "got")); err == nil {
		t.Fatal("the waiter's command ran before the holder let go")
	}
	waiter.running(t, "claim --wait")

	e.letGo()
	if code := holder.wait(t, 20*time.Second); code != 75 {
		t.Fatalf("holder exit %d, want 75:\n%s", code, holder.output.String())
	}
	if code := waiter.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("waiter exit %d, want 0:\n%s", code, waiter.output.String())
	}
	got, err := os.ReadFile(filepath.Join(e.Dir, "got"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(held.ClaimEpoch + 1); strings.TrimSpace(string(got)) != want {
		t.Errorf("the waiter ran at epoch %s, want the next claim's, %s", got, want)
	}
	if c := e.Card("c1"); c.State != board.StateDone || c.Claimed() {
		t.Errorf("card c1 %s claimed by %q after the waiter's command exited 0, want done and free", c.State, c.Claim)
	}
}

// TestE2EClaimNextWaitIsWokenByACardCreatedWithItsLabel: a routed waiter
// passes over cards without its label, old and new, and takes the first
// card created with it.
func TestE2EClaimNextWaitIsWokenByACardCreatedWithItsLabel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.Start()
	e.MustRun("card", "create", "plain")
	waiter := e.startClaim("--next", "--label", "gpu", "--wait", "--", "sh", "-c", `echo "$LEASEKEEPER_CARD" > got`)
	waiter.waiting(t, "claim --next --label gpu --wait")
	if out := waiter.output.String(); !strings.Contains(out, `carries the labels ["gpu"]`) {
		t.Errorf("the waiter does not say what it waits for:\n%s", out)
	}
	e.MustRun("card", "create", "cpu-job", "--label", "cpu")
	e.MustRun("card", "create", "gpu-job", "--label", "gpu")
	if code := waiter.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("waiter exit %d, want 0:\n%s", code, waiter.output.String())
	}
	if got, _ := os.ReadFile(filepath.Join(e.Dir, "got")); strings.TrimSpace(string(got)) != "gpu-job" {
		t.Errorf("the gpu waiter ran on %q, want gpu-job", got)
	}
	for _, id := range []string{"plain", "cpu-job"} {
		if c := e.Card(id); c.State != board.StateReady || c.ClaimEpoch != 0 {
			t.Errorf("card %s in %s at epoch %d, want it never claimed", id, c.State, c.ClaimEpoch)
		}
	}
}

// TestE2EClaimWaitTimesOutWithTheRefusalsCode: a wait that times out exits
// as the refusal it waited on would have without --wait, says it timed
// out, and claims nothing; both spellings of the duration are read.
func TestE2EClaimWaitTimesOutWithTheRefusalsCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.Start()
	e.MustRun("card", "create", "c1")
	holder := e.startClaim("--resumable", "c1", "--", "sh", "-c", holderScript, "sh", "holder.pid")
	e.workerPID("holder.pid")
	held := e.Card("c1")
	e.MustRun("card", "create", "gated", "--depends-on", "c1")

	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"claim", "--wait", "300ms", "c1", "--", "touch", "ran"}, claimExitHeld},
		{[]string{"claim", "--wait=300ms", "gated", "--", "touch", "ran"}, claimExitWaiting},
		{[]string{"claim", "--next", "--wait", "300ms", "--", "touch", "ran"}, claimExitNothing},
		{[]string{"claim", "--next", "--label", "gpu", "--wait=300ms", "--", "touch", "ran"}, claimExitNothing},
	} {
		_, stderr, code := e.Run(tc.args...)
		if code != tc.code || !strings.Contains(stderr, "timed out after 300ms waiting") {
			t.Errorf("%v: exit %d, want %d saying it timed out:\n%s", tc.args, code, tc.code, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(e.Dir, "ran")); err == nil {
		t.Error("a command ran although every wait timed out")
	}
	if c := e.Card("c1"); c.Claim != held.Claim || c.ClaimEpoch != held.ClaimEpoch {
		t.Errorf("card c1 held by %s@%d after the timed-out waits, want %s@%d", c.Claim, c.ClaimEpoch, held.Claim, held.ClaimEpoch)
	}
	if c := e.Card("gated"); c.ClaimEpoch != 0 || len(c.Runs) != 0 {
		t.Errorf("card gated at epoch %d with runs %v after the timed-out wait, want nothing written", c.ClaimEpoch, c.Runs)
	}
	e.letGo()
	holder.wait(t, 20*time.Second)
}

// TestE2EClaimWaitInterruptedClaimsNothing: ^C while waiting exits 130
// and leaves the card as it was.
func TestE2EClaimWaitInterruptedClaimsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.Start()
	e.MustRun("card", "create", "c1")
	holder := e.startClaim("--resumable", "c1", "--", "sh", "-c", holderScript, "sh", "holder.pid")
	e.workerPID("holder.pid")
	held := e.Card("c1")

	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		waiter := e.startClaim("--wait", "c1", "--", "touch", "ran")
		waiter.waiting(t, "claim --wait")
		if err := waiter.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if code := waiter.wait(t, 20*time.Second); code != 128+int(sig) {
			t.Fatalf("waiter exit %d after %v, want %d:\n%s", code, sig, 128+int(sig), waiter.output.String())
		}
		if out := waiter.output.String(); !strings.Contains(out, "nothing was claimed") {
			t.Errorf("the waiter interrupted by %v does not say it claimed nothing:\n%s", sig, out)
		}
	}
	e.letGo()
	holder.wait(t, 20*time.Second)
	if c := e.Card("c1"); c.Claimed() || c.ClaimEpoch != held.ClaimEpoch || len(c.Runs) != len(held.Runs) {
		t.Errorf("card c1 claimed by %q at epoch %d with runs %v after the holder let go, want free at %d with runs %v: the interrupted waiter took it",
			c.Claim, c.ClaimEpoch, c.Runs, held.ClaimEpoch, held.Runs)
	}
}

// TestE2ECardWaitForDone: at once for a card already done; for a card in
// work, when its holder's command finishes; and the exit codes of a
// timeout, another sink, a missing card and an unknown state.
func TestE2ECardWaitForDone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.Start()
	e.MustRun("card", "create", "early")
	e.MustRun("claim", "early", "--", "true")
	if out := e.MustRun("card", "wait", "early", "--for", "done"); !strings.Contains(out, "early is in done") {
		t.Errorf("card wait on a done card printed %q", out)
	}

	e.MustRun("card", "create", "c1")
	holder := e.startClaim("c1", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	e.workerPID("worker.pid")
	waiter := e.startLK("card", "wait", "c1", "--for", "done")
	waiter.waiting(t, "card wait")
	if c := e.Card("c1"); c.State != board.StateInProgress {
		t.Fatalf("card c1 in %s while its command runs", c.State)
	}
	waiter.running(t, "card wait")
	if err := os.WriteFile(filepath.Join(e.Dir, "finish"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("holder exit %d:\n%s", code, holder.output.String())
	}
	if code := waiter.wait(t, 20*time.Second); code != 0 || !strings.Contains(waiter.output.String(), "c1 is in done") {
		t.Fatalf("card wait exit %d, want 0 saying c1 is in done:\n%s", code, waiter.output.String())
	}

	e.MustRun("card", "create", "idle")
	e.MustRun("card", "create", "broken")
	e.MustRun("card", "move", "broken", "failed")
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"card", "wait", "idle", "--for", "done", "--timeout", "300ms"}, cardWaitExitTimeout, "timed out after 300ms"},
		{[]string{"card", "wait", "broken", "--for", "done"}, cardWaitExitElsewhere, "terminal state failed"},
		{[]string{"card", "wait", "nope", "--for", "done"}, cardWaitExitGone, "no card nope"},
		{[]string{"card", "wait", "idle", "--for", "dnoe"}, exitUsage, "no such state"},
		{[]string{"card", "wait", "idle"}, exitUsage, "needs --for"},
	} {
		_, stderr, code := e.Run(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.says) {
			t.Errorf("%v: exit %d, want %d saying %q:\n%s", tc.args, code, tc.code, tc.says, stderr)
		}
	}
}

// TestE2EClaimNextWaitAcrossTheFleet: on one MongoDB, a waiter on one
// agent is woken by a card created through another. The fleet's log has no
// sequencer (DESIGN.md#event-log): the waiter's head is a number derived
// from the server's stamp, and the card's event, written later by another
// agent, is numbered above it.
func TestE2EClaimNextWaitAcrossTheFleet(t *testing.T) {
	t.Parallel()
	one, two := fleetAgents(t)
	one.MustRun("card", "create", "old", "--label", "cpu")
	waiter := two.startClaim("--next", "--label", "gpu", "--wait", "--", "sh", "-c", `echo "$LEASEKEEPER_CARD" > got`)
	waiter.waiting(t, "claim --next --wait on the second agent")
	one.MustRun("card", "create", "fleet-job", "--label", "gpu")
	if code := waiter.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("waiter exit %d:\n%s", code, waiter.output.String())
	}
	if got, _ := os.ReadFile(filepath.Join(two.Dir, "got")); strings.TrimSpace(string(got)) != "fleet-job" {
		t.Errorf("the waiter ran on %q, want fleet-job", got)
	}
	if c := one.Card("fleet-job"); c.State != board.StateDone {
		t.Errorf("fleet-job in %s after the waiter's command exited 0, want done", c.State)
	}
}
