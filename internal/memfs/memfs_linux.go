package memfs

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// kind reads dir's file system type with statfs(2) and names the
// memory-backed ones by their magic numbers.
func kind(dir string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "", fmt.Errorf("statfs %s: %w", dir, err)
	}
	// Statfs_t.Type is 64 bits wide on some architectures and 32 on
	// others; the magic numbers are 32-bit values.
	switch uint32(st.Type) {
	case unix.TMPFS_MAGIC:
		return "tmpfs", nil
	case unix.RAMFS_MAGIC:
		return "ramfs", nil
	}
	return "", nil
}
