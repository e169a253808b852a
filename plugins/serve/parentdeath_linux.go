package serve

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
)

// The plugin process must die with the agent, even when the agent is
// SIGKILLed: an orphaned plugin keeps the bbolt file lock, and the restarted
// agent's plugin would then wait on it (DESIGN.md#parent-death). Linux
// delivers the parent-death signal when the THREAD that forked the child
// exits, so the agent forks from a thread it keeps until the child is reaped
// (plugins.runLocked), and the plugin re-arms the signal itself and checks
// that its parent is still the agent that started it (bindToParent).

// bindToParent arms SIGKILL on the agent's death from inside the plugin,
// for the case where the agent's own Pdeathsig was not set (an external
// launcher) and to close the window in which the agent died before the
// plugin could arm it: after arming, a parent that is no longer the agent
// means the agent is already gone. The signal is armed on a thread that
// stays locked until release is called, because the kernel keeps it per
// thread and Go may retire threads.
func bindToParent() (release func(), err error) {
	armed := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		armed <- unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
		<-done
	}()
	release = func() { close(done) }
	if err := <-armed; err != nil {
		release()
		return nil, fmt.Errorf("store plugin: arming the parent-death signal: %w", err)
	}
	if want := os.Getenv(wire.ParentPIDEnv); want != "" {
		pid, perr := strconv.Atoi(want)
		if perr != nil {
			release()
			return nil, fmt.Errorf("store plugin: %s=%q is not a pid", wire.ParentPIDEnv, want)
		}
		if got := os.Getppid(); got != pid {
			release()
			return nil, fmt.Errorf("store plugin: the agent (pid %d) that started this plugin is gone (parent is now pid %d)", pid, got)
		}
	}
	return release, nil
}
