// Package pidprobetest holds a scripted pidprobe.Prober for the unit tests
// of packages that depend on a prober (heartbeat, watchdog, socketapi). It
// is not a substitute for the real prober: the tests of package pidprobe
// use real processes, and so should any test that is about process death.
package pidprobetest

import (
	"context"
	"fmt"
	"sync"

	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// Boot is the boot id of every identity a Fake hands out.
const Boot = "pidprobetest-boot"

// ID is the identity of a pretend process that started at tick start: what
// Fake.Identify answers for it. Its legacy StartMillis is start too, so a
// run that records only a pid_start of start matches it the legacy way.
func ID(start int64) pidprobe.Identity {
	return pidprobe.Identity{BootID: Boot, StartTicks: start, StartMillis: start}
}

// Fake is a table of pretend processes. The zero value knows no process, so
// every probe is Dead until Spawn. It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	procs   map[int]int64 // pid → start tick of the live process
	unknown map[int]bool  // pids whose probe is forced to Unknown
	probes  int
}

var _ pidprobe.Prober = (*Fake)(nil)

// Spawn makes pid a live process that started at tick start, with the
// identity ID(start) (which replaces any earlier process with that pid,
// like a pid reuse would).
func (f *Fake) Spawn(pid int, start int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.procs == nil {
		f.procs = map[int]int64{}
	}
	f.procs[pid] = start
}

// Kill makes pid disappear.
func (f *Fake) Kill(pid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.procs, pid)
}

// SetUnknown forces every probe of pid to Unknown (a permission error, a
// hidden /proc entry) while on is true.
func (f *Fake) SetUnknown(pid int, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unknown == nil {
		f.unknown = map[int]bool{}
	}
	f.unknown[pid] = on
}

// Probes returns how many times Probe was called.
func (f *Fake) Probes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probes
}

// Probe follows the same rules as pidprobe.Local (pidprobe.Compare), on
// the table.
func (f *Fake) Probe(_ context.Context, pid int, rec pidprobe.Identity) pidprobe.Liveness {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probes++
	if pid <= 0 || f.unknown[pid] {
		return pidprobe.Unknown
	}
	start, ok := f.procs[pid]
	if !ok {
		return pidprobe.Dead
	}
	switch pidprobe.Compare(rec, ID(start)) {
	case pidprobe.MatchSame:
		return pidprobe.Alive
	case pidprobe.MatchOther:
		return pidprobe.Dead
	default:
		return pidprobe.Unknown
	}
}

// Identify returns ID of the start given to Spawn, or pidprobe.ErrNoProcess.
func (f *Fake) Identify(_ context.Context, pid int) (pidprobe.Identity, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	start, ok := f.procs[pid]
	if !ok {
		return pidprobe.Identity{}, fmt.Errorf("pid %d: %w", pid, pidprobe.ErrNoProcess)
	}
	return ID(start), nil
}
