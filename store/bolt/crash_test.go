package boltstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/board"
)

// crashWriterEnv makes the test binary a writer that is killed: TestMain
// opens the store named by it and creates cards w-0, w-1, … one at a time
// from four goroutines, printing "ack ID" once each create is acknowledged,
// until it is killed.
const crashWriterEnv = "BOLTSTORE_TEST_CRASH_WRITER"

func crashWriter(path string) int {
	s, err := Open(path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	acks := make(chan string)
	for g := range 4 {
		go func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("w-%d-%d-%d", os.Getpid(), g, i)
				if _, err := s.CreateCard(context.Background(), board.CreateCardParams{ID: id}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				acks <- id
			}
		}()
	}
	out := bufio.NewWriter(os.Stdout)
	for id := range acks {
		fmt.Fprintf(out, "ack %s\n", id)
		_ = out.Flush()
	}
	return 0
}

// startCrashWriter runs a crash writer on path and returns the cards it
// acknowledged once it has acknowledged n, after killing it with SIGKILL
// in the middle of its writes.
func startCrashWriter(t *testing.T, path string, n int) []string {
	t.Helper()
	cmd := selfAs(crashWriterEnv, path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	sc := bufio.NewScanner(stdout)
	for len(acked) < n && sc.Scan() {
		acked = append(acked, strings.TrimPrefix(sc.Text(), "ack "))
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Acknowledgements printed before the kill landed count too.
	for sc.Scan() {
		acked = append(acked, strings.TrimPrefix(sc.Text(), "ack "))
	}
	_ = cmd.Wait()
	if len(acked) < n {
		t.Fatalf("writer acknowledged %d creates before it ended, want %d", len(acked), n)
	}
	return acked
}

// TestAKilledWriterLosesNoAcknowledgedWrite kills a writing process with
// SIGKILL, several times over the same file, and reopens it: every create
// it acknowledged is there (DESIGN.md#wal).
func TestAKilledWriterLosesNoAcknowledgedWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "board.db")
	var acked []string
	for range 3 {
		acked = append(acked, startCrashWriter(t, path, 300)...)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open after the kills: %v", err)
	}
	defer s.Close()
	for _, id := range acked {
		if _, err := s.GetCard(t.Context(), board.GetCardParams{ID: id}); err != nil {
			t.Errorf("acknowledged card %s: %v", id, err)
		}
	}
	checkIndexes(t, s)
}

// TestALostLogIsRefusedUntilDiscarded: after an unclean stop the board
// file may lack what the log held, so a missing log is refused with a
// message that names it and the way out; DiscardWAL is that way out, and
// the store then opens with what the file holds.
func TestALostLogIsRefusedUntilDiscarded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "board.db")
	acked := startCrashWriter(t, path, 200)
	if err := os.RemoveAll(path + WALSuffix); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, Options{})
	if !errors.Is(err, ErrWALDamaged) {
		t.Fatalf("Open without its log after a kill: %v, want ErrWALDamaged", err)
	}
	for _, want := range []string{path + WALSuffix, "not closed cleanly", "store discard-wal"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := os.Stat(path + WALSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused Open left a log directory behind: %v", err)
	}
	moved, err := DiscardWAL(path, 0)
	if err != nil || moved != "" {
		t.Fatalf("DiscardWAL = %q, %v; want nothing moved, no error", moved, err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open after DiscardWAL: %v", err)
	}
	found := 0
	for _, id := range acked {
		if _, err := s.GetCard(t.Context(), board.GetCardParams{ID: id}); err == nil {
			found++
		}
	}
	checkIndexes(t, s)
	// A new claim works on the new log, and the store closes cleanly.
	c, err := s.CreateCard(t.Context(), board.CreateCardParams{ID: "after"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.GetCard(t.Context(), board.GetCardParams{ID: c.ID}); err != nil {
		t.Errorf("card written on the new log: %v", err)
	}
	t.Logf("%d of %d acknowledged cards were in the board file when its log was lost", found, len(acked))
}

// TestADamagedLogIsMovedAsideByDiscardWAL: a log that cannot be read is
// refused, naming it; DiscardWAL moves it aside (never deletes it).
func TestADamagedLogIsMovedAsideByDiscardWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "board.db")
	startCrashWriter(t, path, 100)
	meta := filepath.Join(path+WALSuffix, "wal-meta.db")
	if err := os.WriteFile(meta, []byte("not a bbolt file"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, Options{})
	if !errors.Is(err, ErrWALDamaged) || !strings.Contains(err.Error(), path+WALSuffix) {
		t.Fatalf("Open with a damaged log: %v, want ErrWALDamaged naming %s", err, path+WALSuffix)
	}
	moved, err := DiscardWAL(path, 0)
	if err != nil || !strings.HasPrefix(moved, path+WALSuffix+".discarded-") {
		t.Fatalf("DiscardWAL = %q, %v", moved, err)
	}
	if _, err := os.Stat(filepath.Join(moved, "wal-meta.db")); err != nil {
		t.Errorf("the damaged log was not kept: %v", err)
	}
	opensCleanly(t, path, "after DiscardWAL")
}

// TestAnEmptyLogWithAnIdIsAdopted: an open that named its new log and
// stopped before stamping the board file leaves an empty log with an id;
// the next open adopts it instead of calling it another board's.
func TestAnEmptyLogWithAnIdIsAdopted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "board.db")
	l, err := openWAL(path+WALSuffix, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.w.Set(keyWALID, []byte("0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	opensCleanly(t, path, "beside an empty log with an id")
}

// opensCleanly opens the store at path and closes it, failing the test if
// either fails.
func opensCleanly(t *testing.T, path, when string) {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open %s: %v", when, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close %s: %v", when, err)
	}
}

// TestALogThatEndsBeforeTheFileTakesNewWrites: a log whose end the board
// file has already passed (its last records dropped at open as damaged,
// after a checkpoint that had copied them) holds nothing the file lacks;
// the store opens and its next write is numbered after the file's stamp.
func TestALogThatEndsBeforeTheFileTakesNewWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "board.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := s.CreateCard(t.Context(), board.CreateCardParams{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The file says it holds five records more than the log has.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		applied, err := getApplied(tx)
		if err != nil {
			return err
		}
		return putApplied(tx, applied+5)
	}); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := s.CreateCard(t.Context(), board.CreateCardParams{ID: "d"}); err != nil {
		t.Fatalf("a write after open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	for _, id := range []string{"a", "b", "c", "d"} {
		if _, err := s.GetCard(t.Context(), board.GetCardParams{ID: id}); err != nil {
			t.Errorf("card %s: %v", id, err)
		}
	}
}
