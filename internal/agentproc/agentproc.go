// Package agentproc runs a real `leasekeeper agent` process for the tests
// that are about what an operator or a worker author sees from the outside:
// the end-to-end tests of the command, of the example workers, of the
// packaging files and of the documentation. They drive the built binary
// over its real Unix socket rather than an in-process agent.
package agentproc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/internal/filelock"
	"github.com/leasekeeper/leasekeeper/internal/memfs"
)

// ModuleRoot is the directory of the repository's go.mod, found through the
// go command so a test can build packages from any working directory.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the leasekeeper module")
	}
	return filepath.Dir(mod), nil
}

// Build compiles the package pkg (relative to the module root, such as
// "./cmd/leasekeeper") into out. It builds static (CGO_ENABLED=0), as the
// documented builds do (docs/OPERATIONS.md, the Dockerfile), so the tests
// run the program that ships.
func Build(pkg, out string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// DiskTempDir makes a fresh temporary directory on a disk, for a test that
// runs an agent as shipped (a config without store.allow_tmpfs) and so
// needs its board off a tmpfs (DESIGN.md#board-on-disk): in the temporary
// directory when that is not memory-backed, else under the user's cache
// directory. It is an error when neither is on a disk. The caller removes
// the directory.
func DiskTempDir(pattern string) (string, error) {
	var tried []string
	for _, base := range diskTempBases() {
		kind, err := memfs.Of(base)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		if kind != "" {
			tried = append(tried, base+" is on a "+kind)
			continue
		}
		if err := os.MkdirAll(base, 0o700); err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", base, err))
			continue
		}
		return os.MkdirTemp(base, pattern)
	}
	return "", fmt.Errorf("no temporary directory on a disk: tried %s", strings.Join(tried, ", "))
}

// MemoryTempDir points TMPDIR, for this test binary and the processes it
// starts, at /dev/shm when that is a tmpfs with at least 2 GiB free and
// TMPDIR is not set already. The tests of the stores and the plugin commit
// thousands of small transactions, each synced to its file: on a disk the
// syncs took half their time, on a tmpfs they cost nothing, and what those
// tests check does not depend on the disk (a power cut is simulated, not
// suffered). A test that needs a disk asks DiskTempDir for one. TMPDIR is
// /dev/shm itself, not a directory beneath it: a Unix socket's path is
// limited to about 100 bytes, and the plugins' sockets live in test
// directories that are long already. A test binary's TestMain calls it
// before m.Run (MainInMemory does, after building its binaries); the
// setting lasts the binary's life.
func MemoryTempDir() {
	const shm, room = "/dev/shm", 2 << 30
	if os.Getenv("TMPDIR") != "" {
		return
	}
	if kind, err := memfs.Of(shm); err != nil || kind != "tmpfs" {
		return
	}
	var st unix.Statfs_t
	if err := unix.Statfs(shm, &st); err != nil || st.Bavail*uint64(st.Bsize) < room || unix.Access(shm, unix.W_OK) != nil {
		return
	}
	_ = os.Setenv("TMPDIR", shm)
}

func diskTempBases() []string {
	bases := []string{os.TempDir()}
	if cache, err := os.UserCacheDir(); err == nil {
		bases = append(bases, filepath.Join(cache, "leasekeeper-test"))
	}
	return bases
}

// Agent is the sandbox an agent process runs in, and its current run.
type Agent struct {
	t      testing.TB
	Binary string
	// Dir holds the config, the socket and the bbolt file.
	Dir    string
	Socket string
	Config string
	// AgentEnv is added to the agent process's environment only (such as
	// LEASEKEEPER_REAPER=1); Environ strips those keys from everything else.
	AgentEnv []string
	// SysProcAttr, when set, starts the agent process with these
	// attributes (such as a pid namespace of its own).
	SysProcAttr *syscall.SysProcAttr
	// StartBound is how long Start waits for the agent to answer healthy
	// (0: 30s).
	StartBound time.Duration

	cur *Proc // the last run Start began
}

// Proc is one run of the agent process. A sandbox can run several in turn:
// a test that kills its agent starts the next on the same store.
type Proc struct {
	cmd  *exec.Cmd
	log  *Buffer
	done chan struct{}
}

