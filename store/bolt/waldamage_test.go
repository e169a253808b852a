package boltstore

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/board"
)

// The log's damage and operator paths (see wal.go): a log that cannot
// give back every acknowledged write is refused with ErrWALDamaged, in one
// line naming the directory and what to do; a log that is only missing
// after a clean Close is recreated.

var walFindings = flag.Bool("wal.findings", false, "run the tests of known gaps in the write-ahead log's damage detection")

// writeThenCut creates cards card-001..card-nnn, one write each, every one
// acknowledged, then cuts the power before any checkpoint: the image's
// board file is the one at open, and the log holds every card.
func writeThenCut(t *testing.T, n int) crashImage {
	t.Helper()
	path := filepath.Join(t.TempDir(), "board.db")
	fs := newCutFS(1, nil)
	fs.tail = tailNone
	s, err := open(path, Options{Clock: newFakeClock()}, fs)
	if err != nil {
		t.Fatal(err)
	}
	atOpen, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkpointed := make(chan struct{}, 1)
	s.ck.committed = func(uint64) { checkpointed <- struct{}{} }
	for i := 1; i <= n; i++ {
		mustCreate(t, s, board.CreateCardParams{ID: fmt.Sprintf("card-%03d", i)})
	}
	if !fs.freeze() {
		t.Fatal("already cut")
	}
	select {
	case <-checkpointed:
		t.Skip("a timed checkpoint ran before the cut; the log no longer holds every card")
	default:
	}
	meta, err := os.ReadFile(filepath.Join(path+WALSuffix, "wal-meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	fs.thaw()
	_ = s.Close()
	return crashImage{board: atOpen, meta: meta, segments: fs.image}
}

// flipIn flips one byte of the first occurrence of what in the image's
// segment files.
func flipIn(t *testing.T, im crashImage, what string) {
	t.Helper()
	for _, b := range im.segments {
		if i := bytes.Index(b, []byte(what)); i >= 0 {
			b[i+len(what)-1] ^= 0x40
			return
		}
	}
	t.Fatalf("%q is in no segment file", what)
}

// wantRefused checks that Open refused with target, in one line naming
// name and saying what to do.
func wantRefused(t *testing.T, err, target error, name string, todo ...string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("Open = %v, want %v", err, target)
	}
	msg := err.Error()
	if !strings.Contains(msg, name) || strings.Contains(msg, "\n") {
		t.Errorf("error %q: want one line naming %q", msg, name)
	}
	for _, w := range todo {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
}

// A record damaged after it was acknowledged — one before the log's last —
// is refused, never skipped: the cards after it were acknowledged too.
func TestWALDamagedRecordIsRefused(t *testing.T) {
	im := writeThenCut(t, 8)
	flipIn(t, im, "card-004")
	path := filepath.Join(t.TempDir(), "board.db")
	im.write(t, path)
	_, err := Open(path, Options{})
	wantRefused(t, err, ErrWALDamaged, path+WALSuffix, "restore the board file and its .wal directory together")
}

// The last record of the log, damaged after it was acknowledged (synced):
// raft-wal cannot tell it from a torn append and drops it when it opens.
// The store must refuse rather than lose an acknowledged write.
//
// It fails today (the store opens, card-008 is gone), so it runs only with
// -wal.findings: there is no durable record of which append was the last
// acknowledged one that the open could compare raft-wal's answer with.
func TestWALDamagedLastRecordIsRefused(t *testing.T) {
	if !*walFindings {
		t.Skip("known gap: raft-wal drops a damaged last record as a torn append; run with -wal.findings")
	}
	im := writeThenCut(t, 8)
	flipIn(t, im, "card-008")
	path := filepath.Join(t.TempDir(), "board.db")
	im.write(t, path)
	s, err := Open(path, Options{})
	if err == nil {
		_, gerr := s.GetCard(t.Context(), board.GetCardParams{ID: "card-008"})
		_ = s.Close()
		t.Fatalf("Open of a log whose last, acknowledged record is damaged succeeded; card-008: %v", gerr)
	}
	wantRefused(t, err, ErrWALDamaged, path+WALSuffix)
}

// A missing log directory after an unclean stop is refused (it held
// writes the file lacks); after a clean Close it is recreated and the
// board goes on.
func TestWALMissingDirectory(t *testing.T) {
	t.Run("unclean stop", func(t *testing.T) {
		im := writeThenCut(t, 3)
		path := filepath.Join(t.TempDir(), "board.db")
		im.write(t, path)
		if err := os.RemoveAll(path + WALSuffix); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path, Options{})
		wantRefused(t, err, ErrWALDamaged, path+WALSuffix, "restore the board file and its .wal directory together")
		if _, err := os.Stat(path + WALSuffix); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused open left a log directory behind: %v", err)
		}
	})
	t.Run("clean close", func(t *testing.T) {
		s, _, path := openTest(t)
		mustCreate(t, s, board.CreateCardParams{ID: "a"})
		mustClaim(t, s, "a", "host-42")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(path + WALSuffix); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("Open after a clean Close without the log: %v", err)
		}
		defer s.Close()
		c, err := s.GetCard(t.Context(), board.GetCardParams{ID: "a"})
		if err != nil || c.ClaimEpoch != 1 {
			t.Fatalf("card a = %+v, %v; want it with epoch 1", c, err)
		}
		if _, err := os.Stat(path + WALSuffix); err != nil {
			t.Errorf("the log was not recreated: %v", err)
		}
		if card, err := s.Claim(t.Context(), board.ClaimParams{Card: "a", Marker: "host-42", Lease: lease}); err != nil || card.ClaimEpoch != 1 {
			t.Errorf("claim after reopening = %+v, %v", card.Token(), err)
		}
	})
}

