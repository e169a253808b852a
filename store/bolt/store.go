package boltstore

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/leasekeeper/leasekeeper/board"
)

// SchemaVersion is the layout this package writes (see doc.go). A file
// stamped with a higher version was written by a newer leasekeeper and is
// refused: reading it with an older layout could corrupt it. A file stamped
// with a lower version is migrated at Open (see migrate.go).
//
// Version 1 kept the claim family inside each card's JSON document.
// Version 2 keeps it in the claims bucket as a fixed-layout record.
// Version 3 adds idx_recovery, the index of cards held by a recovery claim.
// Version 4 keeps a write-ahead log beside the file (wal.go): the file alone
// may lack acknowledged writes, so a binary that does not know the log must
// not open it.
// Version 5 adds idx_label, each card's place in the queue of every label
// it carries (DESIGN.md#label-routing).
const SchemaVersion = 5

var keySchema = []byte("schema_version")

// DefaultLockTimeout bounds the wait for the file lock at Open.
const DefaultLockTimeout = 5 * time.Second

var (
	// ErrLocked: another process (or another open in this one) holds the
	// file. The error names the file and, when /proc/locks shows it, the pid.
	ErrLocked = errors.New("boltstore: store file is locked")
	// ErrSchema: the file's schema is not one this binary can use.
	ErrSchema = errors.New("boltstore: unsupported schema")
	// ErrDamaged: the file exists but is not a whole bbolt database (empty,
	// truncated, pages that fail bbolt's consistency check). It is never
	// opened as a new board: a fresh board restarts every epoch at 1, and
	// only a missing file may do that.
	ErrDamaged = errors.New("boltstore: store file is damaged")
)

// damagedHelp is what to do about a damaged file, said with every
// ErrDamaged.
const damagedHelp = "stop the agent's workers, then restore the file from a backup (a copy older than the damage rewinds epochs, see the operator's guide) or move it aside to start an empty board"

// Options configures Open.
type Options struct {
	// Board is the board of states a new file is seeded with; the zero
	// value means board.DefaultBoard(true), the local variant. Once a
	// definition is stored it wins (Store.Board returns it).
	Board board.Board
	// Clock is the wall clock for created/updated stamps and lease math;
	// nil means board.SystemClock{}.
	Clock board.Clock
	// LockTimeout bounds the wait for the file lock; 0 means
	// DefaultLockTimeout. bbolt's own default waits forever, which would hang
	// an agent restarted next to an orphaned process still holding the file
	// (DESIGN.md#bolt-lock; containerd opens bbolt the same way).
	LockTimeout time.Duration
}

// Store is the bbolt twin of board.Store.
type Store struct {
	db    *bolt.DB
	path  string
	def   atomic.Pointer[board.Board] // the stored board definition (board.go)
	clock board.Clock
	mode  commitMode
	c     *committer
	ck    *checkpointer
	wal   *walLog

	// layers are the memtables readers put over the file (memtable.go).
	// Readers load it; the committer and the checkpointer swap it under
	// pubMu so neither loses the other's change.
	layers atomic.Pointer[layers]
	pubMu  sync.Mutex
	// work is the committer's working memtable: the published active one
	// plus, during a batch, the batch's changes (commitBatch).
	work *memtable
	// failed holds the error that stopped writes (a failed log append or
	// checkpoint), nil while writes are accepted.
	failed atomic.Pointer[error]
	recBuf []byte // the committer's record buffer, reused

	writes      atomic.Uint64 // writes made durable through the log
	checkpoints atomic.Uint64
	replayed    uint64 // log records applied at Open (the power-cut tests check a reopen replayed)

	closeOnce sync.Once
	closeErr  error

	// viewTook is a test hook, nil in production: it runs in every read
	// once its layers are taken, before its bbolt transaction begins.
	viewTook func()
	// pruneListed is a test hook, nil in production: it runs in Prune
	// between its listing and its write.
	pruneListed func()
}

var _ board.Store = (*Store)(nil)

// Open opens (creating if needed) the store file at path and its
// write-ahead log, path+WALSuffix, applying the log records the file lacks.
// Writes are durable: each is synced to the log before it returns.
func Open(path string, opts Options) (*Store, error) {
	return open(path, opts, nil)
}

func open(path string, opts Options, vfs walVFS) (*Store, error) {
	if path == "" {
		return nil, board.Invalid("boltstore: empty store path")
	}
	b := opts.Board
	if len(b.States) == 0 {
		b = board.DefaultBoard(true)
	}
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("boltstore: open %q: board: %w", path, err)
	}
	clock := opts.Clock
	if clock == nil {
		clock = board.SystemClock{}
	}
	timeout := opts.LockTimeout
	switch {
	case timeout < 0:
		return nil, board.Invalid("boltstore: negative lock timeout %s", timeout)
	case timeout == 0:
		timeout = DefaultLockTimeout
	}
	// Only a missing file is a new board. An existing empty one is a
	// truncation or a half-written restore, which bbolt would silently
	// initialise as a fresh database with every epoch back at 1.
	if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
		return nil, fmt.Errorf("%w: %q is empty (0 bytes); only a missing file starts a new board: %s", ErrDamaged, path, damagedHelp)
	}
	db, err := openChecked(path, timeout)
	if err != nil {
		return nil, err
	}
	if err := db.Update(checkSchema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("boltstore: open %q: %w", path, err)
	}
	s := &Store{db: db, path: path, clock: clock}
	s.work = &memtable{}
	s.layers.Store(&layers{active: &memtable{}})
	if err := s.openLog(vfs); err != nil {
		_ = db.Close()
		return nil, err
	}
	var stored board.Board
	if err := db.Update(func(tx *bolt.Tx) (err error) { stored, err = loadOrSeedBoard(tx, b); return err }); err != nil {
		_ = s.wal.close()
		_ = db.Close()
		return nil, fmt.Errorf("boltstore: open %q: %w", path, err)
	}
	s.def.Store(&stored)
	s.startCommitter()
	s.startCheckpointer()
	return s, nil
}

