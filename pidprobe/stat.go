package pidprobe

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// ProcStat is what this package reads of /proc/PID/stat (proc_pid_stat(5)):
// one read of one file, so every field describes the same process at the
// same instant.
type ProcStat struct {
	PID   int
	Comm  string // field 2, without its parentheses
	State byte   // field 3: R, S, D, Z, T, t, X, ...
	PPID  int    // field 4
	PGID  int    // field 5
	SID   int    // field 6: the session
	// NumThreads is field 20.
	NumThreads int
	// StartTicks is field 22: when the process started, in clock ticks
	// (USER_HZ) after the boot. The kernel fixes it at fork; every read
	// of one process returns the same number, whatever the wall clock does.
	StartTicks int64
}

// Zombie reports whether the process has exited and only its entry waits to
// be reaped (Z), or is being torn down (X).
func (s ProcStat) Zombie() bool { return s.State == 'Z' || s.State == 'X' }

// ReadStat reads /proc/PID/stat. A pid with no /proc entry answers an error
// that wraps os.ErrNotExist; that alone does not prove the pid free (a /proc
// mounted with hidepid hides processes that exist).
func ReadStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcStat{}, err
	}
	st, err := ParseStat(b)
	if err != nil {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

var errStatFormat = errors.New("malformed stat line")

// ParseStat parses one /proc/PID/stat line. Field 2, the command name, is
// in parentheses and may itself hold spaces and parentheses (a process can
// name itself anything up to 15 bytes, ")" and newlines included): the
// name runs from the first '(' to the LAST ')', and the numeric fields
// start after that.
func ParseStat(b []byte) (ProcStat, error) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return ProcStat{}, fmt.Errorf("%w: no (comm)", errStatFormat)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return ProcStat{}, fmt.Errorf("%w: pid: %v", errStatFormat, err)
	}
	// f[0] is field 3 (state): field n is f[n-3].
	f := bytes.Fields(b[closing+1:])
	if len(f) < 22-2 {
		return ProcStat{}, fmt.Errorf("%w: %d fields after the command name, want at least 20", errStatFormat, len(f))
	}
	if len(f[0]) != 1 {
		return ProcStat{}, fmt.Errorf("%w: state %q", errStatFormat, f[0])
	}
	st := ProcStat{PID: pid, Comm: string(b[open+1 : closing]), State: f[0][0]}
	ints := []struct {
		field int
		into  *int
	}{{4, &st.PPID}, {5, &st.PGID}, {6, &st.SID}, {20, &st.NumThreads}}
	for _, x := range ints {
		v, err := strconv.Atoi(string(f[x.field-3]))
		if err != nil {
			return ProcStat{}, fmt.Errorf("%w: field %d: %v", errStatFormat, x.field, err)
		}
		*x.into = v
	}
	st.StartTicks, err = strconv.ParseInt(string(f[22-3]), 10, 64)
	if err != nil || st.StartTicks < 0 {
		return ProcStat{}, fmt.Errorf("%w: field 22 (starttime) %q", errStatFormat, f[22-3])
	}
	return st, nil
}
