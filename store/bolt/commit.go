package boltstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/leasekeeper/leasekeeper/board"
)

// Group commit.
//
// A durable bbolt commit costs one fdatasync, and only one write transaction
// runs at a time. bbolt's own DB.Batch waits up to 10 ms to gather calls,
// which starves a handful of writers (DESIGN.md#group-commit). Here one committer
// goroutine drains a queue instead: when it is idle it takes the first
// write at once (no added latency), and every write that arrives while a
// commit and its fsync are in flight waits in the queue and rides the next
// transaction together with the others — one fsync for all of them.
//
// Writes in one batch must not poison each other. Each write runs against an
// overlay (wtx): its puts and deletes are buffered and reach the bbolt
// transaction only when the write returns nil, so a refused write (a claim
// conflict, bad input) leaves nothing behind, and every write sees the
// effects of the writes flushed before it in the same transaction. If
// flushing itself fails, the transaction is rolled back, the failing write
// is retried alone and the rest are retried together.

// writeFunc is one store write. It must mutate the file only through w and
// must set its outputs on every run: it may run more than once when its
// batch is retried.
type writeFunc func(w *wtx) error

const (
	opQueued int32 = iota
	opTaken
	opCancelled
)

type writeOp struct {
	fn    writeFunc
	state atomic.Int32
	err   error
	done  chan struct{}
}

// commitMode selects how writes reach bbolt. Only the group committer is
// used in production; the others exist so the benchmark measures the gain
// against plain Update and against bbolt's Batch side by side.
type commitMode int

const (
	modeGroup commitMode = iota
	modeUpdate
	modeBoltBatch
)

// errNothingWritten rolls back a transaction in which no write changed
// anything, so a batch of refusals or no-ops costs no fsync.
var errNothingWritten = errors.New("nothing written")

// ErrClosed is returned by every call on a closed store.
var ErrClosed = errors.New("boltstore: store is closed")

type committer struct {
	mu     sync.Mutex
	queue  []*writeOp
	closed bool
	wake   chan struct{}
	flush  chan chan error // checkpointNow's requests
	quit   chan struct{}
	done   chan struct{}

	// Test hooks, nil in production: enqueued sees the queue length after
	// each enqueue; beforeCommit sees each batch's size before it commits.
	// They let a test pile writes into one batch deterministically.
	enqueued     func(queued int)
	beforeCommit func(batch int)
	// wrote sees the buckets each successful write changed, so a test can
	// assert which buckets a verb touches at all, even with equal bytes.
	wrote func(buckets []string)
	// began runs once a batch's bbolt read transaction has begun, before
	// any write of the batch runs.
	began func()
}

