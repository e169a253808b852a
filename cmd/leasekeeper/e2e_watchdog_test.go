package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// fleetStates is the fleet default board written out as config: the
// running column is not a pool state there.
const fleetStates = `states:
  - {name: backlog}
  - {name: ready, pool: true, launch: true}
  - {name: in_progress, running: true}
  - {name: awaiting_input}
  - {name: waiting_deps}
  - {name: done, terminal: true, completion: true}
  - {name: failed, terminal: true}
  - {name: blocked, terminal: true}
  - {name: cancelled, terminal: true}
`

// customStates renames every column but failed (which the watchdog needs).
const customStates = `states:
  - {name: todo, pool: true, launch: true}
  - {name: doing, running: true}
  - {name: shipped, terminal: true, completion: true}
  - {name: failed, terminal: true}
`

func TestE2EBoardShow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n"+customStates)
	e.Start()
	var got apitype.BoardResponse
	if err := json.Unmarshal([]byte(e.MustRun("board", "show", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.Running != "doing" || got.FirstPool != "todo" || got.Completion != "shipped" || got.Failed != board.StateFailed {
		t.Errorf("board columns = running %q, first pool %q, completion %q, failed %q; want doing, todo, shipped, failed",
			got.Running, got.FirstPool, got.Completion, got.Failed)
	}
	var names []string
	for _, s := range got.States {
		names = append(names, s.Name)
	}
	if want := []string{"todo", "doing", "shipped", "failed"}; !slices.Equal(names, want) {
		t.Errorf("states = %v, want %v", names, want)
	}
	text := e.MustRun("board", "show")
	for _, want := range []string{"todo", "pool launch", "doing", "running", "shipped", "terminal completion", "first pool: todo"} {
		if !strings.Contains(text, want) {
			t.Errorf("board show output lacks %q:\n%s", want, text)
		}
	}
}

// TestE2EClaimRoutesByTheAgentsBoard runs `leasekeeper claim` against
// boards whose columns differ: the routing follows the board the agent
// serves, never the default names.
func TestE2EClaimRoutesByTheAgentsBoard(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		states    string
		args      []string
		script    string
		wantCode  int
		wantState string
		wantRun   board.RunStatus
	}{
		{"custom board, exit 0 files to its completion state", customStates, nil, "exit 0", 0, "shipped", board.RunFinished},
		{"custom board, failure files to failed", customStates, nil, "exit 3", 3, board.StateFailed, board.RunFailed},
		{"fleet board, resumable failure goes back to the first pool state", fleetStates, []string{"--resumable"}, "exit 3", 3, board.StateReady, board.RunFailedResumable},
		{"local board, resumable failure is only released", "", []string{"--resumable"}, "exit 3", 3, board.StateInProgress, board.RunFailedResumable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "lease: 3s\n"+tc.states)
			e.Start()
			e.MustRun("card", "create", "c1")
			args := append(append([]string{"claim", "c1"}, tc.args...), "--", "sh", "-c", tc.script)
			_, stderr, code := e.Run(args...)
			if code != tc.wantCode {
				t.Fatalf("claim exit = %d, want %d\n%s", code, tc.wantCode, stderr)
			}
			c := e.Card("c1")
			if c.State != tc.wantState {
				t.Errorf("card state = %q, want %q\n%s", c.State, tc.wantState, stderr)
			}
			if c.Claimed() {
				t.Errorf("card still claimed by %q", c.Claim)
			}
			if got := e.GetRun(c.LastRunID).Status; got != tc.wantRun {
				t.Errorf("run status = %q, want %q", got, tc.wantRun)
			}
		})
	}
}

