package serve

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
)

// becomeSubreaper makes this test process adopt its orphaned descendants,
// so a test can wait4 a plugin whose parent it killed and learn exactly how
// the plugin died. It is process-wide: the tests using it do not run in
// parallel.
func becomeSubreaper(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

// reap waits for the adopted process pid to end, failing t (and killing it)
// if it is still alive after d.
func reap(t *testing.T, pid int, d time.Duration) unix.WaitStatus {
	t.Helper()
	type result struct {
		ws  unix.WaitStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		for {
			var ws unix.WaitStatus
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			done <- result{ws, err}
			return
		}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("wait4(%d): %v", pid, r.err)
		}
		return r.ws
	case <-time.After(d):
		_ = unix.Kill(pid, unix.SIGKILL)
		t.Fatalf("plugin %d still alive %s after its parent was SIGKILLed", pid, d)
		return 0
	}
}

// readLines sends the lines of r to a channel.
func readLines(r io.Reader) <-chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// TestPluginArmsItsOwnParentDeathSignal starts the plugin from a shell that
// sets no parent-death signal, as a foreign launcher would: the plugin's own
// prctl must still take it down with its parent.
func TestPluginArmsItsOwnParentDeathSignal(t *testing.T) {
	bin := testPluginBinary(t)
	becomeSubreaper(t)
	dir := t.TempDir()
	cfg, err := ChildConfig{Backend: "bolt", Path: filepath.Join(dir, "board.db"), Board: board.DefaultBoard(true)}.Environ()
	if err != nil {
		t.Fatal(err)
	}

	// The shell reports the plugin's pid, then waits; the plugin's stdout is
	// the shell's, so its handshake line says it is serving.
	sh := exec.Command("/bin/sh", "-c", `LEASEKEEPER_STORE_PLUGIN_PARENT=$$ "$0" & echo "child $!"; wait`, bin)
	sh.Env = append(os.Environ(), "TESTPLUGIN_MODE=", "TMPDIR="+dir, cfg,
		wire.Handshake.MagicCookieKey+"="+wire.Handshake.MagicCookieValue,
		"PLUGIN_PROTOCOL_VERSIONS="+strconv.Itoa(wire.ProtocolVersion))
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(out)
	var pid int
	serving := false
	timeout := time.After(time.Minute)
	for pid == 0 || !serving {
		select {
		case line, ok := <-lines:
			if !ok {
				sh.Wait()
				t.Fatal("the shell's output ended before the plugin served")
			}
			if strings.HasPrefix(line, "child ") {
				pid, _ = strconv.Atoi(strings.TrimPrefix(line, "child "))
			} else if strings.Contains(line, "|grpc") {
				serving = true
			}
		case <-timeout:
			sh.Process.Kill()
			t.Fatalf("no pid and handshake from the shell within a minute (pid %d, serving %v)", pid, serving)
		}
	}

	if err := sh.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	sh.Wait()
	ws := reap(t, pid, 30*time.Second)
	if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Errorf("plugin %d ended with %v, want killed by SIGKILL (its own parent-death signal)", pid, ws)
	}
}

// TestPluginRefusesToServeAnotherParent covers the window in which the agent
// died before the plugin armed its signal: the plugin sees it was adopted.
func TestPluginRefusesToServeAnotherParent(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(testPluginBinary(t))
	cmd.Env = append(os.Environ(), "TESTPLUGIN_MODE=",
		wire.Handshake.MagicCookieKey+"="+wire.Handshake.MagicCookieValue,
		wire.ParentPIDEnv+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("plugin with a foreign parent: got %v, want exit status 1", err)
	}
	if want := "the agent (pid 1) that started this plugin is gone"; !strings.Contains(string(out), want) {
		t.Errorf("output %q does not say %q", out, want)
	}
}

func TestPluginRefusesToRunByHand(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(testPluginBinary(t))
	cmd.Env = append(os.Environ(), "TESTPLUGIN_MODE=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("plugin run by hand: got %v, want a non-zero exit", err)
	}
	if want := "not run by hand"; !strings.Contains(string(out), want) {
		t.Errorf("output %q does not say %q", out, want)
	}
}
