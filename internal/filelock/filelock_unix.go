//go:build unix

package filelock

import (
	"os"
	"syscall"
)

// Lock takes an exclusive advisory lock on path, waiting for it, and
// returns the function that releases it. The kernel drops the lock if the
// holder dies, so a killed build never wedges the next run.
func Lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
