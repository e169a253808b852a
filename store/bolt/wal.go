package boltstore

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// The write-ahead log (DESIGN.md#wal).
//
// Every batch the group committer commits becomes one record of the log,
// synced once, before any writer in the batch hears its answer. The bbolt
// file receives batches later, at checkpoints, each one a single synced
// bbolt transaction that also stamps the index of the last record it holds
// (keyWALApplied in the meta bucket). Opening the store applies every
// record after that stamp, so the file plus the log always hold every
// acknowledged write.
//
// The log is hashicorp/raft-wal (the log store Consul runs): segment files
// preallocated so a sync covers data only, a checksum over every batch
// appended, and a torn tail — a record whose append was cut short, so never
// acknowledged — dropped when it opens. It stores raft.Log entries; each of
// ours carries one batch as its Data, in the change encoding below, with a
// checksum of its own so a record damaged after it was acknowledged (in a
// sealed segment) is refused rather than applied.

// WALSuffix is appended to the board file's path to name its write-ahead
// log directory.
const WALSuffix = ".wal"

// walSegmentSize bounds one segment file. Checkpoints delete whole
// segments, so the log's disk use stays within a few of them.
const walSegmentSize = 8 << 20

var (
	// keyWALApplied (meta bucket): the index of the last log record the
	// file holds, 8 bytes big-endian.
	keyWALApplied = []byte("wal_applied")
	// keyWALClean (meta bucket): present while the file holds every
	// record of its log, which a clean Close leaves true.
	keyWALClean = []byte("wal_clean")
)

// ErrWALDamaged: the write-ahead log beside the board file cannot be read
// whole. It holds acknowledged writes the file lacks, so the store refuses
// to open rather than drop them.
var ErrWALDamaged = errors.New("boltstore: write-ahead log is damaged")

// walDamagedHelp is what to do about a damaged or missing log.
const walDamagedHelp = "it holds acknowledged writes the board file lacks, so the agent will not start without it. " +
	"Stop the agent's workers, then restore the board file and its .wal directory together from one backup, " +
	"or accept losing those writes with `leasekeeper store discard-wal FILE --yes` (epochs granted since the last checkpoint may be granted again; see the operator's guide)"

// walDamaged is ErrWALDamaged for the log in dir: what is wrong, then what
// to do.
func walDamaged(dir, format string, args ...any) error {
	return fmt.Errorf("%w: %q "+format+": %s", append(append([]any{ErrWALDamaged, dir}, args...), walDamagedHelp)...)
}

// walLog is the store's write-ahead log.
type walLog struct {
	dir  string
	w    *wal.WAL
	next uint64 // index of the next record
	// syncs counts appends, one sync each (Store.Stats sets the writes
	// they carried beside it).
	syncs atomic.Uint64
}

// openWAL opens (creating if needed) the log in dir. vfs nil means the real
// file system, with fdatasync for syncs.
func openWAL(dir string, vfs types.VFS) (*walLog, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("boltstore: write-ahead log %q: %w", dir, err)
	}
	if vfs == nil {
		vfs = dataSyncFS{walfs.New()}
	}
	w, err := wal.Open(dir,
		wal.WithSegmentFiler(segment.NewFiler(dir, vfs)),
		wal.WithSegmentSize(walSegmentSize),
		wal.WithLogger(hclog.NewNullLogger()),
	)
	if err != nil {
		// An error of the file system (no space, no permission, a
		// read-only mount) says nothing about the log's content.
		if errno := syscall.Errno(0); errors.As(err, &errno) {
			return nil, fmt.Errorf("boltstore: write-ahead log %q cannot be opened: %w", dir, err)
		}
		return nil, walDamaged(dir, "cannot be opened (%v)", err)
	}
	last, err := w.LastIndex()
	if err != nil {
		_ = w.Close()
		return nil, walDamaged(dir, "%v", err)
	}
	return &walLog{dir: dir, w: w, next: last + 1}, nil
}

