package boltstore

import (
	"bytes"
	"fmt"

	"github.com/tidwall/btree"
	bolt "go.etcd.io/bbolt"
)

// The memtable: what the write-ahead log holds and the file does not yet
// (DESIGN.md#wal).
//
// A batch is durable once its WAL record is synced; the bbolt file receives
// it later, at a checkpoint. Until then its changes live here, in sorted
// copy-on-write trees, one per bucket. Every read sees the file through the
// memtables layered on top of it, newest first, so a reader never notices
// where a change currently lives.
//
// There are at most two memtables: the active one, which the committer
// extends batch by batch, and a frozen one that a checkpoint is copying into
// the file. Readers only see published snapshots, which never change: the
// committer publishes one after each batch is durable, and a reader keeps
// the one it started with for as long as it reads.
//
// A reader takes the layers first and begins its bbolt transaction second.
// The file only ever receives a frozen memtable's content, which is older
// than everything above it, so whatever file state the transaction sees,
// the layers override it with the newest values. The other order could pair
// a file from before a checkpoint with the layers from after it, and miss
// the checkpointed changes. One pairing is still wrong: a reader held up
// between the two steps while a later memtable (its own active one, grown
// and frozen since) reaches the file — a second checkpoint, or Close. Its
// active layer would then shadow some of the newer changes and not others;
// the file's wal_applied stamp says so (it exceeds layers.stamp), and the
// reader takes the layers again.

// memtable is one layer of changes: a B-tree per bucket (tidwall/btree,
// copy-on-write). A nil value is a deletion that hides whatever lies below.
//
// The committer owns one mutable memtable, its working copy, and applies
// each batch to it in place. Once the batch is durable it publishes a
// snapshot: copying a tree is O(1), and the working copy then copies a node
// the first time a later batch writes to it, so a published snapshot never
// changes and readers need no lock.
type memtable struct {
	maps [numBuckets]*btree.BTreeG[entry]
	// seqs holds bucket sequences set here; hasSeq says which.
	seqs   [numBuckets]uint64
	hasSeq [numBuckets]bool
	// through is the WAL index of the newest record in this layer, 0 for an
	// empty layer; changes counts the changes applied.
	through uint64
	changes int
}

type entry struct {
	k string
	v []byte
}

func entryLess(a, b entry) bool { return a.k < b.k }

// layers is what a reader pairs with its bbolt transaction.
type layers struct {
	active *memtable // never nil
	frozen *memtable // nil unless a checkpoint is running
	// stamp is the newest wal_applied the file may hold under these
	// layers: the frozen layer's last record while one is being written,
	// else the file's own stamp. A file stamped later holds a memtable
	// newer than active (a second checkpoint, or Close, ran since the
	// layers were taken), which active would shadow with older values.
	stamp uint64
}

// apply applies changes in place; only the committer's working copy is
// ever changed.
func (m *memtable) apply(cs []change) {
	for _, c := range cs {
		m.changes++
		switch c.kind {
		case changeSeq:
			m.seqs[c.bucket] = c.seq
			m.hasSeq[c.bucket] = true
		default:
			t := m.maps[c.bucket]
			if t == nil {
				t = btree.NewBTreeGOptions(entryLess, btree.Options{NoLocks: true})
				m.maps[c.bucket] = t
			}
			t.Set(entry{k: c.key, v: c.val})
		}
	}
}

// snapshot returns an unchanging copy of m for readers.
func (m *memtable) snapshot() *memtable {
	n := *m
	for i, t := range m.maps {
		if t != nil {
			n.maps[i] = t.Copy()
		}
	}
	return &n
}

// snap is a consistent read view: a bbolt transaction under memtable
// layers, newest first. The committer's batch view has its working
// memtable on top.
type snap struct {
	tx  *bolt.Tx
	mem []*memtable
}

func newSnap(tx *bolt.Tx, l *layers) *snap {
	s := &snap{tx: tx}
	if l != nil {
		s.mem = append(s.mem, l.active)
		if l.frozen != nil {
			s.mem = append(s.mem, l.frozen)
		}
	}
	return s
}

