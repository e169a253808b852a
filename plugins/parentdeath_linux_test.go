package plugins

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/plugins/internal/plugintest"
)

// TestPluginDiesWhenTheAgentIsKilled runs a real agent-like process that
// Launches the plugin (and then retires OS threads, the Pdeathsig pitfall),
// SIGKILLs it, and checks the plugin was killed by its parent-death signal.
func TestPluginDiesWhenTheAgentIsKilled(t *testing.T) {
	bin := plugintest.Binary(t)
	plugintest.BecomeSubreaper(t)
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
	lines := plugintest.ReadLines(out)
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
	ws := plugintest.Reap(t, pid, 30*time.Second)
	if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Errorf("plugin %d ended with %v, want killed by SIGKILL (its parent-death signal)", pid, ws)
	}
}
