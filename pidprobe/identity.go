package pidprobe

import (
	"fmt"
	"time"
)

// Identity names one process among every process that has had its pid on
// this host. The kernel hands a freed pid out again, so a pid alone names
// whoever holds it now; the identity is what tells the process a claim was
// granted to from a newcomer on its pid.
//
// The identity is exact, never a tolerance: StartTicks is the kernel's own
// record of when the process started (/proc/PID/stat field 22, in clock
// ticks after the boot), fixed at fork and the same on every read, whatever
// the wall clock does; BootID says which boot those ticks count from. Two
// processes that held one pid differ in it unless both started within the
// same clock tick (10 ms at the usual USER_HZ of 100), which the kernel's
// pid allocation only allows after cycling through the whole pid space —
// or a privileged process choosing the pid (ns_last_pid, clone3's
// set_tid). Inode, where the kernel has pidfs (Linux 6.9 and later), closes
// even that gap for the identities this agent holds in memory: a pidfs
// inode number is never reused within a boot.
//
// StartMillis is the start time in milliseconds since the Unix epoch, as
// gopsutil computes it from a boot time truncated to whole seconds: two
// reads of one process may differ by up to a second, and a wall-clock step
// moves it. It is kept for what was recorded before the exact identity
// existed (see Compare) and for the runs' pid_start field, which people and
// older agents read; it identifies nothing on its own when StartTicks is
// known.
type Identity struct {
	BootID      string `json:"boot_id,omitempty"`
	StartTicks  int64  `json:"start_ticks,omitempty"`
	Inode       uint64 `json:"pidfs_inode,omitempty"`
	StartMillis int64  `json:"start_millis,omitempty"`
}

// Exact reports whether the identity carries the kernel's start ticks. A
// process of the very first tick after boot (kernel threads) has 0 ticks
// and is compared by its legacy millis, like a record without ticks.
func (id Identity) Exact() bool { return id.StartTicks > 0 }

// Known reports whether the identity says anything about the process: a
// zero Identity is a start the caller does not know (a self-declared
// worker in another pid namespace, a run recorded without one).
func (id Identity) Known() bool { return id.Exact() || id.StartMillis != 0 }

// String describes the identity for logs and sweep reports.
func (id Identity) String() string {
	switch {
	case id.Exact():
		s := fmt.Sprintf("started at tick %d", id.StartTicks)
		if id.BootID != "" {
			s += " of boot " + id.BootID
		}
		return s
	case id.StartMillis != 0:
		return fmt.Sprintf("started at about %s (a legacy record)", time.UnixMilli(id.StartMillis).UTC().Format(time.RFC3339Nano))
	default:
		return "start unknown"
	}
}

// Match is what a recorded identity says about the process a pid names now.
type Match int

const (
	// MatchUnknown: the two cannot be compared (the current one could not
	// be read exactly).
	MatchUnknown Match = iota
	// MatchSame: the same process, as far as the record can tell.
	MatchSame
	// MatchOther: provably another process.
	MatchOther
)

// LegacyTolerance is how far apart a legacy record's StartMillis and the
// current process's may be and still be taken for one process: gopsutil's
// two readings of one process differ by up to a second. It applies only to
// records without StartTicks (runs recorded before the exact identity), for
// which nothing better exists.
const LegacyTolerance = 2 * time.Second

// Compare judges whether cur, read now for a pid, is the process rec was
// recorded from for that pid.
//
//   - An unknown record (zero) matches any process: reuse cannot be proved.
//   - An exact record matches only the same start ticks of the same boot
//     (and the same pidfs inode, when both carry one). A record of another
//     boot names a process that died with that boot.
//   - A legacy record (milliseconds only, made before the exact identity
//     existed) matches a start within LegacyTolerance. This is the one
//     tolerance left, kept on purpose for runs an older agent recorded:
//     refusing to match them would expire, at the first agent restart after
//     an upgrade, every live worker's claim the sweep would otherwise
//     adopt; the reuse it can miss needs a pid recycled within two seconds
//     of its previous owner's start while no agent ran. Every identity this
//     agent records is exact, so the tolerance dies out with those runs.
func Compare(rec, cur Identity) Match {
	switch {
	case !rec.Known():
		return MatchSame
	case rec.Exact():
		if !cur.Exact() {
			return MatchUnknown
		}
		if rec.BootID != "" && cur.BootID != "" && rec.BootID != cur.BootID {
			return MatchOther
		}
		if rec.StartTicks != cur.StartTicks {
			return MatchOther
		}
		if rec.Inode != 0 && cur.Inode != 0 && rec.Inode != cur.Inode {
			return MatchOther
		}
		return MatchSame
	default:
		if cur.StartMillis == 0 {
			return MatchUnknown
		}
		if abs(rec.StartMillis-cur.StartMillis) > LegacyTolerance.Milliseconds() {
			return MatchOther
		}
		return MatchSame
	}
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
