// Package supervise runs the command a `leasekeeper claim` holds a claim
// for, and sees to it that nothing the command started outlives the claim.
//
// The command runs under a supervisor: this program's own binary,
// re-executed with a hidden subcommand (see Serve). The supervisor is the
// child subreaper (PR_SET_CHILD_SUBREAPER) of the command's whole tree, so
// a process that double-forks or moves to a process group or session of its
// own is re-parented to it instead of to pid 1, and a walk of /proc from
// its pid finds every process the command started. However the claim ends
// — the command exits, the claim is lost and the claimer stops the command,
// or the claimer is killed, even with SIGKILL — the supervisor kills every
// process left in that tree and only then exits.
//
// The supervisor also keeps the claim's trusted deadline (Child.KillBy),
// so the tree dies by it even while the claimer cannot run, and it passes
// on the signals the claimer receives only when the command did not get
// them from the kernel already (Child.Signal, witness.go).
//
// What it cannot stop (said in docs/OPERATIONS.md too): a process started
// on the command's behalf by something outside the tree (systemd-run, at,
// a container runtime, an ssh to localhost); a process it may not signal
// (a setuid program, another user's, while the claim runs unprivileged) or
// cannot see (a /proc mounted with hidepid); and, should the supervisor
// itself be killed with SIGKILL, whatever the command left when no claimer
// with Launcher.Subreaper survives to collect it.
package supervise

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// Launcher says how to start the supervisor.
type Launcher struct {
	// Path and Args start this program's binary in the hidden subcommand
	// that calls Serve; Start appends the arguments Serve reads.
	Path string
	Args []string
	// Subreaper makes the calling process a child subreaper too, and has a
	// Child whose supervisor dies before it reported kill every process
	// that was then re-parented to the caller. Set it only in a process
	// whose children are all supervisors (`leasekeeper claim`): the sweep
	// cannot tell a command's orphan from another child of the caller.
	Subreaper bool
	// KillBy, when set, is the first instant given to Child.KillBy (with
	// KillGrace), written to the supervisor before it starts: a caller
	// stopped right after Start must not leave the command with no
	// deadline at all.
	KillBy    time.Time
	KillGrace time.Duration
}

// Child is a command started under a supervisor.
type Child struct {
	sup  *exec.Cmd
	pid  int
	done chan struct{}

	ctlMu sync.Mutex
	ctl   *os.File // our end of the supervisor's control pipe

	deliveries chan Delivery

	// Set by watch before done is closed.
	code          int
	killedBy      syscall.Signal
	killed        bool
	expired       bool
	survivors     []Survivor
	supervisorErr error
}

// Start starts cmd (its Path, Args, Env, Dir and standard streams; its
// SysProcAttr is not used) under a supervisor started as l says, and
// returns once cmd is running. cmd itself is never started: the supervisor
// starts a process like it.
//
// The supervisor gets a process group of its own, so a signal sent to the
// claimer's group (a terminal's ^C or ^\, a kill of the job, even
// SIGKILL) does not reach it; cmd joins the caller's group, as it did when
// the claimer started it directly, so job control treats it as the
// caller's job. So does the supervisor's signal witness (see Signal).
func Start(l Launcher, cmd *exec.Cmd) (*Child, error) {
	if cmd.Err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, cmd.Err)
	}
	if l.Subreaper {
		if err := becomeSubreaper(); err != nil {
			return nil, err
		}
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		_, _ = ctlR.Close(), ctlW.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	args := append(slices.Clone(l.Args), "--pgid", strconv.Itoa(syscall.Getpgrp()), "--", cmd.Path)
	sup := exec.Command(l.Path, append(args, cmd.Args...)...)
	sup.Env, sup.Dir = cmd.Env, cmd.Dir
	sup.Stdin, sup.Stdout, sup.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	sup.ExtraFiles = []*os.File{ctlR, stW} // fds 3 and 4
	// No parent-death signal: the supervisor must outlive a killed
	// claimer; the control pipe's end of file tells it.
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !l.KillBy.IsZero() {
		// The pipe holds the line until the supervisor reads it.
		if _, err := fmt.Fprintf(ctlW, "killby %d %d\n", monoOf(l.KillBy), max(l.KillGrace, 0).Nanoseconds()); err != nil {
			_, _, _, _ = ctlR.Close(), ctlW.Close(), stR.Close(), stW.Close()
			return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
		}
	}
	err = sup.Start()
	_, _ = ctlR.Close(), stW.Close()
	if err != nil {
		_, _ = ctlW.Close(), stR.Close()
		return nil, fmt.Errorf("start the claim supervisor %s: %w", l.Path, err)
	}
	supervisors.add(sup.Process.Pid)
	c := &Child{sup: sup, ctl: ctlW, done: make(chan struct{}), code: -1, deliveries: make(chan Delivery, 16)}
	first := make(chan string, 1)
	go c.watch(l, stR, first)
	verb, arg, _ := strings.Cut(<-first, " ")
	if verb == "started" {
		if c.pid, err = strconv.Atoi(arg); err == nil {
			return c, nil
		}
	}
	<-c.done
	return nil, startError(cmd.Path, arg)
}