// seedRecoveryClaim writes, before the agent starts, a recovery claim whose
// lease has already ended: what a reaper on another host leaves behind when
// it dies between its transfer and its act.
func (e *env) seedRecoveryClaim(card string) {
	e.t.Helper()
	st, err := boltstore.Open(filepath.Join(e.Dir, "board.db"), boltstore.Options{LockTimeout: 5 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if _, err := st.CreateCard(ctx, board.CreateCardParams{ID: card, State: board.StateInProgress}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := st.Claim(ctx, board.ClaimParams{Card: card, Marker: board.RecoveryMarker("elsewhere-4242"), Lease: time.Millisecond}); err != nil {
		e.t.Fatal(err)
	}
}

// killClaimer starts `claim ID --resumable` over a looping CMD, then
// kill -9s the claimer and its CMD together, and returns the card as it was
// while the worker ran.
func (e *env) killClaimer(id string) board.Card {
	e.t.Helper()
	claim := e.startClaim(id, "--resumable", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	workerPID := e.workerPID("worker.pid")
	held := e.Card(id)
	if held.LastRunID == "" || held.State != board.StateInProgress {
		e.t.Fatalf("card while the worker runs: state %q, run %q", held.State, held.LastRunID)
	}
	// The claimer first: killing CMD first would let the claimer see it
	// exit and route the card itself, as a living owner does.
	if err := claim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		e.t.Fatal(err)
	}
	_ = syscall.Kill(workerPID, syscall.SIGKILL)
	claim.wait(e.t, 5*time.Second)
	agentproc.WaitFor(e.t, 5*time.Second, "the worker command to be gone", func() bool { return dead(workerPID) })
	return held
}

func TestE2EReaperReturnsKilledResumableWorkerToThePool(t *testing.T) {
	t.Parallel()
	const lease, interval = 3 * time.Second, time.Second
	e := newEnv(t, "lease: 3s\nreaper: {enabled: true, interval: 1s}\n")
	e.AgentEnv = []string{"LEASEKEEPER_REAPER=1"}
	e.Start()
	e.MustRun("card", "create", "c1", "--backoff", "1s")

	held := e.killClaimer("c1")
	killed := time.Now()
	// The agent sees the claimer's pid gone at its next heartbeat tick and
	// expires the lease at once; the next reaper pass proves the run
	// orphaned (same host, pid gone), transfers the claim and reparks the
	// card, which on the local board is a release (DESIGN.md#twin-repark). The bound
	// is lease + one interval, plus slack for process scheduling on a
	// shared machine.
	var c board.Card
	agentproc.WaitFor(t, lease+interval+3*time.Second, "the watchdog to return the card to the pool", func() bool {
		c = e.Card("c1")
		return !c.Claimed() && c.ClaimEpoch > held.ClaimEpoch
	})
	t.Logf("card returned %s after the kill", time.Since(killed).Round(time.Millisecond))
	if !slices.Contains(board.DefaultBoard(true).PoolStates(), c.State) {
		t.Errorf("card state = %q, want a pool state", c.State)
	}
	run := e.GetRun(held.LastRunID)
	if run.Status != board.RunFailedResumable || run.FailureCode != board.FailureProcessOrphaned {
		t.Errorf("run = %s / %q, want %s / %s", run.Status, run.FailureCode, board.RunFailedResumable, board.FailureProcessOrphaned)
	}

	// Its owner died with it: an attempt, backed off (DESIGN.md#retries).
	if c.Attempts != 1 || c.RetryAt.IsZero() {
		t.Errorf("returned card: attempts %d, retry_at %v; want 1 and a backoff", c.Attempts, c.RetryAt)
	}
	// A new claim, waiting out the backoff, is granted with a higher epoch
	// than every earlier one (the worker's and the watchdog's recovery
	// claim) and resumes the run: a second attempt.
	_, stderr, code := e.Run("claim", "--wait=30s", "c1", "--", "true")
	if code != 0 {
		t.Fatalf("re-claim exit %d: %s", code, stderr)
	}
	after := e.Card("c1")
	if after.ClaimEpoch <= c.ClaimEpoch {
		t.Errorf("epoch of the new claim = %d, want > %d (the recovery claim's)", after.ClaimEpoch, c.ClaimEpoch)
	}
	if !strings.Contains(stderr, "epoch "+strconv.FormatInt(after.ClaimEpoch, 10)) {
		t.Errorf("claim output does not name epoch %d:\n%s", after.ClaimEpoch, stderr)
	}
	if after.LastRunID != held.LastRunID || after.Attempts != 2 {
		t.Errorf("after the re-claim: run %s, attempts %d; want %s resumed as attempt 2", after.LastRunID, after.Attempts, held.LastRunID)
	}
}

// TestE2EKilledWorkersCardIsReturnedOutOfTheBox: with no reaper config
// and no LEASEKEEPER_REAPER at all, a worker killed while it holds a card
// does not strand it: the gate is on by default (DESIGN.md#gate), so the
// agent's own periodic pass, with its default interval, returns the card
// to the pool. Nobody asks for a pass here.
func TestE2EKilledWorkersCardIsReturnedOutOfTheBox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n") // no reaper key: every reaper.* default
	for _, kv := range e.AgentEnv {
		if strings.HasPrefix(kv, "LEASEKEEPER_REAPER=") {
			t.Fatalf("the agent's environment sets %s", kv)
		}
	}
	e.Start()
	if st := e.Status(); !st.Reaper.Enabled || st.Reaper.IntervalMS != time.Minute.Milliseconds() {
		t.Fatalf("status reaper = %+v, want the gate on at the default interval", st.Reaper)
	}
	e.MustRun("card", "create", "c1", "--backoff", "1s")

	held := e.killClaimer("c1")
	// The lease is expired at the next heartbeat tick (the claimer's pid
	// is gone), and that expiry wakes the reaper: the pass it runs at once
	// decides the card, not the periodic one a default interval (a minute)
	// later (DESIGN.md#owner-dead). The bound is one lease and slack for a
	// shared machine, well inside the interval.
	var c board.Card
	agentproc.WaitFor(t, 3*time.Second+15*time.Second, "the pass the owner's death wakes to return the card to the pool", func() bool {
		c = e.Card("c1")
		return !c.Claimed() && c.ClaimEpoch > held.ClaimEpoch
	})
	if !slices.Contains(board.DefaultBoard(true).PoolStates(), c.State) {
		t.Errorf("card state = %q, want a pool state", c.State)
	}
	if run := e.GetRun(held.LastRunID); run.Status != board.RunFailedResumable || run.FailureCode != board.FailureProcessOrphaned {
		t.Errorf("run = %s / %q, want %s / %s", run.Status, run.FailureCode, board.RunFailedResumable, board.FailureProcessOrphaned)
	}
	// The owner's death is an attempt, backed off (DESIGN.md#retries):
	// the re-claim waits it out.
	if _, stderr, code := e.Run("claim", "--wait=30s", "c1", "--", "true"); code != 0 {
		t.Errorf("re-claim of the returned card: exit %d: %s", code, stderr)
	}
}

func TestE2EGateOffDecidesNothingButReleasesRecoveryClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\nreaper: {enabled: true, interval: 1s}\n")
	// The environment variable wins over the file: the operator's lever.
	e.AgentEnv = []string{"LEASEKEEPER_REAPER=0"}
	e.seedRecoveryClaim("abandoned")
	e.Start()
	e.MustRun("card", "create", "c1")

	held := e.killClaimer("c1")
	agentproc.WaitFor(t, 10*time.Second, "the dead claimer's lease to be expired", func() bool {
		c := e.Card("c1")
		return c.Claimed() && !c.ClaimLeaseUntil.After(time.Now())
	})
	// One full pass that certainly started after the expiry.
	out := e.MustRun("reaper", "pass")
	if !strings.Contains(out, "gate off") {
		t.Errorf("reaper pass output does not say the gate is off:\n%s", out)
	}

	c := e.Card("c1")
	if c.Claim != held.Claim || c.ClaimEpoch != held.ClaimEpoch || c.State != board.StateInProgress {
		t.Errorf("gate off: card = %s@%d in %q, want untouched %s@%d in in_progress", c.Claim, c.ClaimEpoch, c.State, held.Claim, held.ClaimEpoch)
	}
	if !c.LeaseExpired(time.Now()) {
		t.Errorf("gate off: lease until %v, want expired", c.ClaimLeaseUntil)
	}
	if run := e.GetRun(held.LastRunID); run.Status != board.RunRunning || run.FailureCode != "" {
		t.Errorf("gate off: run = %s / %q, want still running with no failure code", run.Status, run.FailureCode)
	}
	if a := e.Card("abandoned"); a.Claimed() || a.State != board.StateInProgress {
		t.Errorf("abandoned recovery claim: card = claim %q in %q, want released, state unchanged", a.Claim, a.State)
	}
}

func TestE2EReaperDryRunPrintsDecisionsAndChangesNothing(t *testing.T) {
	t.Parallel()
	// The gate is off, so the pass the claimer's death wakes decides
	// nothing (DESIGN.md#gate) and the expired claim waits for the dry
	// run; the long interval runs no pass of its own.
	e := newEnv(t, "lease: 3s\nreaper: {enabled: false, interval: 1h}\n")
	e.Start()
	e.MustRun("card", "create", "c1")

	held := e.killClaimer("c1")
	agentproc.WaitFor(t, 10*time.Second, "the dead claimer's lease to be expired", func() bool {
		c := e.Card("c1")
		return c.Claimed() && !c.ClaimLeaseUntil.After(time.Now())
	})
	before := e.Card("c1")

	out := e.MustRun("reaper", "pass", "--dry-run")
	for _, want := range []string{"dry run", "c1", held.Claim, "decided", "repark (row 11)", "false"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry-run output lacks %q:\n%s", want, out)
		}
	}
	var pass apitype.ReaperPass
	if err := json.Unmarshal([]byte(e.MustRun("reaper", "pass", "--dry-run", "--json")), &pass); err != nil {
		t.Fatal(err)
	}
	if len(pass.Decisions) != 1 || pass.Decisions[0].Card != "c1" || pass.Decisions[0].Applied || !pass.DryRun {
		t.Errorf("dry-run report = %+v, want one unapplied decision on c1", pass)
	}
	after := e.Card("c1")
	if after.Claim != before.Claim || after.ClaimEpoch != before.ClaimEpoch || after.State != before.State || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("dry run changed the card: before %+v, after %+v", before, after)
	}
	if run := e.GetRun(held.LastRunID); run.Status != board.RunRunning {
		t.Errorf("dry run changed the run: status %s, want running", run.Status)
	}

	// With the gate turned on (a live reload), the real pass does what the
	// dry run said.
	e.WriteConfig("lease: 3s\nreaper: {enabled: true, interval: 1h}\n")
	agentproc.WaitFor(t, 10*time.Second, "the reload to turn the gate on", func() bool { return e.Status().Reaper.Enabled })
	e.MustRun("reaper", "pass")
	if c := e.Card("c1"); c.Claimed() || c.ClaimEpoch <= held.ClaimEpoch {
		t.Errorf("after the real pass: claim %q epoch %d, want released with an epoch above %d", c.Claim, c.ClaimEpoch, held.ClaimEpoch)
	}
	if run := e.GetRun(held.LastRunID); run.Status != board.RunFailedResumable || run.FailureCode != board.FailureProcessOrphaned {
		t.Errorf("after the real pass: run = %s / %q, want failed_resumable / PROCESS_ORPHANED", run.Status, run.FailureCode)
	}
}

