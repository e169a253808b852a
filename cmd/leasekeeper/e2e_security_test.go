package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// asUser runs the CLI as uid:gid (no supplementary groups).
func (e *env) asUser(uid, gid uint32, bin string, args ...string) (string, int) {
	e.t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(e.Environ(), "HOME=/")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	e.t.Fatalf("running %v as %d: %v", args, uid, err)
	return "", -1
}

// TestE2EAnotherUserCannotUseOperatorVerbs: a user who is not in the
// socket's group cannot connect at all (mode 0660); one who can connect but
// is not among the operators reads the board and is refused every operator
// verb — the uid comes from the kernel, not from the request.
func TestE2EAnotherUserCannotUseOperatorVerbs(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a command as another uid")
	}
	const nobody, nogroup = 65534, 65534
	e := newEnv(t, "")
	e.Start()
	e.MustRun("card", "create", "c1")
	// The binary and the sandbox, reachable for the other user.
	pub, err := os.MkdirTemp("", "lkbin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pub) })
	if err := os.Chmod(pub, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(pub, "leasekeeper")
	copyFile(t, binary, bin, 0o755)
	if err := os.Chmod(e.Dir, 0o755); err != nil {
		t.Fatal(err)
	}

	if out, code := e.asUser(nobody, nogroup, bin, "card", "ls"); code == 0 || !strings.Contains(out, "permission denied") {
		t.Errorf("a user outside the socket's group: exit %d %q, want refused at connect (permission denied)", code, out)
	}
	// Let it connect (as a member of the socket's group would).
	if err := os.Chmod(e.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	if out, code := e.asUser(nobody, nogroup, bin, "card", "ls"); code != 0 || !strings.Contains(out, "c1") {
		t.Errorf("a non-operator reading the board: exit %d %q, want it listed", code, out)
	}
	for _, args := range [][]string{
		{"card", "create", "c2"},
		{"card", "move", "c1", "backlog"},
		{"card", "release", "c1", "--force"},
		{"card", "label", "c1", "--add", "x"},
		{"reaper", "pass"},
	} {
		out, code := e.asUser(nobody, nogroup, bin, args...)
		if code == 0 || !strings.Contains(out, fmt.Sprintf("uid %d is not an operator", nobody)) {
			t.Errorf("%v as a non-operator: exit %d %q, want refused naming the uid", args, code, out)
		}
	}
	if c := e.Card("c1"); c.State != "ready" || len(c.Labels) != 0 {
		t.Errorf("a refused operator verb changed c1: %+v", c)
	}
}

// TestE2EPermissionDeniedOnTheSocketSaysWhy: a user the socket's mode
// keeps out is told that, with the socket's group and where the guide says
// how to grant access, not asked whether the agent is running; a socket
// that is not there still gets that question.
func TestE2EPermissionDeniedOnTheSocketSaysWhy(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a command as another uid")
	}
	const nobody, nogroup = 65534, 65534
	e := newEnv(t, "")
	e.Start()
	pub, err := os.MkdirTemp("", "lkbin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pub) })
	if err := os.Chmod(pub, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(pub, "leasekeeper")
	copyFile(t, binary, bin, 0o755)
	if err := os.Chmod(e.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(e.Socket, &st); err != nil {
		t.Fatal(err)
	}

	for _, args := range [][]string{{"card", "ls"}, {"health"}, {"claim", "c1", "--", "true"}} {
		out, code := e.asUser(nobody, nogroup, bin, args...)
		if code == 0 {
			t.Errorf("%v as a user outside the socket's group: exit 0: %s", args, out)
		}
		for _, want := range []string{"permission denied", e.Socket, fmt.Sprintf("uid %d", nobody),
			fmt.Sprintf("gid %d", st.Gid), "docs/OPERATIONS.md#security-model"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v as a user outside the socket's group: %q does not say %q", args, out, want)
			}
		}
		if strings.Contains(out, "running?") {
			t.Errorf("%v as a user outside the socket's group asks whether the agent runs: %q", args, out)
		}
	}

	// No socket at all: the question is the right one.
	out, code := e.asUser(nobody, nogroup, bin, "--socket", filepath.Join(e.Dir, "none.sock"), "card", "ls")
	if code == 0 || !strings.Contains(out, "is `leasekeeper agent` running?") {
		t.Errorf("no socket: exit %d %q, want the question whether the agent runs", code, out)
	}
}

// TestE2ESecondAgentOnAHeldStoreFile: a second agent pointed at the bbolt
// file another agent holds gives up within a bounded time, its last line
// naming the pid that holds the file.
func TestE2ESecondAgentOnAHeldStoreFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.Start()
	holder := e.Status().Store.Plugin
	if holder == nil || holder.PID == 0 {
		t.Fatalf("no store plugin pid in status: %+v", e.Status().Store)
	}
	second := newEnv(t, "")
	cfg := fmt.Sprintf("socket: %s\nstore: {backend: bolt, path: %s, allow_tmpfs: true}\n", second.Socket, filepath.Join(e.Dir, "board.db"))
	if err := os.WriteFile(second.Config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), binary, "agent", "--config", second.Config)
	cmd.Env, cmd.Dir = second.Environ(), second.Dir
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err == nil {
		t.Fatalf("the second agent started on a held file:\n%s", out)
	}
	if took > 30*time.Second {
		t.Errorf("the second agent took %s to give up", took)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, fmt.Sprintf("held by pid %d", holder.PID)) {
		t.Errorf("last line %q: want it to name the holder, pid %d", last, holder.PID)
	}
	// One line says why; go-plugin's account of the plugin that exited is
	// not shown at the default log level.
	if n := strings.Count(string(out), "held by pid"); n != 1 {
		t.Errorf("the cause is said %d times, want once:\n%s", n, out)
	}
	if !strings.HasPrefix(lines[len(lines)-1], "leasekeeper: ") {
		t.Errorf("last line %q: want the command's one error line", lines[len(lines)-1])
	}
	for _, framing := range pluginFraming {
		if strings.Contains(string(out), framing) {
			t.Errorf("the output carries go-plugin's framing %q:\n%s", framing, out)
		}
	}

	// At debug the detail is there.
	if err := os.WriteFile(second.Config, []byte(cfg+"log: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd = exec.CommandContext(t.Context(), binary, "agent", "--config", second.Config)
	cmd.Env, cmd.Dir = second.Environ(), second.Dir
	out, _ = cmd.CombinedOutput()
	if !strings.Contains(string(out), "store plugin start failed") || !strings.Contains(string(out), "plugin stderr") {
		t.Errorf("at log: debug, the plugin's start failure is not detailed:\n%s", out)
	}
}

// TestE2ESecondAgentSaysAtOnceItWaitsForTheLock: a second agent on a bbolt
// file another agent holds says so while it waits, not only when it gives
// up: the file, the pid that holds it, that it waits and for how long. Its
// last line then says what to do.
func TestE2ESecondAgentSaysAtOnceItWaitsForTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.Start()
	holder := e.Status().Store.Plugin
	if holder == nil || holder.PID == 0 {
		t.Fatalf("no store plugin pid in status: %+v", e.Status().Store)
	}
	file := filepath.Join(e.Dir, "board.db")
	second := newEnv(t, "")
	cfg := fmt.Sprintf("socket: %s\nstore: {backend: bolt, path: %s, allow_tmpfs: true}\n", second.Socket, file)
	if err := os.WriteFile(second.Config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), binary, "agent", "--config", second.Config)
	cmd.Env, cmd.Dir = second.Environ(), second.Dir
	var out agentproc.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// The notice comes while the agent still waits: it has not exited when
	// the line is there.
	notice := func() string {
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, "locked by another process") {
				return l
			}
		}
		return ""
	}
	deadline := time.Now().Add(20 * time.Second)
	for notice() == "" {
		select {
		case err := <-done:
			t.Fatalf("the second agent exited (%v) before saying it waits for the lock:\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no notice of the lock within 20s:\n%s", out.String())
		}
	}
	line := notice()
	for _, want := range []string{file, fmt.Sprintf("pid %d", holder.PID), "waiting", "10s"} {
		if !strings.Contains(line, want) {
			t.Errorf("the lock notice %q does not say %q", line, want)
		}
	}

	if err := <-done; err == nil {
		t.Fatalf("the second agent started on a held file:\n%s", out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	for _, want := range []string{fmt.Sprintf("held by pid %d", holder.PID), "stop", "store.path"} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q does not say %q", last, want)
		}
	}
}

// pluginFraming is what go-plugin says about a plugin process that failed
// to start, which an operator should not have to read past.
var pluginFraming = []string{"plugin process exited", "failed to exit gracefully", "Unrecognized remote plugin message", "handshake", "plugin stderr"}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
