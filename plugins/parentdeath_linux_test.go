package plugins

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// TestPluginDiesWhenTheAgentIsKilled runs a real agent-like process that
// Launches the plugin (and then retires OS threads, the Pdeathsig pitfall),
// SIGKILLs it, and checks the plugin was killed by its parent-death signal.
func TestPluginDiesWhenTheAgentIsKilled(t *testing.T) {
	bin := testPluginBinary(t)
	becomeSubreaper(t)
	dir := t.TempDir()

	agent := exec.Command(bin)
	agent.Env = append(os.Environ(), "TESTPLUGIN_MODE=launcher", "TESTPLUGIN_DB="+filepath.Join(dir, "board.db"), "TMPDIR="+dir)
	var agentErr strings.Builder
	agent.Stderr = &agentErr
	out, err := agent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(out)
	var pid int
	select {
	case line, ok := <-lines:
		if !ok {
			agent.Wait()
			t.Fatalf("the launcher exited without launching the plugin: %s", agentErr.String())
		}
		if _, err := fmt.Sscanf(line, "child %d", &pid); err != nil || pid <= 1 {
			t.Fatalf("launcher said %q, want \"child <pid>\"", line)
		}
	case <-time.After(time.Minute):
		agent.Process.Kill()
		t.Fatal("the launcher did not report its plugin within a minute")
	}

	if err := agent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	agent.Wait()
	ws := reap(t, pid, 30*time.Second)
	if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Errorf("plugin %d ended with %v, want killed by SIGKILL (its parent-death signal)", pid, ws)
	}
}