// TestE2ELaunchHintsFromTheRealAgent checks the wiring of the effects
// layer in the real binary: an operator's move into a launch state and a
// one-shot label each reach a watching worker, and the label is consumed.
func TestE2ELaunchHintsFromTheRealAgent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "c1", "--state", "backlog")
	e.MustRun("card", "create", "c2", "--state", "backlog")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	frames := make(chan apitype.Frame, 16)
	hello := make(chan struct{}, 1)
	go func() {
		c := &client.Client{Socket: e.Socket}
		_ = c.Watch(ctx, -1, func(f apitype.Frame) error {
			switch f.Type {
			case apitype.FrameHello:
				hello <- struct{}{}
			case apitype.FrameLaunch:
				frames <- f
			}
			return nil
		})
	}()
	select {
	case <-hello:
	case <-time.After(10 * time.Second):
		t.Fatal("no hello on the watch stream")
	}
	next := func() apitype.Frame {
		select {
		case f := <-frames:
			return f
		case <-time.After(10 * time.Second):
			t.Fatal("no launch hint")
			return apitype.Frame{}
		}
	}

	e.MustRun("card", "move", "c1", "ready")
	if f := next(); f.Card != "c1" || f.State != board.StateReady || f.Reason != "" {
		t.Errorf("hint = %+v, want c1 entering ready", f)
	}
	e.MustRun("card", "label", "c2", "--add", "once:go")
	if f := next(); f.Card != "c2" || f.State != board.StateBacklog || f.Reason != "once:go" {
		t.Errorf("hint = %+v, want the one-shot once:go on c2 in backlog", f)
	}
	agentproc.WaitFor(t, 5*time.Second, "the one-shot to be consumed", func() bool {
		return !slices.Contains(e.Card("c2").Labels, "once:go")
	})
}
