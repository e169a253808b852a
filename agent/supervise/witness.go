package supervise

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A signal sent to the claimer's process group (a terminal's ^C, a kill of
// the job) or to every process of its cgroup (systemd stopping a unit)
// reaches CMD from the kernel as it reaches the claimer; the claimer must
// not pass that one on, or CMD gets it twice, and many programs read a
// second ^C as "abort now, skip the cleanup". A signal sent to the claimer
// alone must be passed on. Nothing in a plain signal says which it was, and
// Go offers no siginfo (its runtime keeps SIGINT and SIGTERM unblocked in
// every thread, so no signalfd either) — and even siginfo could not tell
// kill(pid) from kill(-pgid).
//
// So a witness stands beside CMD: this binary again, in the claimer's
// process group and cgroup like CMD, that catches SIGINT, SIGTERM, SIGHUP
// and SIGQUIT and reports each to the supervisor over a pipe. When the
// claimer asks to pass a signal on, the supervisor gives a sender that
// signals process by process (systemd) settleFor to reach the witness,
// then makes sure the witness has reported everything sent to it before
// that instant (the barrier below), and passes the signal on only if the
// witness did not get it too, or CMD has left the claimer's process group
// since. The witness is a process of its own, not the supervisor, so that a
// SIGKILL of the job still leaves the supervisor alive to kill the tree.
//
// The barrier: the supervisor sends the witness barrierSignal and waits for
// its report. The kernel delivers pending signals lowest number first, and
// Go's runtime hands a batch of caught signals over lowest number first,
// so a SIGINT or SIGTERM generated for the witness before the barrier was
// sent is reported before it.

const (
	// witnessArg, after the launcher's arguments, runs Serve as the witness.
	witnessArg = "--witness"
	// witnessName is the witness's argv[0].
	witnessName = "lk-signal-witness"
	// witnessFD is the witness's end of its report pipe.
	witnessFD = 3
	// barrierSignal is a real-time signal: above every signal the witness
	// reports, and no one else's business.
	barrierSignal = unix.Signal(40)
	// settleFor is how long a signal the claimer asks to pass on waits for
	// a sender that signals a cgroup process by process to reach the
	// witness too.
	settleFor = 100 * time.Millisecond
	// barrierWait bounds the wait for the witness's barrier report; a
	// witness that does not answer (stopped alone, gone) has seen nothing.
	barrierWait = time.Second
	// witnessMemory is how long before the claimer's request a signal the
	// witness saw still counts as the same delivery.
	witnessMemory = 5 * time.Second
	// witnessStart bounds the wait for the witness to be ready.
	witnessStart = 10 * time.Second
)

// serveWitness is the witness's main: it reports "ready", then "sig N" for
// every SIGINT, SIGTERM, SIGHUP or SIGQUIT it receives and "barrier" for
// every barrierSignal, until its supervisor is gone (its parent-death
// signal, or a failed report) or kills it.
func serveWitness() int {
	out := os.NewFile(witnessFD, "witness")
	if out == nil {
		return 2
	}
	if _, err := unix.FcntlInt(uintptr(witnessFD), unix.F_GETFD, 0); err != nil {
		fmt.Fprintf(os.Stderr, "leasekeeper: the claim supervisor's witness is started by the supervisor, not by hand: fd %d: %v\n", witnessFD, err)
		return 2
	}
	c := make(chan os.Signal, 64)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, barrierSignal)
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return 0
	}
	for s := range c {
		line := "barrier"
		if s != barrierSignal {
			line = fmt.Sprintf("sig %d", s.(syscall.Signal))
		}
		if _, err := fmt.Fprintln(out, line); err != nil {
			return 0 // the supervisor is gone
		}
	}
	return 0
}

// witness is the supervisor's view of its witness process.
type witness struct {
	pid   int
	lines <-chan string // closed at the end of the witness's reports
}

// startWitness starts the witness in process group pgid and waits until
// it is ready. prefix is the argv the supervisor itself was started with,
// up to Serve's own arguments.
func startWitness(fork *forker, prefix []string, pgid int) (*witness, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		_, _ = r.Close(), w.Close()
		return nil, err
	}
	argv := append(append([]string(nil), prefix...), witnessArg)
	// A name of its own: a pattern an operator aims at claim (pkill -f
	// 'leasekeeper claim') must not reach the witness, or the signal it
	// sends claim would look delivered to the command already.
	if len(argv) > 0 {
		argv[0] = witnessName
	}
	// /proc/self/exe is this very binary even when its file was replaced
	// or removed since.
	pid, err := fork.exec("/proc/self/exe", argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{null.Fd(), null.Fd(), 2, w.Fd()},
		Sys: &syscall.SysProcAttr{
			Pdeathsig: syscall.SIGKILL,
			Setpgid:   true,
			Pgid:      pgid,
		},
	})
	_, _ = null.Close(), w.Close()
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("starting the signal witness: %w", err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case l, ok := <-lines:
		if ok && l == "ready" {
			return &witness{pid: pid, lines: lines}, nil
		}
	case <-time.After(witnessStart):
	}
	_ = unix.Kill(pid, unix.SIGKILL)
	return nil, fmt.Errorf("the signal witness (pid %d) did not start", pid)
}

