//go:build !linux

package boltstore

import "errors"

// lockHolders needs /proc/locks; elsewhere the error names only the file.
func lockHolders(string) ([]int, error) {
	return nil, errors.New("lock holders unknown on this platform")
}

// LockedBy is known on Linux only; elsewhere the file is not reported
// locked before bbolt's own wait.
func LockedBy(string) (locked bool, pids []int) { return false, nil }