func (s *Store) startCommitter() {
	s.c = &committer{
		wake:  make(chan struct{}, 1),
		flush: make(chan chan error),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go s.commitLoop()
}

func (s *Store) commitLoop() {
	defer close(s.c.done)
	for {
		select {
		case <-s.c.wake:
			s.drain()
			s.maybeFreeze()
		case reply := <-s.c.flush:
			s.drain()
			reply <- s.forceCheckpoint()
		case <-s.c.quit:
			// Writes queued before Close still commit: their callers are
			// waiting for an answer, and "closed" would be a lie about
			// work that was accepted.
			s.drain()
			return
		}
	}
}

// drain commits batches until the queue is empty, handing the memtable to
// the checkpointer between them when it is due. Writes that arrive while
// one batch commits form the next batch.
func (s *Store) drain() {
	for {
		s.c.mu.Lock()
		batch := s.c.queue
		s.c.queue = nil
		s.c.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		taken := batch[:0]
		for _, op := range batch {
			if op.state.CompareAndSwap(opQueued, opTaken) {
				taken = append(taken, op)
			}
		}
		if len(taken) > 0 {
			if s.c.beforeCommit != nil {
				s.c.beforeCommit(len(taken))
			}
			s.commitBatch(taken)
			for _, op := range taken {
				close(op.done)
			}
		}
		// Between batches, not only once the queue runs dry: writers that
		// keep it full would otherwise grow the memtable and the log
		// without bound, never checkpointed (DESIGN.md#wal-checkpoint).
		s.maybeFreeze()
	}
}

// write runs fn durably and returns its error. A write whose context ends
// while it is still queued is withdrawn (nothing written, ctx.Err()); once
// its batch has started it is waited for, so the answer is never a guess.
func (s *Store) write(ctx context.Context, fn writeFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch s.mode {
	case modeUpdate:
		return s.writeDirect(fn, s.db.Update, errNothingWritten)
	case modeBoltBatch:
		// bbolt's Batch reruns any call that returns an error alone, so a
		// refusal must look like success to it.
		return s.writeDirect(fn, s.db.Batch, nil)
	}
	op := &writeOp{fn: fn, done: make(chan struct{})}
	s.c.mu.Lock()
	if s.c.closed {
		s.c.mu.Unlock()
		return ErrClosed
	}
	s.c.queue = append(s.c.queue, op)
	if s.c.enqueued != nil {
		s.c.enqueued(len(s.c.queue))
	}
	s.c.mu.Unlock()
	s.wakeCommitter()
	select {
	case <-op.done:
		return op.err
	case <-ctx.Done():
		if op.state.CompareAndSwap(opQueued, opCancelled) {
			return ctx.Err()
		}
		<-op.done
		return op.err
	}
}

// wakeCommitter makes the committer look at its queue (and at a due
// checkpoint) soon.
func (s *Store) wakeCommitter() {
	select {
	case s.c.wake <- struct{}{}:
	default: // it is already due to look
	}
}

// writeDirect runs one write in its own bbolt transaction, bypassing the
// log (benchmark baselines only: a store in these modes never checkpoints).
func (s *Store) writeDirect(fn writeFunc, run func(func(*bolt.Tx) error) error, nothing error) error {
	var opErr error
	err := run(func(tx *bolt.Tx) error {
		w := newWtx(newSnap(tx, nil))
		opErr = runOp(fn, w)
		if opErr != nil || w.empty() {
			return nothing
		}
		cs, err := w.changes()
		if err != nil {
			opErr = fmt.Errorf("boltstore: write: %w", err)
			return nothing
		}
		return applyToFile(tx, cs)
	})
	if opErr != nil {
		return opErr
	}
	if err != nil && !errors.Is(err, errNothingWritten) {
		return fmt.Errorf("boltstore: commit: %w", err)
	}
	return nil
}

// commitBatch runs ops against the newest state, appends their changes to
// the log as one record, syncs it, and only then publishes them to readers
// and answers the writers. A write that fails leaves nothing behind: its
// changes never left its overlay.
func (s *Store) commitBatch(ops []*writeOp) {
	if err := s.failure(); err != nil {
		for _, op := range ops {
			op.err = err
		}
		return
	}
	// The layers before the transaction, as every reader takes them
	// (memtable.go): a checkpoint that commits and unpublishes its frozen
	// layer between the two would otherwise leave the batch with neither.
	cur := s.layers.Load()
	tx, err := s.db.Begin(false)
	if err != nil {
		for _, op := range ops {
			op.err = fmt.Errorf("boltstore: commit: %w", err)
		}
		return
	}
	defer func() { _ = tx.Rollback() }()
	if s.c.began != nil {
		s.c.began()
	}
	// The working copy is the committer's own: each write sees the writes
	// before it in the batch, and readers see none of them until the
	// batch is durable and a snapshot of it is published.
	work := s.work
	r := newSnap(tx, &layers{active: work, frozen: cur.frozen})
	var (
		rec   = s.recBuf[:0]
		wrote []*writeOp
	)
	for _, op := range ops {
		w := newWtx(r)
		op.err = runOp(op.fn, w)
		if op.err != nil || w.empty() {
			continue
		}
		cs, err := w.changes()
		if err != nil {
			op.err = fmt.Errorf("boltstore: write: %w", err)
			continue
		}
		work.apply(cs)
		rec = appendChanges(rec, cs)
		wrote = append(wrote, op)
		if s.c.wrote != nil {
			s.c.wrote(w.buckets())
		}
	}
	if len(wrote) == 0 {
		return
	}
	rec = sealRecord(rec)
	if cap(rec) <= 1<<20 {
		s.recBuf = rec
	}
	idx, err := s.wal.append(rec)
	if err != nil {
		// Whether the record reached the disk is unknown, and a failed sync
		// cannot be retried (the kernel may have dropped the pages it could
		// not write): the store refuses every write from here on.
		s.fail(err)
		for _, op := range wrote {
			op.err = err
		}
		return
	}
	s.writes.Add(uint64(len(wrote)))
	work.through = idx
	pub := work.snapshot()
	s.pubMu.Lock()
	old := s.layers.Load()
	s.layers.Store(&layers{active: pub, frozen: old.frozen, stamp: old.stamp})
	s.pubMu.Unlock()
}

// runOp runs fn, turning a panic into an error: the overlay is discarded, so
// a panicking write leaves nothing behind and cannot take its batch down.
func runOp(fn writeFunc, w *wtx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("boltstore: internal error in write: %v", p)
		}
	}()
	return fn(w)
}

