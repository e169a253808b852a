// Package supervise runs the command a `leasekeeper claim` holds a claim
// for: it starts the child so that it dies with its claimer, forwards
// signals to it, and stops it (SIGTERM, then SIGKILL) when the claim is lost.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// Child is a started command. Its exit is observed exactly once, by the
// goroutine that started it.
type Child struct {
	cmd   *exec.Cmd
	done  chan struct{}
	state *os.ProcessState
}

// Start starts cmd with a parent-death signal (SIGKILL), so the child never
// outlives a claimer killed with SIGKILL: otherwise it would keep writing
// for a claim nobody renews.
//
// The kernel delivers the parent-death signal when the THREAD that forked the
// child exits, not the process (prctl(2), Go issue 27505), and the Go runtime
// retires threads at will. So the child is forked from a goroutine that locks
// its OS thread and stays on it, blocked in wait, until the child is reaped.
func Start(cmd *exec.Cmd) (*Child, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	c := &Child{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is deliberately never unlocked: a goroutine that exits
		// while locked takes its thread down with it, which is harmless once
		// the child is reaped and avoids handing a thread that carried a
		// parent-death relationship back to the scheduler.
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		// The exit status is read from ProcessState; Wait's error only
		// repeats it for a non-zero exit.
		_ = cmd.Wait()
		c.state = cmd.ProcessState
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return c, nil
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Done is closed once the child has exited and been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Signal sends sig to the child; signalling an exited child is not an error.
func (c *Child) Signal(sig os.Signal) error {
	select {
	case <-c.done:
		return nil
	default:
	}
	if err := c.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %v to pid %d: %w", sig, c.Pid(), err)
	}
	return nil
}

// Wait blocks until the child exits (or ctx ends) and returns its exit code:
// the status for a normal exit, 128+signal for a child killed by a signal
// (the shell's convention).
func (c *Child) Wait(ctx context.Context) (int, error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		return -1, ctx.Err()
	}
	return ExitCode(c.state), nil
}

// Terminate asks the child to stop with SIGTERM and, if it has not exited
// within grace, kills it with SIGKILL. It returns once the child is reaped.
// It is how a lost claim is enforced: the fenced writes would refuse the
// child anyway, stopping it just saves the work (ADR-096 §2).
func (c *Child) Terminate(grace time.Duration) (killed bool) {
	_ = c.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		return false
	case <-t.C:
	}
	_ = c.Signal(syscall.SIGKILL)
	<-c.done
	return true
}

// ExitCode maps a process state to a shell-style exit code.
func ExitCode(st *os.ProcessState) int {
	if st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}
