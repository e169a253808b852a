//go:build unix

package pidprobe

import (
	"errors"
	"syscall"
)

// signalSaysGone asks the kernel directly with signal 0, which delivers
// nothing and only checks that the pid exists. ESRCH is the only answer
// that proves absence; EPERM means it exists under another user.
func signalSaysGone(pid int) (bool, error) {
	err := syscall.Kill(pid, 0)
	switch {
	case err == nil, errors.Is(err, syscall.EPERM):
		return false, nil
	case errors.Is(err, syscall.ESRCH):
		return true, nil
	default:
		return false, err
	}
}
