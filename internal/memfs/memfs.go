// Package memfs tells whether a directory is on a memory-backed file
// system (a tmpfs or a ramfs), whose content is gone at reboot: the agent
// refuses to keep its board on one (DESIGN.md#board-on-disk), and the tests
// that run an agent as an operator would find a disk for it.
package memfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Of names the memory-backed file system path is on ("tmpfs" or "ramfs"),
// or returns "" for any other file system, and on platforms other than
// Linux, where they are not told apart. A path that does not exist yet is
// judged by its nearest existing ancestor: the file system it would be
// created on.
func Of(path string) (string, error) {
	dir, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	for {
		_, err := os.Stat(dir)
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(dir) == dir {
			break
		}
		dir = filepath.Dir(dir)
	}
	return kind(dir)
}
