package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	"github.com/leasekeeper/leasekeeper/internal/memfs"
)

// tmpfsDir returns a fresh directory on a memory-backed file system
// (/dev/shm, the runtime directory, the temporary directory: whichever is
// one), removed when the test ends, or skips the test saying none is.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("memory-backed file systems are told apart on Linux only")
	}
	candidates := []string{"/dev/shm", os.Getenv("XDG_RUNTIME_DIR"), os.TempDir()}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if kind, err := memfs.Of(c); err != nil || kind == "" {
			continue
		}
		d, err := os.MkdirTemp(c, "lk-tmpfs-")
		if err != nil {
			continue // not writable by this user
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		return d
	}
	t.Skipf("no writable tmpfs on this machine (tried %q): nothing to put a board on", candidates)
	return ""
}

// TestBoardOnATmpfsIsRefused: an agent whose bbolt file would live on a
// tmpfs refuses to start, naming the file and the way out, and creates
// nothing; with store.allow_tmpfs it starts, warns, and says where the
// board is (DESIGN.md#board-on-disk).
func TestBoardOnATmpfsIsRefused(t *testing.T) {
	t.Parallel()
	dir := tmpfsDir(t)
	// A directory that does not exist yet is judged by the ancestor it
	// will be created on.
	db := filepath.Join(dir, "not-yet", "board.db")

	r := startRun(t, runOpts{dbPath: db, refuseTmpfs: true, noWait: true})
	var err error
	select {
	case err = <-r.done:
		r.done <- err
	case <-r.ready:
		t.Fatalf("the agent started with its board on a tmpfs:\n%s", r.logs)
	}
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("agent with its board on a tmpfs: Run = %v, want a config error\n%s", err, r.logs)
	}
	for _, want := range []string{db, "tmpfs", "store.allow_tmpfs: true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	if _, serr := os.Stat(filepath.Dir(db)); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the refused agent created the board's directory (stat: %v)", serr)
	}
	if !strings.Contains(r.logs.String(), "board_file="+db) {
		t.Errorf("the startup log does not name the board file %s:\n%s", db, r.logs)
	}

	ok := startRun(t, runOpts{dbPath: db})
	if st := ok.status(t); st.Backend.Path != db {
		t.Errorf("status backend %+v, want the board file %s", st.Backend, db)
	}
	log := ok.logs.String()
	if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "is on a tmpfs (store.allow_tmpfs: true)") {
		t.Errorf("an agent allowed a tmpfs board did not warn:\n%s", log)
	}
}

// A board file named through a symlink is judged where its bytes live: a
// link on a disk to a file on a tmpfs is refused like the file itself,
// whether the target exists yet or not.
func TestBoardSymlinkedOntoATmpfsIsRefused(t *testing.T) {
	t.Parallel()
	mem := tmpfsDir(t)
	disk, err := agentproc.DiskTempDir("lk-link")
	if err != nil {
		t.Skipf("no directory on a disk to put the link in: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(disk) })
	for _, exists := range []bool{false, true} {
		target := filepath.Join(mem, fmt.Sprintf("board-%v.db", exists))
		if exists {
			if err := os.WriteFile(target, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		link := filepath.Join(disk, fmt.Sprintf("board-%v.db", exists))
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		var cfg Config
		cfg.Store.Backend, cfg.Store.Path = BackendBolt, link
		if err := checkBoardFS(cfg, slog.New(slog.DiscardHandler)); !errors.Is(err, ErrConfig) {
			t.Errorf("board %s linked to %s on a tmpfs (target exists: %v): %v, want refused", link, target, exists, err)
		}
	}
}
