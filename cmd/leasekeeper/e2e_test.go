package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	"github.com/leasekeeper/leasekeeper/internal/waitbound"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// These tests run the real binary: a real agent process on a real Unix
// socket with a real bbolt file, real `leasekeeper claim` processes, real
// signals. The binary is built once, without -race (the packages it wires
// run their own tests with -race; building every dependency with it here
// would cost minutes).

var binary string

func TestMain(m *testing.M) {
	if os.Getenv(sigCountEnv) != "" {
		// This binary is a claim's CMD in e2e_signals_test.go.
		os.Exit(countSignals())
	}
	waitbound.Widen()
	agentproc.Main(m, map[string]*string{"./cmd/leasekeeper": &binary})
}

// env is one test's sandbox (an agentproc.Agent: the config, the socket
// and the store in a short temporary directory) and the test it serves.
type env struct {
	*agentproc.Agent
	t *testing.T
}

func newEnv(t *testing.T, configYAML string) *env {
	t.Helper()
	return &env{Agent: agentproc.New(t, binary, configYAML), t: t}
}

func holds(st apitype.Status, card string) bool {
	for _, h := range st.Claims {
		if h.Card == card {
			return true
		}
	}
	return false
}

// claimProc is a background `leasekeeper claim`.
type claimProc struct {
	cmd    *exec.Cmd
	output *agentproc.Buffer
	done   chan struct{}
	code   int
}

func (e *env) startClaim(args ...string) *claimProc {
	e.t.Helper()
	return e.startLK(append([]string{"claim"}, args...)...)
}

func (p *claimProc) wait(t *testing.T, bound time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(bound):
		t.Fatalf("claim still running after %s; output:\n%s", bound, p.output.String())
		return -1
	}
}

// workerScript is CMD for the tests: it records its pid, then loops until
// the file "finish" appears (exit 0) or SIGTERM arrives (exit 143).
const workerScript = `echo $$ > "$1"; trap 'exit 143' TERM; while [ ! -f finish ]; do sleep 0.05; done`

