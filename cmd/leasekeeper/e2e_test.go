package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// These tests run the real binary: a real agent process on a real Unix
// socket with a real bbolt file, real `leasekeeper claim` processes, real
// signals. The binary is built once, without -race (the packages it wires
// run their own tests with -race; building every dependency with it here
// would cost minutes).

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasekeeper-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "leasekeeper")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building leasekeeper:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// waitFor polls cond until it holds or the bound passes. It is only used to
// wait on other processes (an agent starting, a worker dying), which offer
// nothing to block on.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", bound, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe to write from a process's output
// copier while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is one test's sandbox: a directory holding the config, the socket
// and the store.
type env struct {
	t      *testing.T
	dir    string
	socket string
	config string
	// agentEnv is added to the agent's environment (LEASEKEEPER_REAPER...);
	// environ() strips those from everything else.
	agentEnv []string
}

func newEnv(t *testing.T, configYAML string) *env {
	t.Helper()
	// Unix socket paths are limited to ~108 bytes: keep the directory short.
	dir, err := os.MkdirTemp("", "lk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	e := &env{t: t, dir: dir, socket: filepath.Join(dir, "lk.sock"), config: filepath.Join(dir, "agent.yaml")}
	e.writeConfig(configYAML)
	return e
}

func (e *env) writeConfig(body string) {
	e.t.Helper()
	full := fmt.Sprintf("socket: %s\nstore: {path: %s}\n%s", e.socket, filepath.Join(e.dir, "board.db"), body)
	// Write a sibling and rename it over, as editors do, so the agent's
	// watcher never reads a half-written file.
	tmp := e.config + ".tmp"
	if err := os.WriteFile(tmp, []byte(full), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, e.config); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, apitype.SocketEnv+"=") || strings.HasPrefix(kv, "LEASEKEEPER_REAPER=") || strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, apitype.SocketEnv+"="+e.socket)
}

// agentProc is a running agent.
type agentProc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
}

// startAgent starts `leasekeeper agent` and waits until it answers.
func (e *env) startAgent() *agentProc {
	e.t.Helper()
	cmd := exec.Command(binary, "agent", "--config", e.config)
	cmd.Env = append(e.environ(), e.agentEnv...)
	cmd.Dir = e.dir
	a := &agentProc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = a.stderr, a.stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(a.done) }()
	e.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-a.done
		}
		if e.t.Failed() {
			e.t.Logf("agent log:\n%s", a.stderr.String())
		}
	})
	waitFor(e.t, 20*time.Second, "the agent to answer", func() bool {
		select {
		case <-a.done:
			e.t.Fatalf("agent exited during start:\n%s", a.stderr.String())
		default:
		}
		_, _, code := e.lk("health")
		return code == 0
	})
	return a
}