// startError is the supervisor's "failed" report as an error: one that
// carried the exec's errno wraps it, so errors.Is(err, os.ErrNotExist)
// and os.ErrPermission tell a missing command from one that cannot run.
func startError(path, msg string) error {
	if rest, ok := strings.CutPrefix(msg, "errno "); ok {
		n, text, _ := strings.Cut(rest, " ")
		if e, err := strconv.Atoi(n); err == nil {
			errno := syscall.Errno(e)
			if text == errno.Error() {
				return fmt.Errorf("start %s: %w", path, errno)
			}
			return fmt.Errorf("start %s: %s: %w", path, text, errno)
		}
	}
	return fmt.Errorf("start %s: %s", path, msg)
}

// watch reads the supervisor's reports until it exits. first receives the
// first of "started PID" or "failed MSG".
func (c *Child) watch(l Launcher, st *os.File, first chan<- string) {
	sent, reported := false, false
	sc := bufio.NewScanner(st)
	for sc.Scan() {
		verb, arg, _ := strings.Cut(sc.Text(), " ")
		switch verb {
		case "started", "failed":
			if !sent {
				first <- verb + " " + arg
				sent = true
			}
		case "exited":
			if n, err := strconv.Atoi(arg); err == nil {
				c.code = n
			}
		case "killedby":
			if n, err := strconv.Atoi(arg); err == nil {
				c.killedBy = syscall.Signal(n)
			}
		case "survivor":
			p, msg, _ := strings.Cut(arg, " ")
			if n, err := strconv.Atoi(p); err == nil {
				c.survivors = append(c.survivors, Survivor{PID: n, Err: errors.New(msg)})
			}
		case "signalled", "delivered":
			if n, err := strconv.Atoi(arg); err == nil {
				select {
				case c.deliveries <- Delivery{Signal: syscall.Signal(n), Passed: verb == "signalled"}:
				default: // a reader that does not keep up loses news, not signals
				}
			}
		case "expired":
			c.expired = true
		case "done":
			reported, c.killed = true, arg == "1"
		}
	}
	_ = st.Close()
	_ = c.sup.Wait()
	supervisors.remove(c.sup.Process.Pid)
	if !reported {
		c.supervisorErr = fmt.Errorf("the claim supervisor (pid %d) died before the command's tree was stopped: %s",
			c.sup.Process.Pid, c.sup.ProcessState)
		if c.code < 0 {
			c.code = ExitCode(c.sup.ProcessState)
		}
		if l.Subreaper && sent {
			// CMD's first process died with the supervisor (its
			// parent-death signal); what it left was re-parented to us.
			survivors, err := killTree(os.Getpid(), supervisors.has, reapOrphans)
			if err != nil {
				c.supervisorErr = fmt.Errorf("%w; walking /proc: %v", c.supervisorErr, err)
			}
			c.survivors = append(c.survivors, survivors...)
		}
	}
	if !sent {
		first <- "failed the claim supervisor exited before it started the command: " + c.sup.ProcessState.String()
	}
	c.ctlMu.Lock()
	_ = c.ctl.Close()
	c.ctlMu.Unlock()
	close(c.done)
}

// tell sends one control line to the supervisor. A supervisor that is gone
// has nothing left to act on, so a failed write is not an error.
func (c *Child) tell(format string, a ...any) {
	c.ctlMu.Lock()
	defer c.ctlMu.Unlock()
	select {
	case <-c.done:
		return
	default:
	}
	_, _ = fmt.Fprintf(c.ctl, format+"\n", a...)
}

// Pid is the process id of the command's first process.
func (c *Child) Pid() int { return c.pid }

// Done is closed once the command's first process has exited and every
// process left in its tree is gone (or reported in Survivors).
func (c *Child) Done() <-chan struct{} { return c.done }

// Signal passes sig, which the caller received, on to the command's first
// process — unless the command had it from the kernel already: the signal
// was sent to the caller's process group (a terminal's ^C, a kill of the
// job) or to every process of its cgroup (systemd stopping a unit), which
// the command shares. Each sig is delivered to the command once
// (DESIGN.md#one-signal); Deliveries says which way. The decision takes
// a moment (settleFor and a round trip to the witness), so Signal returns
// at once. Signalling an exited command is not an error.
func (c *Child) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("signal %v: not a syscall.Signal", sig)
	}
	c.tell("signal %d", int(s))
	return nil
}

// Delivery is what became of a signal given to Signal.
type Delivery struct {
	Signal syscall.Signal
	// Passed is true when the supervisor sent it to the command, false
	// when the command had it from the kernel already.
	Passed bool
}

