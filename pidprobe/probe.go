package pidprobe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strings"
	"sync"

	"github.com/shirou/gopsutil/v4/process"
)

// Liveness is a probe's verdict on one (pid, identity) pair.
type Liveness int

const (
	// Unknown: the probe could prove neither life nor death. Callers conserve.
	Unknown Liveness = iota
	// Alive: the process exists and, when its start time was known, it is
	// the same process.
	Alive
	// Dead: provably gone, or the pid now names a different process.
	Dead
)

// String names the verdict for logs and status output.
func (l Liveness) String() string {
	switch l {
	case Alive:
		return "alive"
	case Dead:
		return "dead"
	default:
		return "unknown"
	}
}

// Prober is what the heartbeat and the watchdog depend on, so tests of those
// packages can inject a fake (see package pidprobetest) while the agent uses
// Local.
type Prober interface {
	// Probe judges pid against the identity recorded when the claim was
	// taken (see Compare). A zero Identity means the start is unknown: an
	// existing pid is then Alive, because reuse cannot be proved.
	Probe(ctx context.Context, pid int, rec Identity) Liveness
	// Identify returns the identity of the process pid names now, the
	// value to record beside a marker and pass back to Probe.
	// ErrNoProcess when no process has the pid.
	Identify(ctx context.Context, pid int) (Identity, error)
}

// Local probes processes of this host (of this pid namespace) through
// /proc and, where the kernel has them (Linux 5.3 and later), pidfds. The
// zero value is ready to use.
type Local struct {
	bootOnce sync.Once
	boot     string // this boot's id; "" if unreadable

	selfOnce  sync.Once
	selfStart int64 // this process's legacy start millis as first read; 0 if unreadable
}

var _ Prober = (*Local)(nil)

// New returns a Local prober.
func New() *Local { return &Local{} }

// Identify implements Prober.
func (l *Local) Identify(ctx context.Context, pid int) (Identity, error) {
	if pid <= 0 || pid > math.MaxInt32 {
		return Identity{}, fmt.Errorf("pid %d: %w", pid, ErrInvalidPID)
	}
	id, _, err := l.identify(ctx, pid, true)
	return id, err
}

// identify reads pid's identity and its stat in one go. The reads are bound
// to one process by a pidfd opened first: if the process it names is still
// there after the reads, the pid was never freed in between, so everything
// read is that process's. ErrNoProcess means the process pid named when
// asked is gone (another may hold the pid by now). withMillis also reads the
// legacy start millis (gopsutil's arithmetic, so a legacy record compares
// like with like).
func (l *Local) identify(ctx context.Context, pid int, withMillis bool) (Identity, ProcStat, error) {
	fd, err := openPidfd(pid)
	if err != nil {
		return Identity{}, ProcStat{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	defer closePidfd(fd)
	st, err := ReadStat(pid)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// /proc may hide a process that exists (hidepid): only the
			// kernel's own answer makes it ErrNoProcess.
			if l.goneNow(pid, fd) {
				return Identity{}, ProcStat{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
			}
			return Identity{}, ProcStat{}, fmt.Errorf("pid %d: exists but its /proc entry is hidden: %w", pid, err)
		}
		return Identity{}, ProcStat{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	id := Identity{BootID: l.bootID(), StartTicks: st.StartTicks, Inode: pidfsInode(fd)}
	if withMillis {
		p := &process.Process{Pid: int32(pid)}
		if ms, err := p.CreateTimeWithContext(ctx); err == nil {
			id.StartMillis = ms
		}
	}
	if fd >= 0 && l.goneNow(pid, fd) {
		return Identity{}, ProcStat{}, fmt.Errorf("pid %d: exited while its identity was read: %w", pid, ErrNoProcess)
	}
	return id, st, nil
}

// goneNow asks the kernel whether the process is gone: through the pidfd
// when there is one (the process it was opened on), else signal 0 on the
// pid.
func (l *Local) goneNow(pid, fd int) bool {
	if fd >= 0 {
		alive, err := pidfdAlive(fd)
		return err == nil && !alive
	}
	gone, err := signalSaysGone(pid)
	return err == nil && gone
}

// Probe implements Prober: existence first (a missing pid is the common
// dead case), then the identity (pid reuse), then the zombie state (exited,
// not reaped), all from one read of /proc/PID/stat.
func (l *Local) Probe(ctx context.Context, pid int, rec Identity) Liveness {
	if pid <= 0 || pid > math.MaxInt32 {
		// Pid 0 is an invisible peer (foreign pid namespace): we cannot
		// see it, which proves nothing about it.
		return Unknown
	}
	legacy := rec.Known() && !rec.Exact()
	if legacy {
		l.selfOnce.Do(l.readSelf)
	}
	cur, st, err := l.identify(ctx, pid, legacy)
	switch {
	case errors.Is(err, ErrNoProcess):
		return Dead
	case err != nil:
		return Unknown
	}
	switch Compare(rec, cur) {
	case MatchOther:
		if legacy && l.clockStepped(ctx) {
			// Every legacy start time moved with the wall clock, so
			// this mismatch may be the step, not a reuse. Exact
			// identities do not depend on the wall clock.
			return Unknown
		}
		return Dead
	case MatchUnknown:
		return Unknown
	}
	if st.Zombie() {
		// A zombie has exited and can write nothing more: dead for our
		// purposes, though its pid still exists until the parent reaps it.
		// A thread-group leader that exited while its other threads run
		// also shows as a zombie; it still counts its live threads, so
		// only a single-threaded zombie is proved dead.
		if st.NumThreads <= 1 {
			return Dead
		}
		return Unknown
	}
	return Alive
}

func (l *Local) bootID() string {
	l.bootOnce.Do(func() { l.boot, _ = BootID() })
	return l.boot
}

func (l *Local) readSelf() {
	p := &process.Process{Pid: int32(os.Getpid())}
	if ms, err := p.CreateTime(); err == nil {
		l.selfStart = ms
	}
}

// clockStepped reports whether this process's own legacy start millis, as
// gopsutil reads it now, moved beyond LegacyTolerance since it was first
// read. The kernel's boot time is derived from the wall clock, so a
// wall-clock step shifts every such start time at once; a legacy record
// made before the step can then no longer be compared with one read after
// it. A step that happened before this prober first looked goes unseen;
// that is the remaining blind spot of legacy records.
func (l *Local) clockStepped(ctx context.Context) bool {
	if l.selfStart == 0 {
		return true // no reference: we cannot rule a step out
	}
	p := &process.Process{Pid: int32(os.Getpid())}
	now, err := p.CreateTimeWithContext(ctx)
	if err != nil {
		return true
	}
	return abs(now-l.selfStart) > LegacyTolerance.Milliseconds()
}

// Hostname is the host part of the markers this agent mints and of the
// "same host" test on others' markers (board.WorkerMarker(Hostname(), pid)).
func Hostname() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("hostname: %w", err)
	}
	return h, nil
}

// BootID returns the kernel's boot id, which changes at every boot. A pid
// and start time recorded under another boot id name nothing on this boot,
// which a caller can use to recognise a marker left before a reboot.
func BootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