// wtx is one write's view of the batch transaction: reads see the
// transaction plus this write's own buffered changes; changes reach the
// transaction only in flush.
type wtx struct {
	r       *snap
	writes  map[string]map[string][]byte // bucket → key → value; nil value deletes
	events  []board.Event
	cardSeq uint64 // the cards bucket's sequence after this write, 0 if unchanged
}

func newWtx(r *snap) *wtx { return &wtx{r: r} }

// buckets lists the buckets this write changes, sorted, events included.
func (w *wtx) buckets() []string {
	out := make([]string, 0, len(w.writes)+1)
	for b := range w.writes {
		out = append(out, b)
	}
	if len(w.events) > 0 {
		out = append(out, string(bucketEvents))
	}
	slices.Sort(out)
	return out
}

func (w *wtx) empty() bool { return len(w.writes) == 0 && len(w.events) == 0 && w.cardSeq == 0 }

// nextCardSeq allocates the next card creation sequence.
func (w *wtx) nextCardSeq() uint64 {
	if w.cardSeq == 0 {
		w.cardSeq = w.r.sequence(bucketCards)
	}
	w.cardSeq++
	return w.cardSeq
}

func (w *wtx) get(bucket, key []byte) []byte {
	if m, ok := w.writes[string(bucket)]; ok {
		if v, ok := m[string(key)]; ok {
			return v
		}
	}
	return w.r.get(bucket, key)
}

// set buffers one change. The overlay is keyed by string because that is
// what a map needs; callers that already hold the key as a string (an id)
// use setKey and skip a conversion.
func (w *wtx) set(bucket, key, value []byte) { w.setKey(bucket, string(key), value) }

func (w *wtx) setKey(bucket []byte, key string, value []byte) {
	if w.writes == nil {
		w.writes = map[string]map[string][]byte{}
	}
	m, ok := w.writes[string(bucket)]
	if !ok {
		m = map[string][]byte{}
		w.writes[string(bucket)] = m
	}
	m[key] = value
}

// reserve sizes the overlay of bucket for n more changes, so a write that
// knows its size up front (a batch renewal) does not grow the map step by
// step.
func (w *wtx) reserve(bucket []byte, n int) {
	if w.writes == nil {
		w.writes = map[string]map[string][]byte{}
	}
	if _, ok := w.writes[string(bucket)]; !ok {
		w.writes[string(bucket)] = make(map[string][]byte, n)
	}
}

func (w *wtx) put(bucket, key, value []byte) {
	if value == nil {
		value = emptyValue
	}
	w.set(bucket, key, value)
}

func (w *wtx) del(bucket, key []byte) { w.set(bucket, key, nil) }

// scan walks the keys of bucket that start with prefix, in order, as the
// transaction holds them. It does not merge this write's own buffered
// changes, so a write may only scan a bucket it has not changed yet; the
// check turns a violation into an error instead of a silently stale read.
func (w *wtx) scan(bucket, prefix []byte, fn func(k, v []byte) (more bool, err error)) error {
	if len(w.writes[string(bucket)]) > 0 {
		return fmt.Errorf("boltstore: internal error: scan of %s after writing to it", bucket)
	}
	return w.r.scan(bucket, prefix, fn)
}

// emit queues an event; its seq is assigned at flush, in commit order.
// Machine-reason events blank the actor so no effect layer attributes a
// machine decision to a person (DESIGN.md#machine-reasons).
func (w *wtx) emit(ev board.Event) {
	if board.IsMachineReason(ev.Reason) {
		ev.Actor = ""
	}
	ev.At = normTime(ev.At)
	w.events = append(w.events, ev)
}