func (e *env) workerPID(file string) int {
	e.t.Helper()
	var pid int
	agentproc.WaitFor(e.t, 20*time.Second, "the worker command to start", func() bool {
		b, err := os.ReadFile(filepath.Join(e.Dir, file))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

func dead(pid int) bool {
	return pidprobe.New().Probe(context.Background(), pid, pidprobe.Identity{}) == pidprobe.Dead
}

func TestE2EForceReleaseStopsTheCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "c1", "--title", "force release")

	claim := e.startClaim("c1", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	workerPID := e.workerPID("worker.pid")
	if got, want := e.Card("c1").State, board.StateInProgress; got != want {
		t.Fatalf("card state while CMD runs = %q, want %q", got, want)
	}

	released := time.Now()
	out := e.MustRun("card", "release", "c1", "--force")
	if !strings.Contains(out, "released c1") {
		t.Errorf("release output = %q", out)
	}
	// The agent tells the holder at once; the claimer stops CMD well
	// within one heartbeat tick (lease/3 = 1s) — bounded generously here
	// because the machine is shared.
	if got, want := claim.wait(t, 3*time.Second), claimExitLost; got != want {
		t.Fatalf("claim exit = %d, want %d (lost); output:\n%s", got, want, claim.output.String())
	}
	t.Logf("claimer exited %s after the force-release", time.Since(released).Round(time.Millisecond))
	if !dead(workerPID) {
		t.Errorf("worker command %d still alive after its claim was lost", workerPID)
	}
	if got := claim.output.String(); !strings.Contains(got, "late write refused") {
		t.Errorf("claimer output does not report its late write refused:\n%s", got)
	}
	// The refused late write changed nothing: the card is free, its run
	// is left resumable by the force-release (the closing write was fenced off).
	c := e.Card("c1")
	if c.Claimed() {
		t.Errorf("card claimed by %q after the force-release", c.Claim)
	}
}

// freeAddr returns a loopback address no one listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestE2EKilledClaimerLeaseExpiresAtOnce(t *testing.T) {
	t.Parallel()
	metricsAddr := freeAddr(t)
	// The gate is off, so the pass the expiry wakes decides nothing and
	// the heartbeat's own write is what this test sees
	// (DESIGN.md#owner-dead).
	e := newEnv(t, "lease: 3s\nreaper: {enabled: false}\nmetrics: "+metricsAddr+"\n")
	e.Start()
	e.MustRun("card", "create", "c1")

	claim := e.startClaim("c1", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	workerPID := e.workerPID("worker.pid")
	if !holds(e.Status(), "c1") {
		t.Fatal("agent does not list the claim it granted")
	}
	if err := claim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	claim.wait(t, 5*time.Second)

	// The command dies with its claimer (parent-death signal)...
	agentproc.WaitFor(t, 5*time.Second, "the worker command to die with its claimer", func() bool { return dead(workerPID) })
	// ...and the agent's next tick sees the claimer's pid gone: it stops
	// renewing and expires the lease at once rather than waiting it out.
	agentproc.WaitFor(t, 10*time.Second, "the dead claimer's lease to be expired", func() bool {
		c := e.Card("c1")
		return !holds(e.Status(), "c1") && c.Claimed() && !c.ClaimLeaseUntil.After(time.Now())
	})
	if got, want := scrape(t, metricsAddr), `leasekeeper_claims_lost_total{reason="owner_dead"} 1`; !strings.Contains(got, want) {
		t.Errorf("metrics do not contain %q:\n%s", want, got)
	}
}

func TestE2EAgentRestartAdoptsLiveWorker(t *testing.T) {
	t.Parallel()
	// A longer lease than the other tests: the worker's client must keep
	// trusting its claim across the agent's kill and restart.
	e := newEnv(t, "lease: 9s\n")
	a := e.Start()
	e.MustRun("card", "create", "c1")

	claim := e.startClaim("c1", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	e.workerPID("worker.pid")
	before := e.Card("c1")

	if err := a.Crash(); err != nil {
		t.Fatal(err)
	}
	e.Start()

	st := e.Status()
	if !holds(st, "c1") {
		t.Fatalf("restarted agent did not adopt the live worker's claim; status: %+v", st)
	}
	if c := e.Card("c1"); c.ClaimEpoch != before.ClaimEpoch || c.Claim != before.Claim {
		t.Fatalf("claim after restart = %s@%d, want the same %s@%d", c.Claim, c.ClaimEpoch, before.Claim, before.ClaimEpoch)
	}
	// The worker finishes normally: its owned writes through the new agent
	// are accepted, so it never noticed the restart.
	if err := os.WriteFile(filepath.Join(e.Dir, "finish"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := claim.wait(t, 20*time.Second); got != 0 {
		t.Fatalf("claim exit = %d, want 0; output:\n%s", got, claim.output.String())
	}
	c := e.Card("c1")
	if got, want := c.State, board.StateDone; got != want {
		t.Errorf("card state = %q, want %q", got, want)
	}
	if c.Claimed() {
		t.Errorf("card still claimed by %q", c.Claim)
	}
}

func TestE2EInvalidConfigReloadKeepsLastGood(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	a := e.Start()

	e.WriteConfig("lease: 6s\nleese: 9s\n")
	agentproc.WaitFor(t, 10*time.Second, "the agent to refuse the invalid config", func() bool {
		return strings.Contains(a.Log(), "config reload refused")
	})
	if !strings.Contains(a.Log(), `unknown key \"leese\"`) && !strings.Contains(a.Log(), `unknown key "leese"`) {
		t.Errorf("agent log does not name the unknown key:\n%s", a.Log())
	}
	if got, want := e.Status().LeaseMS, int64(3000); got != want {
		t.Errorf("lease after an invalid reload = %dms, want the last good %dms", got, want)
	}

	e.WriteConfig("lease: 6s\nreaper: {enabled: true}\n")
	agentproc.WaitFor(t, 10*time.Second, "the valid config to apply", func() bool {
		st := e.Status()
		return st.LeaseMS == 6000 && st.Reaper.Enabled
	})
}

func TestE2EStrictConfigRejectsUnknownKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\nreaper:\n  enabled: true\n  intervall: 5s\n")
	_, stderr, code := e.Run("agent", "--config", e.Config)
	if code == 0 {
		t.Fatal("agent started with an unknown config key")
	}
	for _, want := range []string{`unknown key "reaper.intervall"`, "line 6"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("agent error does not contain %q:\n%s", want, stderr)
		}
	}
}

func TestE2EMoveOutOfDoneSuggestsReopen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "c1")
	if _, errs, code := e.Run("claim", "c1", "--", "true"); code != 0 {
		t.Fatalf("claim exit %d: %s", code, errs)
	}
	if got, want := e.Card("c1").State, board.StateDone; got != want {
		t.Fatalf("state after a successful run = %q, want %q", got, want)
	}

	_, stderr, code := e.Run("card", "move", "c1", "ready")
	if code != exitError {
		t.Errorf("move out of done: exit %d, want %d", code, exitError)
	}
	for _, want := range []string{"refused", `terminal state "done"`, "leasekeeper card reopen c1 ready"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("move refusal does not contain %q:\n%s", want, stderr)
		}
	}
	if got, want := e.Card("c1").State, board.StateDone; got != want {
		t.Errorf("state after the refused move = %q, want %q", got, want)
	}
	// The suggested command works.
	e.MustRun("card", "reopen", "c1", "ready")
	if got, want := e.Card("c1").State, board.StateReady; got != want {
		t.Errorf("state after reopen = %q, want %q", got, want)
	}
}
