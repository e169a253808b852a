package boltstore

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockHolders lists the pids holding a flock on path, from /proc/locks
// (bbolt locks its file with flock). A line reads:
//
//	1: FLOCK  ADVISORY  WRITE 11502 fe:00:9977955 0 EOF
//
// with the device as hex major:minor and the inode in decimal. Waiters
// ("1: -> FLOCK ...") are skipped: they do not hold the lock.
func lockHolders(path string) ([]int, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, err
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != want {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil || pid <= 0 {
			continue
		}
		pids = append(pids, pid)
	}
	return pids, sc.Err()
}

// LockedBy reports whether another open file holds the flock bbolt takes
// on path, and the pids /proc/locks names for it (none when it names
// none). It probes without waiting: a shared lock taken and dropped at
// once. A missing or unreadable file is not locked. The agent asks before
// it opens the file, to say at once that it is about to wait
// (DESIGN.md#bolt-lock).
func LockedBy(path string) (locked bool, pids []int) {
	f, err := os.Open(path)
	if err != nil {
		return false, nil
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err == nil {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return false, nil
	} else if err != unix.EWOULDBLOCK {
		return false, nil
	}
	pids, _ = lockHolders(path)
	return true, pids
}
