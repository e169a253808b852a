//go:build !linux

package pidprobe

// Off Linux there are no pidfds: the prober goes by /proc and signal 0.
func openPidfd(int) (int, error)   { return -1, nil }
func closePidfd(int)               {}
func pidfdAlive(int) (bool, error) { return true, nil }
func pidfsInode(int) uint64        { return 0 }