// append writes rec as the next record and syncs it. It returns the
// record's index.
func (l *walLog) append(rec []byte) (uint64, error) {
	idx := l.next
	if err := l.w.StoreLogs([]*raft.Log{{Index: idx, Term: 1, Type: raft.LogCommand, Data: rec}}); err != nil {
		return 0, fmt.Errorf("boltstore: write-ahead log %q: append %d: %w", l.dir, idx, err)
	}
	l.syncs.Add(1)
	l.next++
	return idx, nil
}

// replay calls fn for every record after index after, in order.
func (l *walLog) replay(after uint64, fn func(idx uint64, cs []change) error) error {
	first, err := l.w.FirstIndex()
	if err != nil {
		return walDamaged(l.dir, "%v", err)
	}
	last, err := l.w.LastIndex()
	if err != nil {
		return walDamaged(l.dir, "%v", err)
	}
	if last <= after {
		return nil
	}
	if first == 0 || first > after+1 {
		return walDamaged(l.dir, "starts at record %d but the board file holds records only through %d: records %d to %d are missing",
			first, after, after+1, first-1)
	}
	var entry raft.Log
	for idx := after + 1; idx <= last; idx++ {
		if err := l.w.GetLog(idx, &entry); err != nil {
			return walDamaged(l.dir, "record %d: %v", idx, err)
		}
		cs, err := decodeChanges(entry.Data)
		if err != nil {
			return walDamaged(l.dir, "record %d: %v", idx, err)
		}
		if err := fn(idx, cs); err != nil {
			return err
		}
	}
	return nil
}

// truncate drops the records through index through, which the file now
// holds. One record is always kept: a log emptied whole makes raft-wal
// create and preallocate a new segment file, on every checkpoint.
func (l *walLog) truncate(through uint64) error {
	first, err := l.w.FirstIndex()
	if err != nil || first == 0 || through <= first {
		return err
	}
	if err := l.w.DeleteRange(first, through-1); err != nil {
		return fmt.Errorf("boltstore: write-ahead log %q: drop records %d to %d: %w", l.dir, first, through-1, err)
	}
	return nil
}

func (l *walLog) close() error { return l.w.Close() }

// dataSyncFS is raft-wal's file system with fdatasync in place of fsync
// after a file's first sync (which also syncs the directory that names
// it). Segment files are preallocated, so fdatasync writes the data and the
// extent changes that find it, and skips the timestamp updates fsync would
// journal on every append.
type dataSyncFS struct{ types.VFS }

func (f dataSyncFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	wf, err := f.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	// Preallocated blocks are unwritten extents: the first write to each
	// makes the sync that follows journal an extent conversion, which
	// costs as much again as the data. Writing zeros once, when the
	// segment is made, leaves every append a pure data overwrite.
	zeros := make([]byte, 1<<20)
	for off := uint64(0); off < size; off += uint64(len(zeros)) {
		n := min(uint64(len(zeros)), size-off)
		if _, err := wf.WriteAt(zeros[:n], int64(off)); err != nil {
			_ = wf.Close()
			return nil, err
		}
	}
	return &dataSyncFile{WritableFile: wf}, nil
}

func (f dataSyncFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	wf, err := f.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return &dataSyncFile{WritableFile: wf}, nil
}

type dataSyncFile struct {
	types.WritableFile
	once atomic.Bool
}

