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
// agent must say so — `leasekeeper health` fails naming the refused write.
// A write that failed on the log or a checkpoint stops writes until the
// agent restarts (DESIGN.md#wal-recovery): freeing space does not bring
// them back by itself, a restart does, and every write acknowledged before
// the disk filled is there after it.
func TestE2EHealthReflectsRefusedWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	disk := filepath.Join(e.Dir, "disk")
	if err := os.Mkdir(disk, 0o700); err != nil {
		t.Fatal(err)
	}
	// Room for the log's first segment (8 MiB, written when it is made)
	// and a small board file.
	if err := syscall.Mount("tmpfs", disk, "tmpfs", 0, "size=12m"); err != nil {
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
	var (
		why   string
		acked []string
	)
	for i := 0; i < 5000 && !refused; i++ {
		id := fmt.Sprintf("full-%04d", i)
		_, stderr, code := e.Run("card", "create", id, "--title", strings.Repeat("x", 1000))
		refused, why = code != 0, stderr
		if !refused {
			acked = append(acked, id)
		}
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

	// Room again. A refusal that came from the log or a checkpoint holds
	// until a restart; one that came before them (bbolt's own pages) may
	// already be gone. Either way a restart applies the log and writes go.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := e.Run("card", "create", "before-the-restart"); code != 0 && !strings.Contains(stderr, "restart the agent") {
		t.Errorf("a refused write after an I/O failure says %q, want it to say to restart the agent", stderr)
	}
	e.Stop()
	// The file reopens whole (its consistency check runs at open) with
	// every acknowledged write.
	e.Start()
	e.MustRun("card", "create", "after-the-restart")
	if code, reason := e.health(); code != 0 {
		t.Errorf("health after a restart and a successful write: exit %d %q, want 0", code, reason)
	}
	for _, id := range acked {
		if _, stderr, code := e.Run("card", "show", id); code != 0 {
			t.Errorf("card %s, acknowledged before the disk filled: %s", id, stderr)
		}
	}
}