// get returns the value of key in bucket, nil when absent or deleted. The
// slice must not be kept beyond the transaction.
func (s *snap) get(bucket, key []byte) []byte {
	bi := bucketIndex(bucket)
	for _, m := range s.mem {
		if t := m.maps[bi]; t != nil {
			if e, ok := t.Get(entry{k: string(key)}); ok {
				return e.v
			}
		}
	}
	return s.tx.Bucket(bucket).Get(key)
}

// sequence returns the bucket's sequence as the newest layer has it.
func (s *snap) sequence(bucket []byte) uint64 {
	bi := bucketIndex(bucket)
	for _, m := range s.mem {
		if m.hasSeq[bi] {
			return m.seqs[bi]
		}
	}
	return s.tx.Bucket(bucket).Sequence()
}

// scan walks the keys of bucket that start with prefix, in order.
func (s *snap) scan(bucket, prefix []byte, fn func(k, v []byte) (more bool, err error)) error {
	return s.iterate(bucket, prefix, func(k, v []byte) (bool, error) {
		if !bytes.HasPrefix(k, prefix) {
			return false, nil
		}
		return fn(k, v)
	})
}

// memCursor is one memtable's position in a merged walk.
type memCursor struct {
	it  btree.IterG[entry]
	e   entry
	ok  bool
	buf []byte
}

func (c *memCursor) next() {
	if c.ok = c.it.Next(); c.ok {
		c.e = c.it.Item()
	}
}

// iterate walks the keys of bucket from from onwards, in order, merging the
// layers over the file: for a key in several, the newest wins, and a
// deletion hides the key. fn's slices are valid only during the call.
func (s *snap) iterate(bucket, from []byte, fn func(k, v []byte) (more bool, err error)) error {
	bi := bucketIndex(bucket)
	var mcs []*memCursor
	defer func() {
		for _, c := range mcs {
			c.it.Release()
		}
	}()
	for _, m := range s.mem {
		if t := m.maps[bi]; t != nil && t.Len() > 0 {
			c := &memCursor{it: t.Iter()}
			if c.ok = c.it.Seek(entry{k: string(from)}); c.ok {
				c.e = c.it.Item()
			}
			mcs = append(mcs, c)
		}
	}
	fc := s.tx.Bucket(bucket).Cursor()
	var fk, fv []byte
	if len(from) == 0 {
		fk, fv = fc.First()
	} else {
		fk, fv = fc.Seek(from)
	}
	for {
		// The smallest memtable key; on a tie the newest layer (first) wins.
		var top *memCursor
		for _, c := range mcs {
			if c.ok && (top == nil || c.e.k < top.e.k) {
				top = c
			}
		}
		if top == nil || (fk != nil && string(fk) < top.e.k) {
			if fk == nil {
				return nil
			}
			more, err := fn(fk, fv)
			if err != nil || !more {
				return err
			}
			fk, fv = fc.Next()
			continue
		}
		key, val := top.e.k, top.e.v
		top.buf = append(top.buf[:0], key...)
		kb := top.buf
		for _, c := range mcs {
			if c.ok && c.e.k == key {
				c.next()
			}
		}
		if fk != nil && string(fk) == key {
			fk, fv = fc.Next()
		}
		if val == nil {
			continue // deleted in a layer: hidden
		}
		more, err := fn(kb, val)
		if err != nil || !more {
			return err
		}
	}
}

// numBuckets is the number of top-level buckets (allBuckets).
const numBuckets = 12

// bucketIndex maps a bucket name to its place in allBuckets.
func bucketIndex(name []byte) uint8 {
	if i, ok := bucketIndexes[string(name)]; ok {
		return i
	}
	panic(fmt.Sprintf("boltstore: internal error: unknown bucket %q", name))
}

var bucketIndexes = func() map[string]uint8 {
	if len(allBuckets) != numBuckets {
		panic("boltstore: numBuckets does not match allBuckets")
	}
	m := make(map[string]uint8, len(allBuckets))
	for i, b := range allBuckets {
		m[string(b)] = uint8(i)
	}
	return m
}()
