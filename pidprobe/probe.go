package pidprobe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/shirou/gopsutil/v4/process"
)

// Liveness is a probe's verdict on one (pid, start time) pair.
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
	// Probe judges pid against the start time recorded when the claim was
	// taken. startMillis == 0 means the start time is unknown: an existing
	// pid is then Alive, because reuse cannot be proved.
	Probe(ctx context.Context, pid int, startMillis int64) Liveness
	// StartTime returns the start time of pid in milliseconds since the
	// epoch, the value to record beside a marker and pass back to Probe.
	// ErrNoProcess when no process has the pid.
	StartTime(ctx context.Context, pid int) (int64, error)
}

// DefaultTolerance is how far apart two readings of one process's start
// time may be and still name the same process. gopsutil derives the start
// time from the boot time, and inside a container it computes the boot time
// as now − uptime truncated to whole seconds, so two readings of the same
// process differ by up to a second. A reused pid that started within two
// seconds of the original is not a case worth a false "dead": declaring a
// live worker dead expires its lease under it, while the opposite error only
// costs waiting out the TTL.
const DefaultTolerance = 2 * time.Second

// Local probes processes of this host (of this pid namespace) through
// gopsutil. The zero value is ready to use with DefaultTolerance.
type Local struct {
	// Tolerance is the start-time slack described at DefaultTolerance;
	// zero means DefaultTolerance.
	Tolerance time.Duration

	selfOnce  sync.Once
	selfStart int64 // this process's start time as first read; 0 if unreadable
}

var _ Prober = (*Local)(nil)

// New returns a Local prober with DefaultTolerance.
func New() *Local { return &Local{} }

func (l *Local) tolerance() int64 {
	if l.Tolerance > 0 {
		return l.Tolerance.Milliseconds()
	}
	return DefaultTolerance.Milliseconds()
}

// StartTime implements Prober.
func (l *Local) StartTime(ctx context.Context, pid int) (int64, error) {
	if pid <= 0 || pid > math.MaxInt32 {
		return 0, fmt.Errorf("pid %d: %w", pid, ErrInvalidPID)
	}
	p, err := process.NewProcessWithContext(ctx, int32(pid))
	if errors.Is(err, process.ErrorProcessNotRunning) {
		// /proc may hide a process that exists (hidepid): only the
		// kernel's own answer makes it ErrNoProcess.
		if gone, serr := signalSaysGone(pid); serr != nil || !gone {
			return 0, fmt.Errorf("pid %d: exists but its /proc entry is hidden: %w", pid, err)
		}
		return 0, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	ms, err := p.CreateTimeWithContext(ctx)
	if err != nil {
		if gone, _ := l.gone(ctx, pid); gone {
			return 0, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return 0, fmt.Errorf("pid %d: start time: %w", pid, err)
	}
	return ms, nil
}

// Probe implements Prober. The order of the checks matters: existence first
// (a missing pid is the common dead case and needs no /proc parsing), then
// the start time (pid reuse), then the zombie state (exited, not reaped).
func (l *Local) Probe(ctx context.Context, pid int, startMillis int64) Liveness {
	if pid <= 0 || pid > math.MaxInt32 {
		// Pid 0 is an invisible peer (foreign pid namespace): we cannot
		// see it, which proves nothing about it.
		return Unknown
	}
	l.selfOnce.Do(l.readSelf)

	gone, err := l.gone(ctx, pid)
	switch {
	case err != nil:
		return Unknown
	case gone:
		return Dead
	}

	p := &process.Process{Pid: int32(pid)}
	ms, err := p.CreateTimeWithContext(ctx)
	if err != nil {
		// The process may have exited between the two reads.
		if gone, _ := l.gone(ctx, pid); gone {
			return Dead
		}
		return Unknown
	}
	if startMillis != 0 && abs(ms-startMillis) > l.tolerance() {
		if l.clockStepped(ctx) {
			// Every start time gopsutil reports moved with the wall
			// clock, so this mismatch may be the step, not a reuse.
			return Unknown
		}
		return Dead
	}

	status, err := p.StatusWithContext(ctx)
	if err != nil {
		if gone, _ := l.gone(ctx, pid); gone {
			return Dead
		}
		return Unknown
	}
	if len(status) > 0 && status[0] == process.Zombie {
		// A zombie has exited and can write nothing more: dead for our
		// purposes, though its pid still exists until the parent reaps it.
		// A thread-group leader that exited while its other threads run
		// also shows as a zombie; it still counts its live threads, so
		// only a single-threaded zombie is proved dead.
		n, err := p.NumThreadsWithContext(ctx)
		if err == nil && n <= 1 {
			return Dead
		}
		return Unknown
	}
	return Alive
}

// gone reports whether no process has pid. gopsutil answers from /proc;
// an absent /proc entry is confirmed with signal 0, because a /proc mounted
// with hidepid (systemd's ProtectProc=invisible) hides processes that
// exist, and calling those dead would expire live workers' leases.
func (l *Local) gone(ctx context.Context, pid int) (bool, error) {
	exists, err := process.PidExistsWithContext(ctx, int32(pid))
	if err != nil {
		return false, err
	}
	if exists {
		return false, nil
	}
	return signalSaysGone(pid)
}

func (l *Local) readSelf() {
	p := &process.Process{Pid: int32(os.Getpid())}
	if ms, err := p.CreateTime(); err == nil {
		l.selfStart = ms
	}
}

// clockStepped reports whether this process's own start time, as gopsutil
// reads it now, moved beyond the tolerance since it was first read. The
// kernel's boot time is derived from the wall clock, so a wall-clock step
// shifts every reported start time at once; a worker's start recorded
// before the step can then no longer be compared with one read after it.
// A step that happened before this prober first looked goes unseen; that is
// the remaining blind spot.
func (l *Local) clockStepped(ctx context.Context) bool {
	if l.selfStart == 0 {
		return true // no reference: we cannot rule a step out
	}
	p := &process.Process{Pid: int32(os.Getpid())}
	now, err := p.CreateTimeWithContext(ctx)
	if err != nil {
		return true
	}
	return abs(now-l.selfStart) > l.tolerance()
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
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
