package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The supervisor is this program's own binary, re-executed by Start with a
// hidden subcommand that calls Serve (Nomad's executor does the same). It
// sits between the claimer and CMD:
//
//	leasekeeper claim (the claimer: holds the claim, its pid is the marker)
//	└── leasekeeper <hidden subcommand> (the supervisor: child subreaper)
//	    ├── lk-signal-witness <hidden subcommand> --witness (see witness.go)
//	    └── CMD, and everything CMD starts, however it detaches
//
// It exists because the claimer cannot clean up after itself when it is
// killed with SIGKILL, and a parent-death signal reaches only CMD's first
// process: `sh -c 'work; true'` forks, sh dies, and work runs on under
// pid 1. The supervisor is the subreaper of CMD's whole tree, so nothing in
// it can leave it, and it outlives its claimer for as long as it takes to
// kill that tree.
//
// It talks to the claimer over two pipes, passed as fds 3 and 4 (the
// protocol is private to this package: both ends are the same build):
//
//	claimer → supervisor (fd 3):  "signal N" | "terminate GRACE_NS" |
//	                              "killby MONO_NS GRACE_NS"
//	supervisor → claimer (fd 4):  "started PID" | "failed MSG" |
//	                              "signalled N" | "delivered N" |
//	                              "exited CODE" | "killedby N" |
//	                              "survivor PID MSG" |
//	                              "expired" | "done KILLED"
//
// "signal N" asks for N to be passed on to CMD; the supervisor answers
// "signalled N" when it did, "delivered N" when CMD had it from the kernel
// already (see witness.go).
//
// killby carries a CLOCK_MONOTONIC reading (see Child.KillBy): the
// instant by which CMD's tree must be gone unless a later killby moves it.
// The first one is in the pipe before the supervisor starts
// (Launcher.KillBy).
//
// End of file on fd 3 means the claimer is gone, whatever killed it: the
// kernel closes a dead process's descriptors, so no signal, thread or
// timing is involved.
const (
	ctlFD    = 3
	statusFD = 4
)

// Serve is the supervisor's main. args are what Start put after the
// launcher's own arguments: "--pgid", the claimer's process group, "--",
// then CMD's path and argv. It returns the supervisor's exit code: 0 once
// it has reported and the tree is gone, 2 for a bad invocation (it is not
// meant to be run by hand).
func Serve(args []string) int {
	if len(args) == 1 && args[0] == witnessArg {
		return serveWitness()
	}
	pgid, path, argv, err := parseServeArgs(args)
	ctl, status := os.NewFile(ctlFD, "control"), os.NewFile(statusFD, "status")
	if err != nil || ctl == nil || status == nil {
		fmt.Fprintf(os.Stderr, "leasekeeper: the claim supervisor is started by `leasekeeper claim`, not by hand: %v\n", err)
		return 2
	}
	// CMD must not inherit our ends of the pipes: a copy of the status
	// pipe in CMD would keep the claimer reading after we are gone.
	for _, fd := range []int{ctlFD, statusFD} {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			fmt.Fprintf(os.Stderr, "leasekeeper: the claim supervisor is started by `leasekeeper claim`, not by hand: fd %d: %v\n", fd, err)
			return 2
		}
		unix.CloseOnExec(fd)
	}
	// The argv this process was started with, up to Serve's own
	// arguments: how to start the witness (see serveWitness).
	var prefix []string
	if n := len(os.Args) - len(args); n > 0 {
		prefix = os.Args[:n]
	}
	s := &supervisor{status: status, self: os.Getpid(), prefix: prefix}
	killed := s.run(ctl, pgid, path, argv)
	s.report("done %d", boolInt(killed))
	return 0
}

func parseServeArgs(args []string) (pgid int, path string, argv []string, err error) {
	if len(args) < 5 || args[0] != "--pgid" || args[2] != "--" {
		return 0, "", nil, fmt.Errorf("want --pgid N -- PATH ARGV0 [ARGS...], got %q", args)
	}
	pgid, err = strconv.Atoi(args[1])
	if err != nil || pgid < 0 {
		return 0, "", nil, fmt.Errorf("--pgid %q", args[1])
	}
	return pgid, args[3], args[4:], nil
}