// forwarding is the supervisor's state for the signals the claimer asks it
// to pass on: they are decided one at a time, in the order asked.
type forwarding struct {
	wit   *witness // nil once the witness is gone (or never started)
	pgid  int      // the claimer's process group
	queue []asked
	// seen holds, per signal, when the witness reported each copy it got
	// that no decision has accounted for yet.
	seen map[unix.Signal][]time.Time
	// The head of the queue is settling until step fires, then waiting
	// for the barrier sent at barrierSent (zero: not sent).
	step        *time.Timer
	stepC       <-chan time.Time
	barrierSent time.Time
}

type asked struct {
	sig unix.Signal
	at  time.Time
}

func newForwarding(wit *witness, pgid int) *forwarding {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &forwarding{wit: wit, pgid: pgid, seen: map[unix.Signal][]time.Time{}, step: t}
}

// lines is the witness's report channel, nil once it is gone.
func (f *forwarding) lines() <-chan string {
	if f.wit == nil {
		return nil
	}
	return f.wit.lines
}

// ask queues a signal the claimer asks to pass on.
func (f *forwarding) ask(sig unix.Signal) {
	f.queue = append(f.queue, asked{sig: sig, at: time.Now()})
	if len(f.queue) == 1 {
		f.settle()
	}
}

func (f *forwarding) settle() {
	f.barrierSent = time.Time{}
	f.step.Reset(time.Until(f.queue[0].at.Add(settleFor)))
	f.stepC = f.step.C
}

// tick is the step timer firing: the head has settled (send the barrier),
// or its barrier went unanswered (decide without it).
func (f *forwarding) tick(s *supervisor) {
	f.stepC = nil
	if f.wit != nil && f.barrierSent.IsZero() {
		f.barrierSent = time.Now()
		if err := unix.Kill(f.wit.pid, barrierSignal); err == nil {
			f.step.Reset(barrierWait)
			f.stepC = f.step.C
			return
		}
	}
	f.decide(s)
}

// witnessed takes one line of the witness's report; ok is false at its
// end.
func (f *forwarding) witnessed(s *supervisor, line string, ok bool) {
	if !ok {
		f.wit = nil
		if len(f.queue) > 0 && !f.barrierSent.IsZero() {
			f.step.Stop()
			f.decide(s)
		}
		return
	}
	verb, arg, _ := strings.Cut(line, " ")
	switch verb {
	case "sig":
		if n, err := strconv.Atoi(arg); err == nil {
			f.seen[unix.Signal(n)] = append(f.seen[unix.Signal(n)], time.Now())
		}
	case "barrier":
		if len(f.queue) > 0 && !f.barrierSent.IsZero() {
			f.step.Stop()
			f.decide(s)
		}
	}
}

// gone forgets the witness: its pid was reaped and may name another
// process now.
func (f *forwarding) gone() { f.wit = nil }

// decide passes the head of the queue on to CMD unless CMD had it from the
// kernel already, tells the claimer which, and starts on the next.
func (f *forwarding) decide(s *supervisor) {
	f.stepC = nil
	head := f.queue[0]
	f.queue = f.queue[1:]
	seen := f.seen[head.sig]
	for len(seen) > 0 && seen[0].Before(head.at.Add(-witnessMemory)) {
		seen = seen[1:]
	}
	// A signal the witness got reached CMD too only if CMD is still in
	// the claimer's process group; when it is in the same cgroup but
	// moved to a group of its own, a cgroup-wide signal is passed on
	// (DESIGN.md#one-signal).
	if pgid, err := unix.Getpgid(s.main); len(seen) > 0 && err == nil && pgid == f.pgid {
		f.seen[head.sig] = seen[1:]
		s.report("delivered %d", int(head.sig))
	} else {
		f.seen[head.sig] = seen
		// main is our child: until we reap it its pid cannot be reused,
		// so this signal reaches CMD or nobody.
		_ = unix.Kill(s.main, head.sig)
		s.report("signalled %d", int(head.sig))
	}
	if len(f.queue) > 0 {
		f.settle()
	}
}
