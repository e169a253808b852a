package plugins

import (
	"os/exec"
	"runtime"
	"syscall"
)

// The plugin process must die with the agent, even when the agent is
// SIGKILLed: an orphaned plugin keeps the bbolt file lock, and the restarted
// agent's plugin would then wait on it (DESIGN.md#parent-death).
// Linux delivers the parent-death signal when the THREAD that forked the
// child exits, not the process (Go issue 27505), so both ends take care:
// the agent forks from a goroutine locked to its OS thread until the child
// is reaped (runLocked), and the plugin re-arms the signal itself and checks
// that its parent is still the agent that started it (serve.bindToParent).

// setParentDeathSignal asks the kernel to SIGKILL the child when the thread
// that starts it exits.
func setParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// runLocked starts cmd from a goroutine locked to its OS thread and keeps
// that thread until the child is reaped, so the parent-death signal fires
// only when the agent itself dies. started receives the result of Start;
// wait is called with the result of Wait once the child is reaped.
func runLocked(cmd *exec.Cmd, started chan<- error, wait func(error)) {
	go func() {
		// The goroutine returns still locked: Go then ends the thread,
		// which is harmless because the child is reaped by then.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		wait(cmd.Wait())
	}()
}
