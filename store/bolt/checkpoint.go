package boltstore

import (
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Checkpoints (DESIGN.md#wal-checkpoint).
//
// A checkpoint copies the memtable into the bbolt file in one synced
// transaction that also stamps the index of the last log record it holds,
// then drops the log records the file now holds. The committer freezes the
// active memtable (it alone swaps layers, between batches) and goes on with
// a fresh one; the checkpointer writes the frozen one in the background and
// unpublishes it once the file has it. At most one checkpoint runs at a
// time; a memtable that grows while one runs is frozen next.

// Checkpoint thresholds: a memtable is frozen once it holds this many
// changes, or once its oldest change is this old. Both bound the work a
// reopen replays and the memory the memtable holds; neither is on a
// writer's path.
const (
	checkpointChanges  = 16384
	checkpointInterval = 200 * time.Millisecond
)

type checkpointer struct {
	work chan *memtable // a frozen memtable to write; capacity 1
	due  chan struct{}  // the interval passed with changes waiting
	quit chan struct{}
	done chan struct{}
	// mu and cond let the committer wait for a running checkpoint to end
	// (checkpointNow); the checkpointer broadcasts after each one.
	mu   sync.Mutex
	cond *sync.Cond
	// Test hooks, nil in production: committed runs once a checkpoint's
	// bbolt transaction is durable and before its log records are dropped;
	// after runs once the checkpoint is over.
	committed func(through uint64)
	after     func(through uint64)
}

func (s *Store) startCheckpointer() {
	s.ck = &checkpointer{
		work: make(chan *memtable, 1),
		due:  make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	s.ck.cond = sync.NewCond(&s.ck.mu)
	go s.checkpointLoop()
}

func (s *Store) checkpointLoop() {
	defer close(s.ck.done)
	tick := time.NewTicker(checkpointInterval)
	defer tick.Stop()
	for {
		select {
		case m := <-s.ck.work:
			s.checkpoint(m)
		case <-tick.C:
			if s.layers.Load().active.changes > 0 {
				select {
				case s.ck.due <- struct{}{}:
				default:
				}
				s.wakeCommitter()
			}
		case <-s.ck.quit:
			select {
			case m := <-s.ck.work:
				s.checkpoint(m)
			default:
			}
			return
		}
	}
}

// maybeFreeze runs on the committer between batches: it hands the active
// memtable to the checkpointer when it is large enough or the interval has
// passed, unless a checkpoint is still running.
func (s *Store) maybeFreeze() {
	// Only this goroutine sets a frozen layer, so what it loads stays
	// true until it freezes: the checkpointer may only clear one.
	cur := s.layers.Load()
	if cur.frozen != nil || cur.active.changes == 0 {
		return
	}
	if cur.active.changes < checkpointChanges {
		select {
		case <-s.ck.due:
		default:
			return
		}
	}
	s.freeze(cur)
}

// freeze hands cur's active memtable to the checkpointer; only the
// committer calls it, while no checkpoint runs.
func (s *Store) freeze(cur *layers) {
	s.work = &memtable{}
	s.pubMu.Lock()
	s.layers.Store(&layers{active: &memtable{}, frozen: cur.active, stamp: max(cur.stamp, cur.active.through)})
	s.pubMu.Unlock()
	s.ck.work <- cur.active
}

// checkpointNow writes everything acknowledged so far into the file and
// returns once the file holds it (tests and tools that read the file
// directly).
func (s *Store) checkpointNow() error {
	reply := make(chan error, 1)
	select {
	case s.c.flush <- reply:
	case <-s.c.done:
		return ErrClosed
	}
	return <-reply
}

// forceCheckpoint runs on the committer: it freezes the active memtable
// whatever its size and waits until the file holds it.
func (s *Store) forceCheckpoint() error {
	wait := func() {
		s.ck.mu.Lock()
		for s.layers.Load().frozen != nil && s.failure() == nil {
			s.ck.cond.Wait()
		}
		s.ck.mu.Unlock()
	}
	wait()
	if cur := s.layers.Load(); cur.active.changes > 0 && s.failure() == nil {
		s.freeze(cur)
		wait()
	}
	return s.failure()
}

// checkpoint writes m into the file, then unpublishes it and drops the log
// records the file now holds.
func (s *Store) checkpoint(m *memtable) {
	defer func() {
		s.ck.mu.Lock()
		s.ck.cond.Broadcast()
		s.ck.mu.Unlock()
	}()
	if err := s.failure(); err != nil {
		return // the frozen layer stays published: readers still see it
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return writeMemtable(tx, m) }); err != nil {
		// A failed bbolt commit may have failed its sync: what the file
		// holds is unknown, so nothing more is written (see commitBatch).
		s.fail(fmt.Errorf("boltstore: checkpoint of log records through %d into %q: %w", m.through, s.path, err))
		return
	}
	if s.ck.committed != nil {
		s.ck.committed(m.through)
	}
	s.pubMu.Lock()
	cur := s.layers.Load()
	s.layers.Store(&layers{active: cur.active, stamp: max(cur.stamp, m.through)})
	s.pubMu.Unlock()
	s.checkpoints.Add(1)
	// A failed truncation leaves records the file already holds: the next
	// open skips them and the next checkpoint drops them.
	_ = s.wal.truncate(m.through)
	if s.ck.after != nil {
		s.ck.after(m.through)
	}
}

// writeMemtable applies a memtable to a bbolt write transaction, bucket by
// bucket in key order, and stamps the log index it holds through.
func writeMemtable(tx *bolt.Tx, m *memtable) error {
	for bi, t := range m.maps {
		if t == nil {
			continue
		}
		b := tx.Bucket(allBuckets[bi])
		var (
			kb  []byte
			err error
		)
		t.Scan(func(e entry) bool {
			kb = append(kb[:0], e.k...)
			if e.v == nil {
				err = b.Delete(kb)
			} else {
				err = b.Put(kb, e.v)
			}
			if err != nil {
				err = fmt.Errorf("%s %q: %w", allBuckets[bi], e.k, err)
			}
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	for bi, ok := range m.hasSeq {
		if ok {
			if err := tx.Bucket(allBuckets[bi]).SetSequence(m.seqs[bi]); err != nil {
				return err
			}
		}
	}
	if m.through == 0 {
		return nil
	}
	return putApplied(tx, m.through)
}

// Stats counts what the store's log has done since Open.
type Stats struct {
	// Writes is the number of writes made durable through the log, Syncs
	// the number of log appends (one fdatasync each) that carried them:
	// Writes/Syncs is the group commit's writes per fsync.
	Writes, Syncs uint64
	// Checkpoints is the number of memtables written into the file.
	Checkpoints uint64
}

// Stats returns the log's counters.
func (s *Store) Stats() Stats {
	return Stats{Writes: s.writes.Load(), Syncs: s.wal.syncs.Load(), Checkpoints: s.checkpoints.Load()}
}
