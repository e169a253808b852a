package agent

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/leasekeeper/leasekeeper/internal/memfs"
)

// BoardFile is the bbolt file the agent opens, as an absolute path for
// the startup log and the status; "" for a store that is not a bbolt file
// (MongoDB, a plugin binary).
func (c Config) BoardFile() string {
	if c.Store.Backend != BackendBolt || c.Store.Path == "" {
		return ""
	}
	if abs, err := filepath.Abs(c.Store.Path); err == nil {
		return abs
	}
	return c.Store.Path
}

// checkBoardFS refuses a bbolt file on a memory-backed file system (a
// tmpfs or a ramfs: /run, $XDG_RUNTIME_DIR, /dev/shm, often /tmp), unless
// store.allow_tmpfs says the board is meant to be lost, in which case it
// warns (DESIGN.md#board-on-disk). Such a file system is emptied at reboot
// ($XDG_RUNTIME_DIR also at logout), and a board that vanishes starts over
// with every card's epoch at 1: a worker still holding a token from before
// could then present one the fence has already issued.
//
// The directory the file goes in is judged; while it does not exist yet,
// its nearest existing ancestor, on which the agent will create it. A
// file system that cannot be read is not a reason to refuse: opening the
// store reports a real problem with the directory.
func checkBoardFS(cfg Config, log *slog.Logger) error {
	file := cfg.BoardFile()
	if file == "" {
		return nil
	}
	// The file it names may be a symlink: judge where the board's bytes
	// live, the link's target (resolved as far as it exists).
	where := filepath.Dir(file)
	if target, err := filepath.EvalSymlinks(file); err == nil {
		where = filepath.Dir(target)
	} else if target, err := os.Readlink(file); err == nil {
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(file), target)
		}
		where = filepath.Dir(target)
	}
	kind, err := memfs.Of(where)
	if err != nil {
		log.Warn("cannot tell which file system holds the board file", "board_file", file, "err", err)
		return nil
	}
	if kind == "" {
		return nil
	}
	if cfg.AllowTmpfs {
		log.Warn("the board file is on a "+kind+" (store.allow_tmpfs: true): the board and every card's epoch are lost at reboot",
			"board_file", file)
		return nil
	}
	return fmt.Errorf("%w: store.path: %s is on a %s, which is emptied at reboot (and, under $XDG_RUNTIME_DIR, at logout): "+
		"a board that vanishes restarts every card's epoch at 1, and a worker still holding a token from before could present one "+
		"the fence has already issued; put the board on persistent storage ($XDG_STATE_HOME/leasekeeper by default, "+
		"/var/lib/leasekeeper under the systemd unit), or set store.allow_tmpfs: true for a board you mean to lose",
		ErrConfig, file, kind)
}
