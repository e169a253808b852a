package serve

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/plugintest"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
)

// TestPluginArmsItsOwnParentDeathSignal starts the plugin from a shell that
// sets no parent-death signal, as a foreign launcher would: the plugin's own
// prctl must still take it down with its parent.
func TestPluginArmsItsOwnParentDeathSignal(t *testing.T) {
	bin := plugintest.Binary(t)
	plugintest.BecomeSubreaper(t)
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
	lines := plugintest.ReadLines(out)
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
	ws := plugintest.Reap(t, pid, 30*time.Second)
	if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Errorf("plugin %d ended with %v, want killed by SIGKILL (its own parent-death signal)", pid, ws)
	}
}

// TestPluginRefusesToServeAnotherParent covers the window in which the agent
// died before the plugin armed its signal: the plugin sees it was adopted.
func TestPluginRefusesToServeAnotherParent(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(plugintest.Binary(t))
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
	cmd := exec.Command(plugintest.Binary(t))
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
