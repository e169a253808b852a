package pidprobe

import (
	"errors"

	"golang.org/x/sys/unix"
)

// openPidfd opens a pidfd on pid: a handle on that one process, which no
// pid reuse can redirect. It returns -1 and no error where the kernel has
// no pidfds (before Linux 5.3) or will not give one for this pid (a thread
// id), so the caller goes on without; ErrNoProcess when no process has the
// pid (the kernel's own answer, which a hidepid /proc cannot fake).
func openPidfd(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.ESRCH):
		return -1, ErrNoProcess
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EPERM):
		return -1, nil
	default:
		return -1, err
	}
}

func closePidfd(fd int) {
	if fd >= 0 {
		_ = unix.Close(fd)
	}
}

// pidfdAlive reports whether the process a pidfd names has not been reaped
// yet (a zombie counts as there: it still holds its pid). Signal 0 checks
// without delivering; EPERM means it exists under another user.
func pidfdAlive(fd int) (bool, error) {
	err := unix.PidfdSendSignal(fd, 0, nil, 0)
	switch {
	case err == nil, errors.Is(err, unix.EPERM):
		return true, nil
	case errors.Is(err, unix.ESRCH):
		return false, nil
	default:
		return false, err
	}
}

// pidfsMagic is PID_FS_MAGIC: pidfds live on pidfs since Linux 6.9.
const pidfsMagic = 0x50494446

// pidfsInode returns the pidfs inode number of the process a pidfd names,
// unique to that process within one boot, or 0 where pidfds are anonymous
// inodes all sharing one number (before Linux 6.9).
func pidfsInode(fd int) uint64 {
	if fd < 0 {
		return 0
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil || fs.Type != pidfsMagic {
		return 0
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0
	}
	return st.Ino
}