func (f *dataSyncFile) Sync() error {
	fd, ok := f.WritableFile.(interface{ Fd() uintptr })
	if !ok || !f.once.Swap(true) {
		return f.WritableFile.Sync()
	}
	for {
		err := unix.Fdatasync(int(fd.Fd()))
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// The change encoding: one record is a batch's changes in the order they
// were made, then a CRC-32C of everything before it.
//
//	change := kind:1 bucket:1 body
//	  put:      uvarint(len key) key uvarint(len value) value
//	  delete:   uvarint(len key) key
//	  sequence: uvarint(seq)

const (
	changePut uint8 = iota + 1
	changeDelete
	changeSeq
)

// change is one physical change to the file: what a record carries and a
// checkpoint or a replay applies.
type change struct {
	kind   uint8
	bucket uint8
	key    string // a string, as the overlay and the memtable key by it
	val    []byte // nil for a deletion
	seq    uint64
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func appendChange(buf []byte, c change) []byte {
	buf = append(buf, c.kind, c.bucket)
	switch c.kind {
	case changeSeq:
		return binary.AppendUvarint(buf, c.seq)
	case changePut:
		buf = binary.AppendUvarint(buf, uint64(len(c.key)))
		buf = append(buf, c.key...)
		buf = binary.AppendUvarint(buf, uint64(len(c.val)))
		return append(buf, c.val...)
	default:
		buf = binary.AppendUvarint(buf, uint64(len(c.key)))
		return append(buf, c.key...)
	}
}

// appendChanges appends cs, growing buf once for all of them.
func appendChanges(buf []byte, cs []change) []byte {
	need := 0
	for _, c := range cs {
		need += 2 + 2*binary.MaxVarintLen64 + len(c.key) + len(c.val)
	}
	buf = slices.Grow(buf, need)
	for _, c := range cs {
		buf = appendChange(buf, c)
	}
	return buf
}

// sealRecord appends the checksum that ends a record.
func sealRecord(buf []byte) []byte {
	return binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
}

func decodeChanges(rec []byte) ([]change, error) {
	if len(rec) < 4 {
		return nil, fmt.Errorf("record of %d bytes is too short", len(rec))
	}
	body, sum := rec[:len(rec)-4], binary.BigEndian.Uint32(rec[len(rec)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("record checksum %08x does not match its content (%08x)", sum, got)
	}
	var cs []change
	for len(body) > 0 {
		if len(body) < 2 {
			return nil, errors.New("record ends inside a change")
		}
		c := change{kind: body[0], bucket: body[1]}
		body = body[2:]
		if c.bucket >= numBuckets {
			return nil, fmt.Errorf("change names bucket %d of %d", c.bucket, numBuckets)
		}
		bytesField := func() ([]byte, error) {
			n, k := binary.Uvarint(body)
			if k <= 0 || n > uint64(len(body)-k) {
				return nil, errors.New("record ends inside a change")
			}
			v := body[k : k+int(n) : k+int(n)]
			body = body[k+int(n):]
			return v, nil
		}
		var key []byte
		var err error
		switch c.kind {
		case changeSeq:
			n, k := binary.Uvarint(body)
			if k <= 0 {
				return nil, errors.New("record ends inside a change")
			}
			c.seq, body = n, body[k:]
		case changePut:
			if key, err = bytesField(); err != nil {
				return nil, err
			}
			c.key = string(key)
			if c.val, err = bytesField(); err != nil {
				return nil, err
			}
			if c.val == nil {
				c.val = emptyValue
			}
		case changeDelete:
			if key, err = bytesField(); err != nil {
				return nil, err
			}
			c.key = string(key)
		default:
			return nil, fmt.Errorf("unknown change kind %d", c.kind)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// applyToFile applies changes to a bbolt write transaction.
func applyToFile(tx *bolt.Tx, cs []change) error {
	for _, c := range cs {
		b := tx.Bucket(allBuckets[c.bucket])
		var err error
		switch c.kind {
		case changeSeq:
			err = b.SetSequence(c.seq)
		case changePut:
			err = b.Put([]byte(c.key), c.val)
		default:
			err = b.Delete([]byte(c.key))
		}
		if err != nil {
			return fmt.Errorf("%s %q: %w", allBuckets[c.bucket], c.key, err)
		}
	}
	return nil
}

func putApplied(tx *bolt.Tx, idx uint64) error {
	return tx.Bucket(bucketMeta).Put(keyWALApplied, binary.BigEndian.AppendUint64(nil, idx))
}

func getApplied(tx *bolt.Tx) (uint64, error) {
	v := tx.Bucket(bucketMeta).Get(keyWALApplied)
	switch len(v) {
	case 0:
		return 0, nil
	case 8:
		return binary.BigEndian.Uint64(v), nil
	}
	return 0, fmt.Errorf("%w: unreadable %s stamp %x", ErrSchema, keyWALApplied, v)
}

// keyWALID (meta bucket and the log's own stable store): a random id that
// pairs a board file with its log, so a log from another board is never
// applied to this one.
var keyWALID = []byte("wal_id")

// walVFS is the file system the log's segments live on: nil for the real
// one; tests pass one that models a power cut.
type walVFS = types.VFS

// openLog opens the log beside the file, checks that it belongs to the
// file, and applies the records the file lacks in one synced transaction.
func (s *Store) openLog(vfs walVFS) error {
	dir := s.path + WALSuffix
	_, statErr := os.Stat(dir)
	existed := statErr == nil
	l, err := openWAL(dir, vfs)
	if err != nil {
		return err
	}
	refuse := func(err error) error {
		_ = l.close()
		if !existed {
			_ = os.RemoveAll(dir)
		}
		return err
	}
	var (
		applied uint64
		fileID  []byte
		clean   bool
	)
	if err := s.db.View(func(tx *bolt.Tx) (err error) {
		meta := tx.Bucket(bucketMeta)
		fileID = bytes.Clone(meta.Get(keyWALID))
		clean = meta.Get(keyWALClean) != nil
		applied, err = getApplied(tx)
		return err
	}); err != nil {
		return refuse(fmt.Errorf("boltstore: open %q: %w", s.path, err))
	}
	logID, err := l.w.Get(keyWALID)
	if err != nil {
		return refuse(walDamaged(dir, "reading its id: %v", err))
	}
	last := l.next - 1
	switch {
	case fileID == nil:
		// The file has never had a log: a new board, or one written before
		// the log existed (schema 3 and older, just migrated).
		if last > 0 {
			return refuse(fmt.Errorf("%w: %q holds records but %q has never had a log: it belongs to another board file; move it aside", ErrWALDamaged, dir, s.path))
		}
		// An empty log that already has an id was made by an open that
		// stopped before it stamped the file: adopt it.
		if fileID = logID; fileID == nil {
			id := make([]byte, 16)
			if _, err := rand.Read(id); err != nil {
				return refuse(err)
			}
			if err := l.w.Set(keyWALID, id); err != nil {
				return refuse(fmt.Errorf("boltstore: write-ahead log %q: %w", dir, err))
			}
			fileID = id
		}
	case logID == nil:
		// The log is new or empty while the file has had one: it was
		// deleted or replaced. That is safe only if the file held all of it.
		if !clean {
			return refuse(walDamaged(dir, "is missing or empty, and %q was not closed cleanly, so the log may have held writes the file lacks", s.path))
		}
		if last > 0 {
			return refuse(fmt.Errorf("%w: %q holds records but no id: it does not belong to %q; move it aside", ErrWALDamaged, dir, s.path))
		}
		if err := l.w.Set(keyWALID, fileID); err != nil {
			return refuse(fmt.Errorf("boltstore: write-ahead log %q: %w", dir, err))
		}
	case !bytes.Equal(fileID, logID):
		return refuse(walDamaged(dir, "belongs to another board file (log id %x, the file expects %x); restore the board file and its log together", logID, fileID))
	}
	var cs []change
	through := applied
	if err := l.replay(applied, func(idx uint64, rec []change) error {
		cs = append(cs, rec...)
		through = idx
		return nil
	}); err != nil {
		return refuse(err)
	}
	// Number on after the newest record either holds; a log that lost a
	// tail the file already held (emptied and recreated) ends before it.
	l.next = max(l.next, through+1)
	if err := s.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if err := meta.Put(keyWALID, fileID); err != nil {
			return err
		}
		if err := meta.Delete(keyWALClean); err != nil {
			return err
		}
		if err := applyToFile(tx, cs); err != nil {
			return fmt.Errorf("applying log records %d to %d: %w", applied+1, through, err)
		}
		// With the whole log in the file, an index a migration added
		// can be built from it.
		if err := buildLabelIndex(tx); err != nil {
			return err
		}
		return putApplied(tx, through)
	}); err != nil {
		return refuse(fmt.Errorf("boltstore: open %q: %w", s.path, err))
	}
	s.replayed = through - applied
	s.wal = l
	s.layers.Store(&layers{active: &memtable{}, stamp: through})
	_ = l.truncate(through)
	return nil
}

// closeLog writes every memtable into the file, marks the file clean (it
// holds the whole log) and closes the log. After a failure nothing is
// written: the log keeps what the file may lack.
func (s *Store) closeLog() error {
	var err error
	if s.failure() == nil {
		cur := s.layers.Load()
		stamp := cur.stamp
		if cur.frozen != nil {
			stamp = max(stamp, cur.frozen.through)
		}
		stamp = max(stamp, cur.active.through)
		err = s.db.Update(func(tx *bolt.Tx) error {
			if cur.frozen != nil {
				if err := writeMemtable(tx, cur.frozen); err != nil {
					return err
				}
			}
			if err := writeMemtable(tx, cur.active); err != nil {
				return err
			}
			return tx.Bucket(bucketMeta).Put(keyWALClean, []byte{1})
		})
		if err != nil {
			err = fmt.Errorf("boltstore: final checkpoint into %q: %w", s.path, err)
		} else {
			s.layers.Store(&layers{active: &memtable{}, stamp: stamp})
		}
	}
	return errors.Join(err, s.wal.close())
}

// fail stops writes for good (see commitBatch); the first error wins.
func (s *Store) fail(err error) { s.failed.CompareAndSwap(nil, &err) }

func (s *Store) failure() error {
	if p := s.failed.Load(); p != nil {
		return fmt.Errorf("boltstore: writes stopped after an I/O failure; restart the agent (the log holds every acknowledged write): %w", *p)
	}
	return nil
}

// DiscardWAL moves the write-ahead log of the board file at path aside and
// marks the file as holding everything, so the next Open starts a new log
// from the file alone. It is the operator's way out of a damaged or lost
// log, and it loses what the log held beyond the last checkpoint: a claim
// granted since then may be granted again at the same epoch, so every
// worker must be stopped first. It takes the file's lock (the agent must be
// stopped) and returns where the log was moved, "" if there was none.
func DiscardWAL(path string, lockTimeout time.Duration) (string, error) {
	if lockTimeout <= 0 {
		lockTimeout = DefaultLockTimeout
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("boltstore: %w", err)
	}
	db, err := openChecked(path, lockTimeout)
	if err != nil {
		return "", err
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil || meta.Get(keySchema) == nil {
			return fmt.Errorf("%w: %q has no schema stamp; it was not written by leasekeeper", ErrSchema, path)
		}
		return nil
	}); err != nil {
		return "", err
	}
	dir := path + WALSuffix
	moved := ""
	if _, err := os.Stat(dir); err == nil {
		moved = dir + ".discarded-" + time.Now().UTC().Format("20060102T150405Z")
		if err := os.Rename(dir, moved); err != nil {
			return "", fmt.Errorf("boltstore: moving the write-ahead log aside: %w", err)
		}
		// The rename must be durable before the file says it needs no
		// log, or a power cut could bring the old log back beside it.
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return moved, fmt.Errorf("boltstore: moving the write-ahead log aside: %w", err)
		}
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyWALClean, []byte{1})
	}); err != nil {
		return moved, fmt.Errorf("boltstore: marking %q: %w", path, err)
	}
	return moved, nil
}

// syncDir makes the entries of dir (a rename into or out of it) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
