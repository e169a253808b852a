package memfs_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/memfs"
)

// TestOfTellsATmpfsFromADisk needs a tmpfs: /dev/shm is one on most Linux
// machines, the runtime directory on systemd hosts, the temporary
// directory on some.
func TestOfTellsATmpfsFromADisk(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("memory-backed file systems are told apart on Linux only")
	}
	var tmpfs string
	for _, c := range []string{"/dev/shm", os.Getenv("XDG_RUNTIME_DIR"), os.TempDir()} {
		if k, err := memfs.Of(c); c != "" && err == nil && k == "tmpfs" {
			tmpfs = c
			break
		}
	}
	if tmpfs == "" {
		t.Skip("no tmpfs on this machine (tried /dev/shm, $XDG_RUNTIME_DIR, the temporary directory)")
	}
	// A path that does not exist is judged by the ancestor it would be
	// made on.
	if k, err := memfs.Of(filepath.Join(tmpfs, "no", "such", "dir")); err != nil || k != "tmpfs" {
		t.Errorf("Of(a missing directory under %s) = %q, %v; want tmpfs", tmpfs, k, err)
	}
	// /proc is procfs: a file system, and not a memory-backed one.
	if k, err := memfs.Of("/proc/self"); err != nil || k != "" {
		t.Errorf(`Of(/proc/self) = %q, %v; want ""`, k, err)
	}
}