// Pid is the process id of the run.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the run.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Done is closed once the run has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Crash kills the run with SIGKILL, as a crash would, and waits for it to
// exit (a run that had exited already is not an error).
func (p *Proc) Crash() error {
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-p.done
	return nil
}

// Log is what the run has written to stdout and stderr so far.
func (p *Proc) Log() string { return p.log.String() }

// stop sends the run SIGTERM and waits for it to exit (SIGKILL after 10s).
func (p *Proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// New prepares a sandbox for binary: a short temporary directory (Unix
// socket paths are limited to about 108 bytes) and a config naming the
// socket and the store inside it, followed by extra YAML.
func New(t testing.TB, binary, extraYAML string) *Agent {
	t.Helper()
	dir, err := os.MkdirTemp("", "lkx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	a := &Agent{
		t: t, Binary: binary, Dir: dir,
		Socket: filepath.Join(dir, "lk.sock"),
		Config: filepath.Join(dir, "agent.yaml"),
	}
	a.WriteConfig(extraYAML)
	return a
}

// WriteConfig replaces the config with one naming the sandbox's socket and
// store, followed by extraYAML. It writes a sibling and renames it over the
// config, as editors do, so a running agent's watcher never reads a
// half-written file. The store takes one line, so extraYAML starts at
// line 3: a test that checks the line number an error names relies on it.
// The store opts in to a tmpfs (store.allow_tmpfs): the sandbox lives in
// the temporary directory, which may be one, and its board is meant to be
// lost with it.
func (a *Agent) WriteConfig(extraYAML string) {
	a.t.Helper()
	cfg := fmt.Sprintf("socket: %s\nstore: {backend: bolt, path: %s, allow_tmpfs: true}\n%s",
		a.Socket, filepath.Join(a.Dir, "board.db"), extraYAML)
	tmp := a.Config + ".tmp"
	if err := os.WriteFile(tmp, []byte(cfg), 0o600); err != nil {
		a.t.Fatal(err)
	}
	if err := os.Rename(tmp, a.Config); err != nil {
		a.t.Fatal(err)
	}
}

// Environ is the environment every process of the sandbox runs with: the
// caller's, minus anything that would point at another agent or turn the
// reaper on, plus LEASEKEEPER_SOCKET.
func (a *Agent) Environ(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, apitype.SocketEnv+"="),
			strings.HasPrefix(kv, "LEASEKEEPER_REAPER="),
			strings.HasPrefix(kv, "NOTIFY_SOCKET="):
			continue
		}
		out = append(out, kv)
	}
	out = append(out, apitype.SocketEnv+"="+a.Socket)
	return append(out, extra...)
}

// Start runs `leasekeeper agent --config` with AgentEnv and returns the run
// once its status is healthy by the judgement `leasekeeper health` makes
// (apitype.Status.Unhealthy). The run gets SIGTERM when the test
// ends; its log is printed if the test failed. Start may be called again
// once the previous run has exited.
func (a *Agent) Start() *Proc {
	a.t.Helper()
	cmd := exec.Command(a.Binary, "agent", "--config", a.Config)
	cmd.Env = append(a.Environ(), a.AgentEnv...)
	cmd.Dir = a.Dir
	cmd.SysProcAttr = a.SysProcAttr
	p := &Proc{cmd: cmd, log: &Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	a.cur = p
	a.t.Cleanup(func() {
		p.stop()
		if a.t.Failed() {
			a.t.Logf("agent log (pid %d):\n%s", p.Pid(), p.Log())
		}
	})
	bound := a.StartBound
	if bound == 0 {
		bound = 30 * time.Second
	}
	a.WaitFor(bound, "the agent to answer healthy (`leasekeeper health`)", func() bool {
		select {
		case <-p.done:
			a.t.Fatalf("the agent exited while starting:\n%s", p.Log())
		default:
		}
		// What `leasekeeper health` judges, read through the client: a
		// CLI process per check would cost tens of milliseconds of CPU
		// for every agent a suite starts.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := a.client().Status(ctx)
		return err == nil && st.Unhealthy() == ""
	})
	return p
}

// Stop sends the current run SIGTERM and waits for it to exit (SIGKILL
// after 10s). It is safe to call more than once; the test's cleanup stops
// every run too.
func (a *Agent) Stop() {
	if a.cur != nil {
		a.cur.stop()
	}
}

// Log is what the current run has written so far.
func (a *Agent) Log() string {
	if a.cur == nil {
		return ""
	}
	return a.cur.Log()
}

// WaitFor polls cond until it holds or bound passes (see WaitFor).
func (a *Agent) WaitFor(bound time.Duration, what string, cond func() bool) {
	a.t.Helper()
	WaitFor(a.t, bound, what, cond)
}

// WaitFor polls cond until it holds or bound passes, and fails the test
// then. It is only for waiting on other processes (an agent starting, a
// worker dying), which offer nothing to block on.
//
// It polls every 20ms for the first second; after that the pause grows
// with the wait (a tenth of the time waited so far, at most a second), so a
// condition is still seen within a tenth of its wait, and a wait of a
// minute (a reaper's default interval) does not run a CLI process every
// 20ms. The pause is never shorter than the last check took either: a
// check that runs a CLI process costs tens of milliseconds of CPU, and
// checking back to back would keep a core busy on a shared two-core
// machine, taking it from the very processes the test is waiting on.
func WaitFor(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(bound)
	for {
		checked := time.Now()
		if cond() {
			return
		}
		took := time.Since(checked)
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", bound, what)
		}
		time.Sleep(max(pollPause(time.Since(start)), took))
	}
}

