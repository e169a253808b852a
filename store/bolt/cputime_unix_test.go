//go:build unix

package boltstore

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) this process has used so far,
// every thread included: the committer goroutine, the fsync and the garbage
// collector count too, as they do for a running agent.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