type supervisor struct {
	status *os.File
	self   int
	prefix []string // this process's argv up to Serve's arguments
	main   int      // CMD's first process, our child
	fw     *forwarding
	// mainStatus is set once main is reaped.
	mainDone   bool
	mainStatus syscall.WaitStatus
	// expiredSent: "expired" was reported.
	expiredSent bool
}

func (s *supervisor) report(format string, a ...any) {
	// A write that fails means the claimer is gone; the control pipe's EOF
	// tells the loop that too.
	_, _ = fmt.Fprintf(s.status, format+"\n", a...)
}

// failed reports that CMD could not be started. The exec's errno travels
// as its number ahead of the message, so the claimer can tell "not found"
// from "cannot execute" (exit 127 and 126, as a shell has them).
func (s *supervisor) failed(err error) {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		s.report("failed errno %d %s", int(errno), oneLine(err.Error()))
		return
	}
	s.report("failed %s", oneLine(err.Error()))
}

// run starts CMD and supervises it until its tree is gone. It reports
// whether CMD's first process had to be killed after a terminate's grace.
func (s *supervisor) run(ctl *os.File, pgid int, path string, argv []string) (killed bool) {
	// Signals aimed at the terminal's foreground group or at a whole
	// service (SIGINT, SIGTERM, SIGHUP, SIGQUIT) are for CMD and the
	// claimer; the supervisor stops only when its claimer tells it or dies.
	// They are caught, not ignored: an ignored disposition would be
	// inherited by CMD across exec.
	stray := make(chan os.Signal, 8)
	signal.Notify(stray, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	go func() {
		for range stray {
		}
	}()
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)

	if err := becomeSubreaper(); err != nil {
		s.report("failed %s", oneLine(err.Error()))
		return false
	}
	fork := newForker()
	// The witness first: a signal to the claimer's group that it misses
	// could reach CMD and be passed on again; one it sees in the moment
	// before CMD exists is passed on no more (DESIGN.md#one-signal).
	wit, err := startWitness(fork, s.prefix, pgid)
	if err != nil {
		fmt.Fprintf(os.Stderr, "leasekeeper: %v; a signal sent to claim's process group may reach the command twice\n", err)
	}
	s.fw = newForwarding(wit, pgid)
	pid, err := s.startMain(fork, pgid, path, argv)
	if err != nil {
		s.failed(err)
		return false
	}
	s.main = pid
	s.report("started %d", pid)

	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			cmds <- sc.Text()
		}
	}()

	killed = s.loop(cmds, chld)
	// CMD's first process has exited (or was killed with its claimer):
	// whatever it left running dies now, before the claimer routes the card
	// or the next holder may start.
	survivors, err := killTree(s.self, nil, s.reap)
	if err != nil {
		s.report("survivor 0 %s", oneLine("walking /proc: "+err.Error()))
	}
	for _, sv := range survivors {
		s.report("survivor %d %s", sv.PID, oneLine(sv.Err.Error()))
	}
	s.reap()
	if s.mainDone {
		if s.mainStatus.Signaled() {
			// Which signal ended CMD, beside the shell-style code that
			// cannot tell it from an exit with 128+N (Child.KilledBy).
			s.report("killedby %d", int(s.mainStatus.Signal()))
		}
		s.report("exited %d", exitCode(s.mainStatus))
	}
	return killed
}

// forker forks from one goroutine locked to its OS thread, which it keeps
// for good: a child's parent-death signal (SIGKILL, in case the supervisor
// itself is killed) follows the thread that forked it, not the process,
// and the Go runtime retires threads at will.
type forker struct{ reqs chan forkReq }

type forkReq struct {
	path string
	argv []string
	attr *syscall.ProcAttr
	done chan forkResult
}

type forkResult struct {
	pid int
	err error
}

func newForker() *forker {
	f := &forker{reqs: make(chan forkReq)}
	go func() {
		runtime.LockOSThread()
		for r := range f.reqs { // never closed: the thread stays
			pid, err := syscall.ForkExec(r.path, r.argv, r.attr)
			r.done <- forkResult{pid, err}
		}
	}()
	return f
}

// exec forks and execs from the forker's thread.
func (f *forker) exec(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	done := make(chan forkResult, 1)
	f.reqs <- forkReq{path: path, argv: argv, attr: attr, done: done}
	r := <-done
	return r.pid, r.err
}