// pollPause is WaitFor's pause after waiting for waited.
func pollPause(waited time.Duration) time.Duration {
	const (
		first = 20 * time.Millisecond
		most  = time.Second
	)
	return min(max(first, waited/10), most)
}

// Run runs one CLI command of the sandbox's binary to completion.
func (a *Agent) Run(args ...string) (stdout, stderr string, code int) {
	a.t.Helper()
	cmd := exec.Command(a.Binary, args...)
	cmd.Env = a.Environ()
	cmd.Dir = a.Dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		a.t.Fatalf("running leasekeeper %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// MustRun runs a CLI command that must exit 0 and returns its stdout.
func (a *Agent) MustRun(args ...string) string {
	a.t.Helper()
	out, errs, code := a.Run(args...)
	if code != 0 {
		a.t.Fatalf("leasekeeper %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
	}
	return out
}

// Card reads a card through the client package, over the agent's socket.
// The test observes state here rather than testing the CLI, and a CLI
// process costs tens of milliseconds of CPU where this costs one: a
// WaitFor that polls a card would otherwise start a process per check.
// The CLI's own output is pinned where it is tested (`card show --json`
// against this answer in cmd/leasekeeper.TestE2EReadsMatchTheCLI).
func (a *Agent) Card(id string) board.Card {
	a.t.Helper()
	return ask(a, "get card "+id, func(c *client.Client, ctx context.Context) (board.Card, error) { return c.GetCard(ctx, id) })
}

// GetRun reads a run through the client package (the CLI has no run
// command).
func (a *Agent) GetRun(id string) board.Run {
	a.t.Helper()
	return ask(a, "get run "+id, func(c *client.Client, ctx context.Context) (board.Run, error) { return c.GetRun(ctx, id) })
}

// Status reads the agent's status through the client package (see Card).
func (a *Agent) Status() apitype.Status {
	a.t.Helper()
	return ask(a, "status", (*client.Client).Status)
}

// Events reads the whole audit log through the client package (see Card),
// a page at a time until a page comes back empty.
func (a *Agent) Events() []board.Event {
	a.t.Helper()
	return ask(a, "events", func(c *client.Client, ctx context.Context) ([]board.Event, error) {
		var evs []board.Event
		for {
			var after int64
			if len(evs) > 0 {
				after = evs[len(evs)-1].Seq
			}
			page, err := c.Events(ctx, after, 0)
			if err != nil || len(page) == 0 {
				return evs, err
			}
			evs = append(evs, page...)
		}
	})
}

// client is a client of the current run's socket.
func (a *Agent) client() *client.Client { return &client.Client{Socket: a.Socket} }

// ask calls the agent through the client package, bounded, and fails the
// test with what when the call fails. call takes the client first, so a
// method expression such as (*client.Client).Status fits it.
func ask[T any](a *Agent, what string, call func(*client.Client, context.Context) (T, error)) T {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := call(a.client(), ctx)
	if err != nil {
		a.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// Buffer is a bytes.Buffer safe to write from a process's output copier
// while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Main is the TestMain of a package whose tests run built binaries: it
// builds each package of pkgs (module-relative, "./cmd/leasekeeper") into a
// temporary directory, stores each binary's path where pkgs points, runs
// the tests and removes the directory. The tests' scratch files stay in the
// temporary directory the process was given (see MainInMemory).
//
// Each binary is built first into a directory of the user's cache shared
// by every test binary of this checkout (see CachedBuild), then copied
// into the temporary directory: `go test ./...` runs several packages that
// build the same command, and the go command links it again only when
// something it is built from changed, where a fresh output path costs a
// full link every time. The copy keeps each test binary's programs its
// own, whatever another package's build does to the shared one.
func Main(m *testing.M, pkgs map[string]*string) {
	os.Exit(run(m, pkgs, false))
}

// MainInMemory is Main for the tests that keep their scratch files in
// memory (the plugins'): once the binaries are built it calls
// MemoryTempDir, so only the tests' own files, not the binaries, go to
// /dev/shm, which is often mounted noexec. Main leaves TMPDIR alone for
// the tests that run an agent as shipped, or other programs (Podman
// refuses a runroot under TMPDIR=/dev/shm).
func MainInMemory(m *testing.M, pkgs map[string]*string) {
	os.Exit(run(m, pkgs, true))
}

// run builds pkgs into a fresh temporary directory, points TMPDIR at
// memory if inMemory, runs the tests, removes the directory and returns
// the exit code.
func run(m *testing.M, pkgs map[string]*string, inMemory bool) int {
	dir, err := os.MkdirTemp("", "leasekeeper-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for pkg, out := range pkgs {
		*out = filepath.Join(dir, filepath.Base(pkg))
		if err := CachedBuild(pkg, *out); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n", pkg, err)
			return 1
		}
	}
	if inMemory {
		MemoryTempDir()
	}
	return m.Run()
}

// CachedBuild builds pkg as Build does and leaves a copy of the binary at
// out. The build goes to a path under the user's cache directory named by
// the module root, pkg, the Go release and GOFLAGS, taken under a file lock; the go command's own
// staleness check decides whether it links again, where a fresh output
// path costs a full link (seconds of CPU for this module's command) every
// time. Without a cache directory or file locks it builds into out.
func CachedBuild(pkg, out string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return Build(pkg, out)
	}
	h := sha256.New()
	fmt.Fprintln(h, root, pkg, runtime.Version(), os.Getenv("GOFLAGS"))
	shared := filepath.Join(cache, "leasekeeper", "agentproc", hex.EncodeToString(h.Sum(nil))[:16], filepath.Base(pkg))
	if err := os.MkdirAll(filepath.Dir(shared), 0o755); err != nil {
		return Build(pkg, out)
	}
	unlock, err := filelock.Lock(shared + ".lock")
	if err != nil {
		return Build(pkg, out)
	}
	defer unlock()
	if err := Build(pkg, shared); err != nil {
		return err
	}
	return copyFile(shared, out)
}

// copyFile copies the executable from to a new file to.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// StartedRun waits for a worker to have started card's run in the running
// column, and returns the card as it then is.
func (a *Agent) StartedRun(card string) board.Card {
	a.t.Helper()
	var c board.Card
	a.WaitFor(30*time.Second, "the worker to start its run", func() bool {
		c = a.Card(card)
		return c.State == board.StateInProgress && c.LastRunID != "" && c.Claimed()
	})
	return c
}

// WritesAfterRelease lists the events marker wrote on card after an
// operator's force-release of its claim; the test fails when there was no
// such release.
func (a *Agent) WritesAfterRelease(card, marker string) []board.Event {
	a.t.Helper()
	var after []board.Event
	released := false
	for _, ev := range a.Events() {
		if ev.Card != card {
			continue
		}
		switch {
		case ev.Type == board.EventReleased && strings.HasPrefix(ev.Actor, "uid:") && ev.Data.Marker == marker:
			released = true
		case released && ev.Actor == marker:
			after = append(after, ev)
		}
	}
	if !released {
		a.t.Fatalf("no force-release of %s's claim on %s in the event log", marker, card)
	}
	return after
}