// A log directory from another board is refused, whichever way round.
func TestWALFromAnotherBoardIsRefused(t *testing.T) {
	pathA := filepath.Join(t.TempDir(), "a.db")
	pathB := filepath.Join(t.TempDir(), "b.db")
	for _, p := range []string{pathA, pathB} {
		s, err := Open(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, board.CreateCardParams{ID: "x"})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(pathA + WALSuffix); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(pathB+WALSuffix, pathA+WALSuffix); err != nil {
		t.Fatal(err)
	}
	_, err := Open(pathA, Options{})
	wantRefused(t, err, ErrWALDamaged, pathA+WALSuffix, "belongs to another board file")
}

// A schema 3 board file, written before the log existed, opens: it is
// stamped 4, gets a log, and keeps its data, epochs included.
func TestSchema3FileWithoutALogIsMigrated(t *testing.T) {
	s, clock, path := openTest(t)
	recoveryFixture(t, s, clock)
	want := snapshot(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What a schema 3 binary left: no log, no log bookkeeping, stamp 3.
	if err := os.RemoveAll(path + WALSuffix); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		for _, k := range [][]byte{keyWALApplied, keyWALClean, keyWALID} {
			if err := m.Delete(k); err != nil {
				return err
			}
		}
		if err := tx.DeleteBucket(bucketIdxLabel); err != nil { // came with schema 5
			return err
		}
		return m.Put(keySchema, []byte("3"))
	})
	_ = db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if stamp, _ := schemaOf(t, path); stamp != "3" {
		t.Fatalf("fixture is schema %q, want 3", stamp)
	}

	s, err = Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatalf("Open of a schema 3 file: %v", err)
	}
	if got := snapshot(t, s); !bytes.Equal(got, want) {
		t.Errorf("the migrated board differs:\n%s\nwant:\n%s", got, want)
	}
	checkIndexes(t, s)
	mustCreate(t, s, board.CreateCardParams{ID: "after-migration"})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if stamp, _ := schemaOf(t, path); stamp != fmt.Sprint(SchemaVersion) {
		t.Errorf("after Open: schema %q, want %d", stamp, SchemaVersion)
	}
	if _, err := os.Stat(path + WALSuffix); err != nil {
		t.Errorf("no log after the migration: %v", err)
	}
	s, err = Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetCard(t.Context(), board.GetCardParams{ID: "after-migration"}); err != nil {
		t.Error(err)
	}
}

// Eight writers queued behind a held batch ride one log append: fewer
// syncs than writes (DESIGN.md#group-commit).
func TestWALSyncsFewerThanWritesUnderConcurrency(t *testing.T) {
	path := filepath.Join(t.TempDir(), "board.db")
	fs := newCutFS(1, nil)
	s, err := open(path, Options{Clock: newFakeClock()}, fs)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const writers = 8
	for i := range writers + 1 {
		mustCreate(t, s, board.CreateCardParams{ID: fmt.Sprintf("c%d", i)})
	}
	g := holdFirstBatch(s)
	syncs0, appends0, writes0 := fs.syncs.Load(), s.wal.syncs.Load(), s.writes.Load()
	first := make(chan error, 1)
	go func() { first <- s.SetState(t.Context(), board.MoveParams{Card: "c8", To: board.StateBacklog}) }()
	g.waitHeld()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			_, err := s.Claim(t.Context(), board.ClaimParams{Card: fmt.Sprintf("c%d", i), Marker: fmt.Sprintf("host-%d", 100+i), Lease: lease})
			errs <- err
		})
	}
	g.waitQueued(t, writers)
	close(g.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	syncs, appends, writes := fs.syncs.Load()-syncs0, s.wal.syncs.Load()-appends0, s.writes.Load()-writes0
	if writes != writers+1 {
		t.Fatalf("%d writes made durable, want %d", writes, writers+1)
	}
	if appends != 2 || syncs > 2 {
		t.Errorf("%d writes took %d log appends and %d segment syncs, want 2 and at most 2 (batch sizes %v)", writes, appends, syncs, g.batchSizes())
	}
	if perSync := float64(writes) / float64(syncs); perSync <= 1 {
		t.Errorf("%.2f writes per sync, want more than 1", perSync)
	}
}
