package docker_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// newPIDNamespace returns the attributes that start a process as pid 1 of
// a pid namespace of its own, as a container runtime starts the agent; it
// skips the test where this machine may not make one (not root, or user
// namespaces that forbid it).
func newPIDNamespace(t *testing.T) *syscall.SysProcAttr {
	t.Helper()
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	probe := exec.Command(staticBin, "--help")
	probe.SysProcAttr = attr
	if err := probe.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Skipf("cannot start a process in a new pid namespace here (%v): the real-container tests cover pid 1", err)
		}
	}
	return attr
}

// TestAgentStartsAsPID1: the agent that is its container's init (workers
// join its pid namespace) runs with its own marker "<host>-1", and so does
// its reaper and its effects layer, which derive their markers from it.
func TestAgentStartsAsPID1(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, staticBin, "liveness: pid\n")
	a.SysProcAttr = newPIDNamespace(t)
	a.AgentEnv = []string{"LEASEKEEPER_REAPER=1"}
	a.Start()
	st := a.Status()
	if st.PID != 1 || st.Marker != st.Host+"-1" {
		t.Fatalf("status pid %d marker %q, want pid 1 and marker %s-1", st.PID, st.Marker, st.Host)
	}
	if !st.Reaper.Enabled {
		t.Errorf("status reaper %+v, want the gate on", st.Reaper)
	}
	// The reaper's first pass runs at start, under reaper:<host>-1.
	a.WaitFor(20*time.Second, "the reaper's first pass", func() bool {
		return a.Status().Reaper.LastPass != nil
	})
	if strings.Contains(a.Log(), "malformed marker") {
		t.Errorf("the agent refused a marker:\n%s", a.Log())
	}
}

// TestPluginSocketInStateDir: with no writable temporary directory (a
// scratch image with a read-only root and no /tmp mount), the store
// plugin's socket lives in the state directory, the bbolt file's.
func TestPluginSocketInStateDir(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, staticBin, "")
	a.AgentEnv = []string{"TMPDIR=" + filepath.Join(a.Dir, "no-such-dir")}
	a.Start()
	if b := a.Status().Backend; b.Plugin == "" {
		t.Fatalf("backend %s: the store does not run as a plugin, so this proves nothing", b)
	}
	dirs, err := filepath.Glob(filepath.Join(a.Dir, "plugin-dir*"))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("plugin socket directories in the state directory: %v (%v), want one", dirs, err)
	}
	socks, _ := filepath.Glob(filepath.Join(dirs[0], "plugin*"))
	if len(socks) == 0 {
		t.Errorf("%s holds no plugin socket", dirs[0])
	}
	if !strings.Contains(a.Log(), "state directory") {
		t.Errorf("the agent did not say where the plugin socket went:\n%s", a.Log())
	}
}

// TestNoWritableSocketDir: when neither the temporary directory nor the
// state directory can hold the plugin's socket, the agent fails at start
// and says so in one line that names both and the fix.
func TestNoWritableSocketDir(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, staticBin, "")
	// Too long a directory for a Unix socket path under it: a directory
	// root cannot be refused by permissions, so length is the refusal.
	deep := filepath.Join(a.Dir, strings.Repeat("d", 80))
	cfg := "socket: " + a.Socket + "\nstore: {backend: bolt, path: " + filepath.Join(deep, "board.db") + ", allow_tmpfs: true}\n"
	if err := os.WriteFile(a.Config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, staticBin, "agent", "--config", a.Config)
	cmd.Env = append(a.Environ(), "TMPDIR="+filepath.Join(a.Dir, "no-such-dir"))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ctx.Err() != nil {
		t.Fatalf("agent: %v (want it to exit non-zero at once)\n%s", err, out)
	}
	var line string
	for l := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(l, "no writable directory for the store plugin's socket") {
			line = l
		}
	}
	for _, want := range []string{"no-such-dir", "too long", "TMPDIR"} {
		if !strings.Contains(line, want) {
			t.Errorf("the error line %q does not name %q; output:\n%s", line, want, out)
		}
	}
}

// TestNoSocketFallbackIntoTheWorkersVolume: a store other than bbolt has no
// private state directory, and the directory of the agent's own socket is
// the one workers share: the plugin's socket (an unauthenticated gRPC
// server) must never land there. With no usable temporary directory the
// agent refuses to start instead, and leaves nothing in the socket's
// directory.
func TestNoSocketFallbackIntoTheWorkersVolume(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, staticBin, "")
	cfg := "socket: " + a.Socket + "\nstore: {backend: mongo, uri: \"mongodb://127.0.0.1:1\", database: lk}\n"
	if err := os.WriteFile(a.Config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, staticBin, "agent", "--config", a.Config)
	cmd.Env = append(a.Environ(), "TMPDIR="+filepath.Join(a.Dir, "no-such-dir"))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ctx.Err() != nil {
		t.Fatalf("agent: %v (want it to exit non-zero at once)\n%s", err, out)
	}
	if !strings.Contains(string(out), "no writable directory for the store plugin's socket") {
		t.Errorf("the agent did not say why it refused; output:\n%s", out)
	}
	entries, err := os.ReadDir(filepath.Dir(a.Socket))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "plugin") || strings.HasPrefix(e.Name(), ".leasekeeper-probe-") {
			t.Errorf("the agent made %s in the workers' socket directory", e.Name())
		}
	}
}