// startMain starts CMD from the forker's thread (for its parent-death
// signal). CMD joins the claimer's process group, so the terminal's job
// control treats it as the claimer's job; the supervisor keeps a group of
// its own (see Start).
func (s *supervisor) startMain(fork *forker, pgid int, path string, argv []string) (int, error) {
	return fork.exec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{
			Pdeathsig: syscall.SIGKILL,
			Setpgid:   true,
			Pgid:      pgid,
		},
	})
}

// loop runs until CMD's first process has exited, or the claimer asked for
// it to stop and it did (or was killed), or the claimer is gone, or the
// deadline the claimer last handed over passed. It reports whether SIGKILL
// was needed after a terminate's grace or at that deadline.
func (s *supervisor) loop(cmds <-chan string, chld <-chan os.Signal) (killed bool) {
	var (
		graceC <-chan time.Time
		// The deadline the claimer last handed over (killby): SIGTERM at
		// termAt, SIGKILL at killAt. expiry fires at the next of the two
		// still to come.
		termAt, killAt time.Time
		termSent       bool
		expiry         = time.NewTimer(time.Hour)
		expiryC        <-chan time.Time
	)
	expiry.Stop()
	defer expiry.Stop()
	// enforce acts on the handed-over deadline, and arms the timer for
	// what is left of it.
	enforce := func() {
		expiryC = nil
		if killAt.IsZero() {
			return
		}
		now := time.Now()
		if !termSent && !now.Before(termAt) {
			// The claimer did not confirm a later deadline in time: it is
			// stopped, starved or gone quiet, and cannot stop CMD itself
			// (DESIGN.md#process-tree).
			termSent = true
			s.expired()
			_ = unix.Kill(s.main, unix.SIGTERM)
		}
		if !now.Before(killAt) {
			_ = unix.Kill(s.main, unix.SIGKILL)
			killed, killAt = true, time.Time{}
			return
		}
		next := killAt
		if !termSent {
			next = termAt
		}
		expiry.Reset(time.Until(next))
		expiryC = expiry.C
	}
	for {
		s.reap()
		if s.mainDone {
			return killed
		}
		select {
		case <-chld:
		case <-graceC:
			// CMD ignored SIGTERM for the whole grace: kill it. The tree
			// walk that follows kills the rest.
			_ = unix.Kill(s.main, unix.SIGKILL)
			killed, graceC = true, nil
		case <-expiryC:
			enforce()
		case <-s.fw.stepC:
			s.fw.tick(s)
		case line, ok := <-s.fw.lines():
			s.fw.witnessed(s, line, ok)
		case line, ok := <-cmds:
			if !ok {
				// The claimer is gone: nothing holds the claim any more,
				// so nothing of CMD may run on.
				_ = unix.Kill(s.main, unix.SIGKILL)
				return killed
			}
			verb, arg, _ := strings.Cut(line, " ")
			var nums []int64
			for _, f := range strings.Fields(arg) {
				n, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					nums = nil
					break
				}
				nums = append(nums, n)
			}
			switch {
			case verb == "signal" && len(nums) == 1:
				// Passed on unless CMD had it from the kernel already
				// (DESIGN.md#one-signal).
				s.fw.ask(unix.Signal(nums[0]))
			case verb == "terminate" && len(nums) == 1:
				_ = unix.Kill(s.main, unix.SIGTERM)
				if graceC == nil {
					graceC = time.After(time.Duration(max(nums[0], 0)))
				}
			case verb == "killby" && len(nums) == 2:
				killAt = timeOfMono(nums[0])
				termAt = killAt.Add(-time.Duration(max(nums[1], 0)))
				expiry.Stop()
				enforce()
			}
		}
	}
}

// expired tells the claimer, once, that CMD is being stopped because the
// deadline it handed over passed.
func (s *supervisor) expired() {
	if !s.expiredSent {
		s.expiredSent = true
		s.report("expired")
	}
}

// reap collects the exit status of every child that has exited: CMD's
// first process, and the orphans of its tree that were re-parented to us.
// It returns how many it collected.
func (s *supervisor) reap() int {
	n := 0
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return n
		}
		n++
		switch {
		case pid == s.main:
			s.mainDone, s.mainStatus = true, ws
		case s.fw != nil && s.fw.wit != nil && pid == s.fw.wit.pid:
			s.fw.gone()
		}
	}
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