// openChecked opens the file and runs bbolt's consistency check over it
// before anything reads it: damaged pages surface as one error naming the
// file, never as a panic in the middle of serving (bbolt panics on some
// corrupt pages, so Open's own panics are caught as well). The check reads
// every page once; on a file of 10,000 cards it takes milliseconds
// (BenchmarkOpenCheck).
func openChecked(path string, timeout time.Duration) (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				_ = db.Close()
			}
			db, err = nil, fmt.Errorf("%w: %q: bbolt could not read it (%v): %s", ErrDamaged, path, r, damagedHelp)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout: timeout,
		// NoSync stays false: every commit is fsynced (a claim that is not
		// durable is not a fence).
		NoSync:       false,
		FreelistType: bolt.FreelistMapType,
	})
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, lockedError(path, timeout, err)
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrChecksum), errors.Is(err, bolterrors.ErrVersionMismatch):
		return nil, fmt.Errorf("%w: %q is not a readable bbolt database (%w): %s", ErrDamaged, path, err, damagedHelp)
	case err != nil:
		return nil, fmt.Errorf("boltstore: open %q: %w", path, err)
	}
	var problems []string
	if err := verifyPages(path, db.Info().PageSize); err != nil {
		problems = append(problems, err.Error())
	} else if err := db.View(func(tx *bolt.Tx) error {
		for e := range tx.Check() {
			if len(problems) < 3 {
				problems = append(problems, strings.ReplaceAll(e.Error(), "\n", " "))
			}
		}
		return nil
	}); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		_ = db.Close()
		return nil, fmt.Errorf("%w: %q fails bbolt's consistency check (%s): %s", ErrDamaged, path, strings.Join(problems, "; "), damagedHelp)
	}
	return db, nil
}

// lockedError names the file and, when the kernel tells us, the pid holding
// it, so an operator can find the orphan instead of guessing.
func lockedError(path string, waited time.Duration, cause error) error {
	holder := "another process"
	if pids, err := lockHolders(path); err == nil && len(pids) > 0 {
		holder = "pid " + strconv.Itoa(pids[0])
		for _, p := range pids[1:] {
			holder += ", pid " + strconv.Itoa(p)
		}
	}
	return fmt.Errorf("%w: %q is held by %s; gave up after %s (%w): stop that process first (another agent on this file, or a store plugin one left running), "+
		"or give this one a board file of its own (store.path)", ErrLocked, path, holder, waited, cause)
}

// checkSchema stamps a new file and refuses one it cannot read. It never
// resets anything: an unknown or newer file is left exactly as found.
func checkSchema(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		empty := true
		_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			empty = false
			return nil
		})
		if !empty {
			return fmt.Errorf("%w: file has data but no schema stamp; it was not written by leasekeeper", ErrSchema)
		}
		m, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := m.Put(keySchema, []byte(strconv.Itoa(SchemaVersion))); err != nil {
			return err
		}
		for _, name := range allBuckets[1:] {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return nil
	}
	raw := meta.Get(keySchema)
	v, err := strconv.Atoi(string(raw))
	if err != nil || v < 1 {
		return fmt.Errorf("%w: unreadable schema stamp %q", ErrSchema, raw)
	}
	if v > SchemaVersion {
		return fmt.Errorf("%w: file is schema version %d, written by a newer leasekeeper; this binary reads up to version %d, upgrade it", ErrSchema, v, SchemaVersion)
	}
	// An older file is brought up to date here, in this transaction: the
	// migration lands whole with its new stamp, or not at all.
	if v < SchemaVersion {
		if err := migrate(tx, v); err != nil {
			return fmt.Errorf("%w: migrating schema version %d to %d: %w", ErrSchema, v, SchemaVersion, err)
		}
		v = SchemaVersion
	}
	for _, name := range allBuckets {
		if tx.Bucket(name) == nil {
			return fmt.Errorf("%w: schema version %d file is missing bucket %s", ErrSchema, v, name)
		}
	}
	return nil
}

// Path returns the file path.
func (s *Store) Path() string { return s.path }

// Close waits for queued writes to commit, then closes the file (releasing
// the lock). Calling it again returns the first result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.c.mu.Lock()
		s.c.closed = true
		s.c.mu.Unlock()
		close(s.c.quit)
		<-s.c.done
		close(s.ck.quit)
		<-s.ck.done
		s.closeErr = errors.Join(s.closeLog(), s.db.Close())
	})
	return s.closeErr
}

// view runs a read-only transaction, refusing a closed store with ErrClosed
// rather than bbolt's generic error.
func (s *Store) view(fn func(r *snap) error) error {
	for {
		l := s.layers.Load() // before the transaction begins (memtable.go)
		if s.viewTook != nil {
			s.viewTook()
		}
		overtaken := false
		err := s.db.View(func(tx *bolt.Tx) error {
			// A memtable newer than l reached the file in between: l
			// would shadow some of its changes and not others. The
			// layers published with it pair with this file; take them.
			applied, err := getApplied(tx)
			if err != nil {
				return err
			}
			if overtaken = applied > l.stamp; overtaken {
				return nil
			}
			return fn(newSnap(tx, l))
		})
		if overtaken {
			continue
		}
		if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
			return ErrClosed
		}
		return err
	}
}