// lk runs one CLI command to completion.
func (e *env) lk(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = e.environ()
	cmd.Dir = e.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		e.t.Fatalf("running leasekeeper %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// mustLK runs a command that must succeed.
func (e *env) mustLK(args ...string) string {
	e.t.Helper()
	out, errs, code := e.lk(args...)
	if code != 0 {
		e.t.Fatalf("leasekeeper %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
	}
	return out
}

func (e *env) card(id string) board.Card {
	e.t.Helper()
	var c board.Card
	if err := json.Unmarshal([]byte(e.mustLK("card", "show", id, "--json")), &c); err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) status() apitype.Status {
	e.t.Helper()
	var st apitype.Status
	if err := json.Unmarshal([]byte(e.mustLK("status", "--json")), &st); err != nil {
		e.t.Fatal(err)
	}
	return st
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
	output *syncBuffer
	done   chan struct{}
	code   int
}

func (e *env) startClaim(args ...string) *claimProc {
	e.t.Helper()
	cmd := exec.Command(binary, append([]string{"claim"}, args...)...)
	cmd.Env = e.environ()
	cmd.Dir = e.dir
	p := &claimProc{cmd: cmd, output: &syncBuffer{}, done: make(chan struct{})}
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
	waitFor(e.t, 20*time.Second, "the worker command to start", func() bool {
		b, err := os.ReadFile(filepath.Join(e.dir, file))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

func dead(pid int) bool {
	return pidprobe.New().Probe(context.Background(), pid, 0) == pidprobe.Dead
}

func TestE2EForceReleaseStopsTheCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.startAgent()
	e.mustLK("card", "create", "c1", "--title", "force release")

	claim := e.startClaim("c1", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	workerPID := e.workerPID("worker.pid")
	if got, want := e.card("c1").State, board.StateInProgress; got != want {
		t.Fatalf("card state while CMD runs = %q, want %q", got, want)
	}

	released := time.Now()
	out := e.mustLK("card", "release", "c1", "--force")
	if !strings.Contains(out, "released c1") {
		t.Errorf("release output = %q", out)
	}
	// The agent tells the holder at once; the claimer stops CMD well
	// within one heartbeat tick (lease/3 = 1s) — bounded generously here
	// because the machine is shared.
	if got, want := claim.wait(t, 3*time.Second), exitLost; got != want {
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
	// still says running (the closing write was fenced off).
	c := e.card("c1")
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
	e := newEnv(t, "lease: 3s\nmetrics: "+metricsAddr+"\n")
	e.startAgent()
	e.mustLK("card", "create", "c1")

	claim := e.startClaim("c1", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	workerPID := e.workerPID("worker.pid")
	if !holds(e.status(), "c1") {
		t.Fatal("agent does not list the claim it granted")
	}
	if err := claim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	claim.wait(t, 5*time.Second)

	// The command dies with its claimer (parent-death signal)...
	waitFor(t, 5*time.Second, "the worker command to die with its claimer", func() bool { return dead(workerPID) })
	// ...and the agent's next tick sees the claimer's pid gone: it stops
	// renewing and expires the lease at once rather than waiting it out.
	waitFor(t, 10*time.Second, "the dead claimer's lease to be expired", func() bool {
		c := e.card("c1")
		return !holds(e.status(), "c1") && c.Claimed() && !c.ClaimLeaseUntil.After(time.Now())
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
	a := e.startAgent()
	e.mustLK("card", "create", "c1")

	claim := e.startClaim("c1", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	e.workerPID("worker.pid")
	before := e.card("c1")

	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	e.startAgent()

	st := e.status()
	if !holds(st, "c1") {
		t.Fatalf("restarted agent did not adopt the live worker's claim; status: %+v", st)
	}
	if c := e.card("c1"); c.ClaimEpoch != before.ClaimEpoch || c.Claim != before.Claim {
		t.Fatalf("claim after restart = %s@%d, want the same %s@%d", c.Claim, c.ClaimEpoch, before.Claim, before.ClaimEpoch)
	}
	// The worker finishes normally: its owned writes through the new agent
	// are accepted, so it never noticed the restart.
	if err := os.WriteFile(filepath.Join(e.dir, "finish"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := claim.wait(t, 20*time.Second); got != 0 {
		t.Fatalf("claim exit = %d, want 0; output:\n%s", got, claim.output.String())
	}
	c := e.card("c1")
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
	a := e.startAgent()

	e.writeConfig("lease: 6s\nleese: 9s\n")
	waitFor(t, 10*time.Second, "the agent to refuse the invalid config", func() bool {
		return strings.Contains(a.stderr.String(), "config reload refused")
	})
	if !strings.Contains(a.stderr.String(), `unknown key \"leese\"`) && !strings.Contains(a.stderr.String(), `unknown key "leese"`) {
		t.Errorf("agent log does not name the unknown key:\n%s", a.stderr.String())
	}
	if got, want := e.status().LeaseMS, int64(3000); got != want {
		t.Errorf("lease after an invalid reload = %dms, want the last good %dms", got, want)
	}

	e.writeConfig("lease: 6s\nreaper: {enabled: true}\n")
	waitFor(t, 10*time.Second, "the valid config to apply", func() bool {
		st := e.status()
		return st.LeaseMS == 6000 && st.Reaper.Enabled
	})
}

func TestE2EStrictConfigRejectsUnknownKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\nreaper:\n  enabled: true\n  intervall: 5s\n")
	_, stderr, code := e.lk("agent", "--config", e.config)
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
	e.startAgent()
	e.mustLK("card", "create", "c1")
	if _, errs, code := e.lk("claim", "c1", "--", "true"); code != 0 {
		t.Fatalf("claim exit %d: %s", code, errs)
	}
	if got, want := e.card("c1").State, board.StateDone; got != want {
		t.Fatalf("state after a successful run = %q, want %q", got, want)
	}

	_, stderr, code := e.lk("card", "move", "c1", "ready")
	if code != exitError {
		t.Errorf("move out of done: exit %d, want %d", code, exitError)
	}
	for _, want := range []string{"refused", `terminal state "done"`, "leasekeeper card reopen c1 ready"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("move refusal does not contain %q:\n%s", want, stderr)
		}
	}
	if got, want := e.card("c1").State, board.StateDone; got != want {
		t.Errorf("state after the refused move = %q, want %q", got, want)
	}
	// The suggested command works.
	e.mustLK("card", "reopen", "c1", "ready")
	if got, want := e.card("c1").State, board.StateReady; got != want {
		t.Errorf("state after reopen = %q, want %q", got, want)
	}
}
