package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestE2EHealthReflectsRefusedWrites: with the store file on a full disk
// (a small tmpfs), the store still answers reads but refuses writes; the
// agent must say so — `leasekeeper health` fails naming the refused write —
// and be healthy again once a write succeeds. The file is intact
// throughout (it reopens, every card written before the disk filled is
// there).
func TestE2EHealthReflectsRefusedWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	disk := filepath.Join(e.Dir, "disk")
	if err := os.Mkdir(disk, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", disk, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (needs root): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(disk, syscall.MNT_DETACH) })
	// The small disk is a tmpfs: the board opts in to it.
	cfg := fmt.Sprintf("socket: %s\nstore: {backend: bolt, path: %s, allow_tmpfs: true}\n", e.Socket, filepath.Join(disk, "board.db"))
	if err := os.WriteFile(e.Config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	e.Start()
	if code, reason := e.health(); code != 0 {
		t.Fatalf("health before the disk filled: %d %s", code, reason)
	}

	// Fill the disk to the last byte.
	filler := filepath.Join(disk, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	for n := len(buf) / 2; n > 0; n /= 2 { // the tail of the last block too
		_, _ = f.Write(buf[:n])
	}
	_ = f.Close()

	// Writes until the store refuses one: bbolt may still have room in
	// the pages it already holds.
	refused := false
	var why string
	for i := 0; i < 5000 && !refused; i++ {
		_, stderr, code := e.Run("card", "create", fmt.Sprintf("full-%04d", i), "--title", strings.Repeat("x", 1000))
		refused, why = code != 0, stderr
	}
	t.Logf("the refused write: %s", why)
	if !refused {
		t.Fatal("the store accepted 5000 writes on a full disk")
	}
	code, reason := e.health()
	if code == 0 || !strings.Contains(reason, "refuses writes") {
		t.Errorf("health on a full disk: exit %d %q, want a failure saying the store refuses writes", code, reason)
	}
	if _, _, code := e.Run("card", "ls"); code != 0 {
		t.Error("reads failed on a full disk; the store should still answer them")
	}

	// Room again: the next write succeeds and health recovers.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	e.MustRun("card", "create", "after-the-disk-emptied")
	if code, reason := e.health(); code != 0 {
		t.Errorf("health after a successful write: exit %d %q, want 0", code, reason)
	}
	e.Stop()
	// The file reopens whole (its consistency check runs at open).
	e.Start()
	e.MustRun("card", "show", "after-the-disk-emptied")
}