// Deliveries receives what became of each signal given to Signal, in
// order, for a reader that keeps up (it holds 16; news beyond that is
// dropped, the signals are not).
func (c *Child) Deliveries() <-chan Delivery { return c.deliveries }

// Wait blocks until Done (or ctx ends) and returns the command's exit code:
// the status for a normal exit, 128+signal for a command killed by a signal
// (the shell's convention).
func (c *Child) Wait(ctx context.Context) (int, error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		return -1, ctx.Err()
	}
	return c.code, nil
}

// Terminate asks the command to stop: SIGTERM to its first process and, if
// that has not exited within grace, SIGKILL; then, either way, SIGKILL to
// every process left in its tree (systemd's KillMode=mixed). It returns once
// the tree is gone, reporting whether the first process had to be killed.
// It is how a lost claim is enforced: the fenced writes would refuse the
// command anyway, stopping it just saves the work (DESIGN.md#claim-lost).
func (c *Child) Terminate(grace time.Duration) (killed bool) {
	c.tell("terminate %d", max(grace, 0).Nanoseconds())
	<-c.done
	return c.killed
}

// KillBy hands the supervisor the instant by which the command's tree must
// be gone unless a later KillBy moves it: the supervisor sends SIGTERM to
// the command's first process grace before it and, at it, SIGKILL to the
// first process and then to the whole tree. Each call replaces the last,
// later or earlier. It is how a claim's trusted deadline is kept by a
// process that is not the claimer, so it holds while the claimer cannot
// run (stopped, starved): the claimer hands over every deadline it
// confirms (DESIGN.md#process-tree). t must carry a monotonic clock
// reading (time.Now() and what is derived from it do): it crosses to the
// supervisor as a reading of CLOCK_MONOTONIC, the clock Go's monotonic
// readings come from and the same in both processes, so no transit time
// stretches it.
func (c *Child) KillBy(t time.Time, grace time.Duration) {
	c.tell("killby %d %d", monoOf(t), max(grace, 0).Nanoseconds())
}

// Expired reports whether the supervisor stopped the command because an
// instant given to KillBy passed with no later one given. Valid once Done
// is closed.
func (c *Child) Expired() bool {
	<-c.done
	return c.expired
}

// KilledBy is the signal that ended the command's first process, 0 when it
// exited (with whatever status, 128+N included: a status is the command's
// own verdict, a signal is not). Valid once Done is closed.
func (c *Child) KilledBy() syscall.Signal {
	<-c.done
	return c.killedBy
}

// Survivors lists the processes of the command's tree that refused to be
// killed; empty in the normal case. Valid once Done is closed.
func (c *Child) Survivors() []Survivor {
	<-c.done
	return slices.Clone(c.survivors)
}

// SupervisorErr is non-nil when the supervisor died before it reported that
// the command's tree was gone (someone killed it). Valid once Done is
// closed.
func (c *Child) SupervisorErr() error {
	<-c.done
	return c.supervisorErr
}

// ExitCode maps a process state to a shell-style exit code.
func ExitCode(st *os.ProcessState) int {
	if st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok {
		return exitCode(ws)
	}
	return st.ExitCode()
}

// supervisors are the live supervisor processes this process started: the
// one kind of child a Subreaper sweep leaves alone.
var supervisors = pidSet{m: map[int]bool{}}

type pidSet struct {
	mu sync.Mutex
	m  map[int]bool
}

func (s *pidSet) add(pid int)    { s.mu.Lock(); s.m[pid] = true; s.mu.Unlock() }
func (s *pidSet) remove(pid int) { s.mu.Lock(); delete(s.m, pid); s.mu.Unlock() }
func (s *pidSet) has(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[pid]
}

// reapOrphans collects the zombies of this process's children other than
// its supervisors (whose exec.Cmd waits for them): the orphans a Subreaper
// sweep killed. It waits for each by pid, never for any child, so it
// cannot take another exec.Cmd's exit status. It returns how many it
// collected.
//
// It reads this process's children lists, not every process of the host:
// killTree calls it between its walk and its kills, and a collection as
// long as the host's process table lets a tree that forks and exits in a
// loop hop past every pid the walk listed.
func reapOrphans() int {
	self := os.Getpid()
	var pids []int
	if childrenLists() {
		kids, err := childrenOf(self)
		if err != nil {
			return 0
		}
		for _, c := range kids {
			pids = append(pids, c.pid)
		}
	} else {
		var err error
		if pids, err = allPIDs(); err != nil {
			return 0
		}
	}
	n := 0
	for _, pid := range pids {
		if supervisors.has(pid) {
			continue
		}
		if st, err := pidprobe.ReadStat(pid); err == nil && st.PPID == self && st.Zombie() {
			var ws syscall.WaitStatus
			if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid {
				n++
			}
		}
	}
	return n
}
