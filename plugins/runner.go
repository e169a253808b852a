package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"

	"github.com/hashicorp/go-plugin/runner"
)

// childRunner starts and reaps one plugin process for go-plugin. It exists
// because go-plugin's own runner forks from whatever goroutine calls Start,
// and a child whose parent-death signal is armed must be forked from a
// thread that outlives it (see runLocked).
type childRunner struct {
	cmd *exec.Cmd

	stdout, stderr *os.File // our read ends

	pid     int
	done    chan struct{} // closed once the child is reaped
	waitErr error         // valid after done
	once    sync.Once

	mu     sync.Mutex
	proc   *os.Process // set once started
	killed bool        // kill was asked for, perhaps before the start
}

var _ runner.Runner = (*childRunner)(nil)

func newChildRunner(cmd *exec.Cmd) *childRunner {
	return &childRunner{cmd: cmd, done: make(chan struct{})}
}

// Start forks the child. Its stdout (the go-plugin handshake line) and
// stderr (its log) are plain pipes whose read ends stay open after the
// child is reaped, so go-plugin reads them to the end even when the child
// exits at once (a non-plugin binary printing one line): exec.Cmd's own
// pipes would be closed by Wait under the reader.
func (r *childRunner) Start(_ context.Context) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	r.cmd.Stdout, r.cmd.Stderr = outW, errW
	setParentDeathSignal(r.cmd)

	started := make(chan error, 1)
	runLocked(r.cmd, started, func(werr error) {
		r.waitErr = werr
		close(r.done)
	})
	err = <-started
	// The child holds its own copies of the write ends.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		close(r.done)
		return err
	}
	r.stdout, r.stderr = outR, errR
	r.pid = r.cmd.Process.Pid
	r.mu.Lock()
	r.proc = r.cmd.Process
	if r.killed {
		_ = r.proc.Kill()
	}
	r.mu.Unlock()
	return nil
}

// Wait waits until the child is reaped. go-plugin calls it after reading
// stdout and stderr to their end, so the read ends are closed here.
func (r *childRunner) Wait(ctx context.Context) error {
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.once.Do(func() {
		if r.stdout != nil {
			r.stdout.Close()
			r.stderr.Close()
		}
	})
	return r.waitErr
}

// exited reports whether the child has been reaped.
func (r *childRunner) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL; killing a reaped child is not an error.
func (r *childRunner) Kill(_ context.Context) error {
	return r.kill()
}

// kill may run before Start has forked (a cancelled launch): the child is
// then killed as soon as it exists.
func (r *childRunner) kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.killed = true
	if r.proc == nil || r.exited() {
		return nil
	}
	if err := r.proc.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

func (r *childRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *childRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *childRunner) Name() string          { return r.cmd.Path }

func (r *childRunner) ID() string {
	if r.pid == 0 {
		return ""
	}
	return strconv.Itoa(r.pid)
}

// Diagnose explains a failed handshake; go-plugin appends it to the line it
// could not parse.
func (r *childRunner) Diagnose(context.Context) string {
	return fmt.Sprintf("%s did not answer the leasekeeper store plugin handshake: it is not a store plugin, "+
		"was built for another system, or failed before serving (its stderr, if any, is quoted below and logged)", r.cmd.Path)
}

func (r *childRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *childRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