// changes turns the write's overlay into the physical changes it makes,
// in a fixed order: buckets in allBuckets order, keys sorted (bbolt inserts
// into sorted node slices, and a 10,000-claim renewal in map order would
// shift them over and over), then the events with their sequence numbers,
// assigned here in commit order. It refuses what bbolt would refuse at the
// checkpoint, so a bad write fails alone now instead of failing the
// checkpoint later.
func (w *wtx) changes() ([]change, error) {
	n := len(w.events) + 2
	for _, m := range w.writes {
		n += len(m)
	}
	cs := make([]change, 0, n)
	for bi, name := range allBuckets {
		m := w.writes[string(name)]
		if len(m) == 0 {
			continue
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			switch {
			case k == "":
				return nil, fmt.Errorf("%s: %w", name, bolterrors.ErrKeyRequired)
			case len(k) > bolt.MaxKeySize:
				return nil, fmt.Errorf("%s: key of %d bytes: %w", name, len(k), bolterrors.ErrKeyTooLarge)
			}
			c := change{kind: changePut, bucket: uint8(bi), key: k, val: m[k]}
			if c.val == nil {
				c.kind = changeDelete
			} else if len(c.val) > bolt.MaxValueSize {
				return nil, fmt.Errorf("%s %q: %w", name, k, bolterrors.ErrValueTooLarge)
			}
			cs = append(cs, c)
		}
	}
	if w.cardSeq != 0 {
		cs = append(cs, change{kind: changeSeq, bucket: bucketIndex(bucketCards), seq: w.cardSeq})
	}
	if len(w.events) == 0 {
		return cs, nil
	}
	eb := bucketIndex(bucketEvents)
	seq := w.r.sequence(bucketEvents)
	for _, ev := range w.events {
		seq++
		ev.Seq = int64(seq)
		v, err := json.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("encode event: %w", err)
		}
		cs = append(cs, change{kind: changePut, bucket: eb, key: string(seqKey(seq)), val: v})
	}
	return append(cs, change{kind: changeSeq, bucket: eb, seq: seq}), nil
}

// getCard reads a whole card through the overlay: its document and its
// claim record.
func (w *wtx) getCard(id string) (*cardRecord, error) {
	key := []byte(id)
	v := w.get(bucketCards, key)
	if v == nil {
		return nil, board.NotFound("card", id)
	}
	return decodeCard(v, w.get(bucketClaims, key))
}

// putCard writes a card and brings every index in line with it. prev is the
// card as it was before this write, nil for a new card. The claim record is
// written only when the claim family changed, so an ordinary write never
// touches it.
func (w *wtx) putCard(prev, next *cardRecord) error {
	normalizeCard(&next.Card)
	v, err := encodeCardDoc(next)
	if err != nil {
		return fmt.Errorf("encode card %q: %w", next.ID, err)
	}
	// Only entries that appear, disappear or change value are written, so a
	// write touches no index it does not change (and may still scan it).
	var prevIdx []indexEntry
	if prev != nil {
		prevIdx = indexEntries(prev)
	}
	nextIdx := indexEntries(next)
	for _, e := range prevIdx {
		if !slices.ContainsFunc(nextIdx, func(n indexEntry) bool { return sameEntry(e, n) }) {
			w.del(e.bucket, e.key)
		}
	}
	for _, n := range nextIdx {
		unchanged := slices.ContainsFunc(prevIdx, func(e indexEntry) bool {
			return sameEntry(e, n) && bytes.Equal(e.value, n.value)
		})
		if !unchanged {
			w.put(n.bucket, n.key, n.value)
		}
	}
	w.setKey(bucketCards, next.ID, v)
	fam := familyOf(&next.Card)
	var prevFam claimFamily
	if prev != nil {
		prevFam = familyOf(&prev.Card)
	}
	if !fam.equal(prevFam) {
		w.setKey(bucketClaims, next.ID, appendClaim(nil, fam))
	}
	return nil
}

// setLease moves the lease of a claimed card to until: its claim record
// and its lease index entry, nothing else. rec is the card's current claim
// record; the new one is appended to buf, which is returned, so a batch of
// renewals can share one allocation. The caller has checked that until is
// later than the current lease (a lease never moves backwards), except for
// ExpireClaimOwned, which ends a lease early on the holder's word.
func (w *wtx) setLease(id string, rec []byte, until time.Time, buf []byte) ([]byte, error) {
	if err := checkClaim(rec); err != nil {
		return buf, fmt.Errorf("card %q: %w", id, err)
	}
	if len(claimMarker(rec)) == 0 {
		return buf, fmt.Errorf("card %q: internal error: lease change on a free card", id)
	}
	start := len(buf)
	buf = append(buf, rec...)
	next := buf[start:len(buf):len(buf)]
	putTime(next[claimOffLease:], until)
	if prevUntil, err := getTime(rec[claimOffLease:]); err != nil {
		return buf, fmt.Errorf("card %q: %w", id, err)
	} else if !prevUntil.IsZero() {
		w.setKey(bucketIdxLease, leaseKeyString(prevUntil, id), nil)
	}
	w.setKey(bucketClaims, id, next)
	w.setKey(bucketIdxLease, leaseKeyString(until, id), emptyValue)
	return buf, nil
}

// now reads the injected clock once per write, normalised like stored times.
func (s *Store) now() time.Time { return normTime(s.clock.Now()) }
