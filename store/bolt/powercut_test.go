package boltstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft-wal/types"
	bolt "go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/board"
)

// The power-cut model (see wal.go): every write a caller heard succeed
// survives a cut at any moment, and the store that opens after it is whole.
//
// The log's segment files live in cutFS, an in-memory raft-wal VFS that
// keeps each file's bytes as they are now (the page cache) and as of its
// last Sync (the disk). A cut freezes it: every later call that would
// change a file blocks at entry, and the image of each file is its synced
// bytes, plus, at random, a torn prefix of what was written since, or
// some of its sectors and not others. The board file's image is the copy taken in the
// checkpointer's committed hook (the last checkpoint whose synced bbolt
// commit completed), or the file as it was at open. The workload's goroutines
// record every answer they heard; after the cut the image is opened with
// the real file system and every recorded answer is looked for.
//
// A seed fixes the cut points and the workers' choices (not the goroutines'
// interleaving); a failure names it. Replay one with
//
//	go test -race ./store/bolt/ -run TestPowerCut -powercut.seed=N
//
// and run more with -powercut.iters=N.

var (
	powercutSeed  = flag.Uint64("powercut.seed", 0, "replay TestPowerCut* with this seed only")
	powercutIters = flag.Int("powercut.iters", 8, "seeds TestPowerCutLosesNoAcknowledgedWrite runs")
)

var errPowerCut = errors.New("power cut (test)")

// What a cut keeps of the bytes written to a segment file since its last
// sync.
const (
	tailRandom = iota
	tailNone   // nothing
	tailTorn   // a random prefix
	// tailSectors: each 512-byte sector of a random prefix of the region
	// reached the disk or did not, in any order. A segment is written with
	// zeros and synced when it is made (dataSyncFS), so a sector that did
	// not is what it was before: zeros, or nothing past the file's end.
	// Random bytes there would model a disk that invents content, which no
	// checksum-framed log tells from a record (raft-wal can read such bytes
	// as a sealing frame and refuse to append).
	tailSectors
)

// cutFile is one segment file.
type cutFile struct {
	data    []byte // as readers see it now
	synced  []byte // as of the last Sync
	size    int    // preallocated length: zeros beyond data
	durable bool   // its directory entry survives a cut (first Sync done)
}

// cutFS is the segment files' VFS. All files live in one directory.
type cutFS struct {
	mu    sync.Mutex
	files map[string]*cutFile
	calls int // calls that change a file, so far
	cutAt int // the call that cuts, 0 for none
	// cutAtSync, when set, cuts at that Sync instead (before it syncs),
	// and tail fixes what the image keeps of unsynced bytes (tail*).
	cutAtSync int
	nSyncs    int
	tail      int
	unsynced  int // bytes written but not synced at the cut, over all files
	frozen    bool
	rng       *rand.Rand // for the image; used under mu
	image     map[string][]byte
	cutCh     chan struct{} // closed at the cut, once image is set
	thawCh    chan struct{} // closed when the cut is over: parked calls fail
	syncs     atomic.Int64
}

func newCutFS(seed uint64, image map[string][]byte) *cutFS {
	fs := &cutFS{
		files:  map[string]*cutFile{},
		rng:    rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		cutCh:  make(chan struct{}),
		thawCh: make(chan struct{}),
	}
	for name, b := range image {
		fs.files[name] = &cutFile{data: bytes.Clone(b), synced: bytes.Clone(b), size: len(b), durable: true}
	}
	return fs
}

// change runs op, which changes a file, unless the power is cut: then it
// blocks until the cut is over and fails. op runs under the lock, so no
// change lands after the image is taken.
func (fs *cutFS) change(isSync bool, op func() error) error {
	fs.mu.Lock()
	if !fs.frozen {
		fs.calls++
		if isSync {
			fs.nSyncs++
		}
		if fs.calls == fs.cutAt || (isSync && fs.nSyncs == fs.cutAtSync) {
			fs.freezeLocked()
		}
	}
	if fs.frozen {
		fs.mu.Unlock()
		<-fs.thawCh
		return errPowerCut
	}
	defer fs.mu.Unlock()
	return op()
}

// freeze cuts the power now (from a hook); false if it was already cut.
func (fs *cutFS) freeze() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.frozen {
		return false
	}
	fs.freezeLocked()
	return true
}

// freezeLocked takes the image every file would have after a cut now.
func (fs *cutFS) freezeLocked() {
	fs.frozen = true
	fs.image = map[string][]byte{}
	for name, f := range fs.files {
		if !f.durable {
			// Created, never synced: the directory entry may or may not
			// have reached the disk, and nothing in it was acknowledged.
			if fs.rng.IntN(2) == 0 {
				continue
			}
		}
		img := bytes.Clone(f.synced)
		// The region written since the last sync: from the first byte
		// that differs to the last.
		n := max(len(f.data), len(img))
		lo, hi := -1, -1
		for i := range n {
			if at(f.data, i) != at(img, i) {
				if lo < 0 {
					lo = i
				}
				hi = i + 1
			}
		}
		if lo >= 0 {
			fs.unsynced += hi - lo
			r := lo + fs.rng.IntN(hi-lo+1)
			mode := fs.tail
			if mode == tailRandom {
				mode = tailNone + fs.rng.IntN(3)
			}
			switch mode {
			case tailNone: // none of it reached the disk
			case tailTorn: // a prefix did
				img = grow(img, r)
				copy(img[lo:r], f.data[lo:r])
			case tailSectors: // some sectors of the region did, some did not
				img = grow(img, r)
				for sec := lo &^ 511; sec < r; sec += 512 {
					if fs.rng.IntN(2) == 0 {
						continue
					}
					from, to := max(sec, lo), min(sec+512, r)
					copy(img[from:to], f.data[from:to])
				}
			}
		}
		// The preallocated zeros past the data are left out: raft-wal
		// reads a short file the same way.
		fs.image[name] = img
	}
	close(fs.cutCh)
}

// thaw ends the cut: every parked and later change fails.
func (fs *cutFS) thaw() { close(fs.thawCh) }

func at(b []byte, i int) byte {
	if i < len(b) {
		return b[i]
	}
	return 0
}

func grow(b []byte, n int) []byte {
	if len(b) < n {
		b = append(b, make([]byte, n-len(b))...)
	}
	return b
}

func (fs *cutFS) ListDir(string) ([]string, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	names := make([]string, 0, len(fs.files))
	for n := range fs.files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func (fs *cutFS) Create(_, name string, size uint64) (types.WritableFile, error) {
	var f *cutFile
	err := fs.change(false, func() error {
		if _, ok := fs.files[name]; ok {
			return os.ErrExist
		}
		f = &cutFile{size: int(size)}
		fs.files[name] = f
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &cutHandle{fs: fs, f: f}, nil
}

// Delete is durable when it returns, as raft-wal's own FS syncs the
// directory after the unlink.
func (fs *cutFS) Delete(_, name string) error {
	return fs.change(false, func() error {
		if _, ok := fs.files[name]; !ok {
			return os.ErrNotExist
		}
		delete(fs.files, name)
		return nil
	})
}

func (fs *cutFS) open(name string) (*cutHandle, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, ok := fs.files[name]
	if !ok {
		return nil, fmt.Errorf("open %s: %w", name, os.ErrNotExist)
	}
	return &cutHandle{fs: fs, f: f}, nil
}

func (fs *cutFS) OpenReader(_, name string) (types.ReadableFile, error) { return fs.open(name) }
func (fs *cutFS) OpenWriter(_, name string) (types.WritableFile, error) { return fs.open(name) }

type cutHandle struct {
	fs *cutFS
	f  *cutFile
}

func (h *cutHandle) ReadAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	end := int64(max(len(h.f.data), h.f.size))
	if off >= end {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), end-off))
	clear(p[:n])
	if off < int64(len(h.f.data)) {
		copy(p[:n], h.f.data[off:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (h *cutHandle) WriteAt(p []byte, off int64) (int, error) {
	err := h.fs.change(false, func() error {
		h.f.data = grow(h.f.data, int(off)+len(p))
		copy(h.f.data[off:], p)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Sync makes the file's bytes and its directory entry durable (raft-wal's
// FS syncs the directory on a file's first Sync).
func (h *cutHandle) Sync() error {
	return h.fs.change(true, func() error {
		h.f.synced = bytes.Clone(h.f.data)
		h.f.durable = true
		h.fs.syncs.Add(1)
		return nil
	})
}

func (h *cutHandle) Close() error { return nil }

// acked is everything callers heard succeed, across every cut.
type acked struct {
	mu       sync.Mutex
	cards    map[string]bool
	epochs   map[string]int64 // card → highest epoch granted
	verdicts map[string]verdictAck
	events   map[int64]string // seq → the event, as JSON
}

type verdictAck struct {
	card   string
	epoch  int64
	status board.RunStatus
	state  string // where the verdict filed the card
}

func newAcked() *acked {
	return &acked{cards: map[string]bool{}, epochs: map[string]int64{}, verdicts: map[string]verdictAck{}, events: map[int64]string{}}
}

func (a *acked) grant(card string, tok board.ClaimToken) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.epochs[card] = max(a.epochs[card], tok.Epoch)
}

func (a *acked) cardList() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.cards))
	for c := range a.cards {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// cutWorker runs random verbs until the power is cut, recording what it
// was told.
type cutWorker struct {
	s       *Store
	a       *acked
	rng     *rand.Rand
	marker  string
	prefix  string
	n       int
	lastSeq int64
	held    map[string]board.StartResult // card → a run this worker started
	tokens  map[string]board.ClaimToken
}

// step runs one verb; it returns an error only for an answer no verb should
// give before the cut.
func (w *cutWorker) step(t *testing.T) error {
	ctx := t.Context()
	w.n++
	cards := w.a.cardList()
	pick := func() string {
		if len(cards) == 0 {
			return "none"
		}
		return cards[w.rng.IntN(len(cards))]
	}
	var err error
	switch w.rng.IntN(13) {
	case 0, 1:
		id := fmt.Sprintf("%s-%d", w.prefix, w.n)
		if _, err = w.s.CreateCard(ctx, board.CreateCardParams{ID: id, Title: strings.Repeat("t", w.rng.IntN(400))}); err == nil {
			w.a.mu.Lock()
			w.a.cards[id] = true
			w.a.mu.Unlock()
		}
	case 2:
		c := pick()
		var got board.Card
		if got, err = w.s.Claim(ctx, board.ClaimParams{Card: c, Marker: w.marker, Lease: lease}); err == nil {
			w.a.grant(c, got.Token())
			w.tokens[c] = got.Token()
		}
	case 3:
		var c board.Card
		if c, err = w.s.ClaimNext(ctx, board.ClaimNextParams{Marker: w.marker, Lease: lease}); err == nil {
			w.a.grant(c.ID, c.Token())
			w.tokens[c.ID] = c.Token()
		}
	case 4, 5:
		run := fmt.Sprintf("run-%s-%d", w.prefix, w.n)
		var st board.StartResult
		st, err = w.s.Start(ctx, board.StartParams{Next: true, Marker: w.marker, Lease: lease, Fresh: true, Run: board.Run{ID: run, Host: "h", PID: 1}})
		if err == nil {
			w.a.grant(st.Card.ID, st.Token)
			w.held[st.Card.ID] = st
			w.tokens[st.Card.ID] = st.Token
		}
	case 6, 7:
		for c, st := range w.held {
			delete(w.held, c)
			status := []board.RunStatus{board.RunFinished, board.RunFailed, board.RunFailedResumable}[w.rng.IntN(3)]
			var fin board.FinishResult
			fin, err = w.s.Finish(ctx, board.FinishParams{Card: c, Token: st.Token, RunID: st.Run.ID, Status: status})
			if err == nil {
				w.a.mu.Lock()
				w.a.verdicts[st.Run.ID] = verdictAck{card: c, epoch: st.Token.Epoch, status: status, state: fin.Card.State}
				w.a.mu.Unlock()
			}
			break
		}
	case 8:
		var hs []board.Hold
		for c, tok := range w.tokens {
			hs = append(hs, board.Hold{Card: c, Token: tok})
		}
		if len(hs) > 0 {
			_, err = w.s.RenewClaims(ctx, board.RenewClaimsParams{Holds: hs, Lease: lease})
		}
	case 9:
		for c, tok := range w.tokens {
			delete(w.tokens, c)
			delete(w.held, c)
			err = w.s.ReleaseOwned(ctx, board.OwnedParams{Card: c, Token: tok})
			break
		}
	case 10, 12:
		// What a reader is shown is acknowledged too: the store publishes
		// a batch only once its record is synced.
		var evs []board.Event
		if evs, err = w.s.Events(ctx, board.EventsParams{After: max(0, w.lastSeq-int64(w.rng.IntN(8))), Limit: 50}); err == nil {
			w.a.mu.Lock()
			for _, ev := range evs {
				b, _ := json.Marshal(ev)
				w.a.events[ev.Seq] = string(b)
				w.lastSeq = max(w.lastSeq, ev.Seq)
			}
			w.a.mu.Unlock()
		}
	case 11:
		if w.rng.IntN(3) == 0 {
			err = w.s.checkpointNow()
		}
	}
	switch {
	case err == nil,
		errors.Is(err, board.ErrClaimConflict),
		errors.Is(err, board.ErrNotFound),
		errors.Is(err, board.ErrTransitionRejected),
		errors.Is(err, board.ErrWaitingOnBlockers):
		return nil
	}
	return err
}

// cutPlan says where one cycle cuts the power.
type cutPlan struct {
	call       int  // cut at this call that changes a segment file
	sync       int  // or at this Sync of a segment file (0: use checkpoint)
	tail       int  // what the image keeps of unsynced bytes (tail*)
	checkpoint int  // else in the committed hook of this checkpoint
	during     bool // with the board file as before that checkpoint's commit
}

func (p cutPlan) String() string {
	switch {
	case p.call > 0:
		return fmt.Sprintf("cut at segment-file call %d", p.call)
	case p.sync > 0:
		return fmt.Sprintf("cut at segment-file sync %d", p.sync)
	case p.during:
		return fmt.Sprintf("cut during the bbolt commit of checkpoint %d", p.checkpoint)
	}
	return fmt.Sprintf("cut between the bbolt commit of checkpoint %d and its log truncation", p.checkpoint)
}

// crashImage is what a cut leaves on disk.
type crashImage struct {
	board    []byte
	meta     []byte            // raft-wal's wal-meta.db
	segments map[string][]byte // segment files
	unsynced int               // bytes written but not synced at the cut
}

// write lays the image out as the board file path and its log directory.
func (im crashImage) write(t *testing.T, path string) {
	t.Helper()
	dir := path + WALSuffix
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, im.board, 0o600); err != nil {
		t.Fatal(err)
	}
	if im.meta != nil {
		if err := os.WriteFile(filepath.Join(dir, "wal-meta.db"), im.meta, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range im.segments {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// runUntilCut opens the store at path over a cutFS holding segs, runs the
// workload until plan cuts the power, and returns what the cut left.
func runUntilCut(t *testing.T, seed uint64, path string, segs map[string][]byte, plan cutPlan, a *acked, clock *fakeClock, cycle int) crashImage {
	t.Helper()
	fs := newCutFS(seed, segs)
	fs.tail = plan.tail
	s, err := open(path, Options{Clock: clock}, fs)
	if err != nil {
		t.Fatalf("open before cut %d: %v", cycle, err)
	}
	// The cut is armed once open has returned, counting from there: a cut
	// inside open (the new log's first segment file is call 1) would park
	// it for good, since nothing thaws the file system before it returns.
	fs.mu.Lock()
	if plan.call > 0 {
		fs.cutAt = fs.calls + plan.call
	}
	if plan.sync > 0 {
		fs.cutAtSync = fs.nSyncs + plan.sync
	}
	fs.mu.Unlock()
	atOpen, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		imgMu  sync.Mutex
		images = [][]byte{atOpen} // the board file after each completed checkpoint
		cut    crashImage
		cutMu  sync.Mutex
	)
	metaPath := filepath.Join(path+WALSuffix, "wal-meta.db")
	// takeCut completes the image once the segment files are frozen.
	//
	// wal-meta.db is raft-wal's bbolt file, written only by its commits
	// (segment rotation, truncation), each synced, and every commit comes
	// before the segment-file change it describes (a Create after the
	// rotation's commit, a Delete after the truncation's). Copying it after
	// the freeze is therefore a state a real cut could leave: the segment
	// files as of the freeze, and a meta file at least as new, at worst
	// ahead by a commit whose file change never happened — raft-wal
	// recreates a missing tail and deletes segments its meta no longer
	// lists. A copy that overlaps a commit is what bbolt survives on a
	// real cut: the meta page is written after the data it points at, and
	// a torn one fails its checksum and the previous one is used.
	//
	// The board image is the newest completed checkpoint's copy, taken
	// after the meta copy, so a truncation the meta shows is always one the
	// board file already holds (the log drops records only after the hook).
	takeCut := func(boardImg []byte) {
		meta, err := os.ReadFile(metaPath)
		if err != nil {
			panic(err)
		}
		if boardImg == nil {
			imgMu.Lock()
			boardImg = images[len(images)-1]
			imgMu.Unlock()
		}
		cutMu.Lock()
		cut = crashImage{board: boardImg, meta: meta, segments: fs.image, unsynced: fs.unsynced}
		cutMu.Unlock()
	}
	hookDone := make(chan struct{})
	var hookOnce sync.Once
	s.ck.committed = func(through uint64) {
		img, err := os.ReadFile(path)
		if err != nil {
			panic(err)
		}
		imgMu.Lock()
		images = append(images, img)
		n := len(images) - 1
		prev := images[n-1]
		imgMu.Unlock()
		if plan.call == 0 && plan.sync == 0 && n == plan.checkpoint && fs.freeze() {
			// The checkpointer is stopped here: its commit is durable, its
			// truncation has not run.
			if plan.during {
				takeCut(prev)
			} else {
				takeCut(img)
			}
			hookOnce.Do(func() { close(hookDone) })
			<-fs.thawCh
		}
	}
	var (
		wg       sync.WaitGroup
		failMu   sync.Mutex
		failures []error
		ops      atomic.Int64
	)
	const maxOps = 20000
	for i := range 4 {
		w := &cutWorker{
			s: s, a: a, rng: rand.New(rand.NewPCG(seed, uint64(cycle*16+i))),
			marker: fmt.Sprintf("host-%d", 100+i), prefix: fmt.Sprintf("c%d-w%d", cycle, i),
			held: map[string]board.StartResult{}, tokens: map[string]board.ClaimToken{},
		}
		wg.Go(func() {
			for {
				// Reads go on between the cut and the end of it: what they
				// show must have been synced before the cut.
				select {
				case <-fs.thawCh:
					return
				default:
				}
				if ops.Add(1) > maxOps {
					return
				}
				if err := w.step(t); err != nil {
					select {
					case <-fs.cutCh: // writes fail once the power is cut
					default:
						failMu.Lock()
						failures = append(failures, err)
						failMu.Unlock()
					}
					return
				}
			}
		})
	}
	// The cut comes from a segment-file call or from the hook; either way
	// cutCh closes first. A hook cut has taken the whole image already.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-fs.cutCh:
	case <-done:
		select {
		case <-fs.cutCh:
		default:
			t.Fatalf("cycle %d: the workload ended (%d ops, errors %v) before the %s", cycle, ops.Load(), failures, plan)
		}
	}
	if plan.call > 0 || plan.sync > 0 {
		takeCut(nil)
	} else {
		<-hookDone
	}
	fs.thaw()
	wg.Wait()
	_ = s.Close() // fails: the log is gone
	if len(failures) > 0 {
		t.Fatalf("cycle %d: a verb failed before the cut: %v", cycle, failures)
	}
	cutMu.Lock()
	defer cutMu.Unlock()
	return cut
}

// checkImage opens a copy of the image with the real file system and
// looks for every acknowledged write in it.
// It returns how many log records the open replayed.
func checkImage(t *testing.T, im crashImage, a *acked, clock *fakeClock, what string) (replayed uint64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "board.db")
	im.write(t, path)
	s, err := Open(path, Options{Clock: clock})
	if err != nil {
		t.Fatalf("%s: Open after the cut: %v", what, err)
	}
	defer s.Close()
	ctx := t.Context()
	a.mu.Lock()
	defer a.mu.Unlock()
	var problems []string
	bad := func(f string, args ...any) { problems = append(problems, fmt.Sprintf(f, args...)) }
	for id := range a.cards {
		if _, err := s.GetCard(ctx, board.GetCardParams{ID: id}); err != nil {
			bad("acknowledged card %q: %v", id, err)
		}
	}
	for id, e := range a.epochs {
		c, err := s.GetCard(ctx, board.GetCardParams{ID: id})
		if err != nil {
			bad("card %q granted epoch %d: %v", id, e, err)
			continue
		}
		if c.ClaimEpoch < e {
			bad("card %q: epoch %d, but epoch %d was granted", id, c.ClaimEpoch, e)
		}
	}
	for run, v := range a.verdicts {
		r, err := s.GetRun(ctx, board.GetRunParams{ID: run})
		if err != nil {
			bad("run %q (verdict %s acknowledged): %v", run, v.status, err)
			continue
		}
		// A later fresh Start cancels a resumable run it does not take over.
		superseded := false
		if c, err := s.GetCard(ctx, board.GetCardParams{ID: v.card}); err == nil {
			superseded = v.status == board.RunFailedResumable && r.Status == board.RunCancelled && c.ClaimEpoch > v.epoch
		}
		if (r.Status != v.status && !superseded) || r.Epoch != v.epoch {
			bad("run %q: status %s epoch %d, acknowledged %s under epoch %d", run, r.Status, r.Epoch, v.status, v.epoch)
		}
		// Only a later claim may have moved the card since its filing.
		if c, err := s.GetCard(ctx, board.GetCardParams{ID: v.card}); err == nil && c.ClaimEpoch == v.epoch && c.State != v.state {
			bad("card %q: in %s, but its verdict filed it in %s and nothing claimed it since", v.card, c.State, v.state)
		}
	}
	evs, err := s.Events(ctx, board.EventsParams{After: 0, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[int64]string{}
	for _, ev := range evs {
		b, _ := json.Marshal(ev)
		bySeq[ev.Seq] = string(b)
	}
	for seq, want := range a.events {
		if got, ok := bySeq[seq]; !ok {
			bad("event %d was read but is gone: %s", seq, want)
		} else if got != want {
			bad("event %d was read as %s, now it is %s", seq, want, got)
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		if len(problems) > 12 {
			problems = append(problems[:12], fmt.Sprintf("... and %d more", len(problems)-12))
		}
		t.Fatalf("%s: after reopening (%d log records replayed):\n%s", what, s.replayed, strings.Join(problems, "\n"))
	}
	checkIndexes(t, s)
	if err := settled(t, s).View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}); err != nil {
		t.Fatalf("%s: bbolt check: %v", what, err)
	}
	// A claim after the reopen is a new epoch above every one granted.
	for id, e := range a.epochs {
		c, err := s.GetCard(ctx, board.GetCardParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if c.Claimed() {
			if err := s.Release(ctx, board.ReleaseParams{Card: id, Marker: c.Claim, Actor: "uid:0"}); err != nil {
				t.Fatalf("%s: release %q: %v", what, id, err)
			}
		}
		card, err := s.Claim(ctx, board.ClaimParams{Card: id, Marker: "host-999", Lease: lease})
		tok := card.Token()
		if err != nil {
			if errors.Is(err, board.ErrWaitingOnBlockers) || errors.Is(err, board.ErrTransitionRejected) {
				continue
			}
			t.Fatalf("%s: claim %q after the cut: %v", what, id, err)
		}
		if tok.Epoch <= e {
			t.Errorf("%s: card %q: claim after the cut got epoch %d, but epoch %d was granted before it", what, id, tok.Epoch, e)
		}
	}
	return s.replayed
}

// powerCutSeeds lists the seeds a test runs: the replayed one, or n.
func powerCutSeeds(n int) []uint64 {
	if *powercutSeed != 0 {
		return []uint64{*powercutSeed}
	}
	if testing.Short() {
		n = max(1, n/4)
	}
	base := uint64(time.Now().UnixNano())
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)*7919
	}
	return out
}

// runPowerCut runs cycles of workload, cut, check and restart from the
// image, each cut where plan picks.
// It returns each cycle's image and the records its reopen replayed.
func runPowerCut(t *testing.T, seed uint64, cycles int, plan func(rng *rand.Rand, cycle int) cutPlan) (ims []crashImage, replayed []uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	clock := newFakeClock()
	a := newAcked()
	var prev crashImage
	for cycle := range cycles {
		p := plan(rng, cycle)
		// A fresh directory per cycle: the store restarts from the image,
		// its segment files in a new cutFS, the rest on disk.
		path := filepath.Join(t.TempDir(), "board.db")
		if cycle > 0 {
			crashImage{board: prev.board, meta: prev.meta}.write(t, path)
		}
		im := runUntilCut(t, seed+uint64(cycle), path, prev.segments, p, a, clock, cycle)
		what := fmt.Sprintf("seed %d (replay: -powercut.seed=%d), cycle %d, %s", seed, seed, cycle, p)
		replayed = append(replayed, checkImage(t, im, a, clock, what))
		ims = append(ims, im)
		prev = im
	}
	return ims, replayed
}

// Cuts at random points of the log's file calls and at random checkpoints,
// three cut/reopen cycles per seed.
func TestPowerCutLosesNoAcknowledgedWrite(t *testing.T) {
	for _, seed := range powerCutSeeds(*powercutIters) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runPowerCut(t, seed, 3, func(rng *rand.Rand, _ int) cutPlan {
				switch rng.IntN(4) {
				case 0:
					return cutPlan{checkpoint: 1 + rng.IntN(3), during: rng.IntN(2) == 0}
				default:
					return cutPlan{call: 1 + rng.IntN(120)}
				}
			})
		})
	}
}

// A cut in the middle of an append: the record written but not synced
// reaches the disk torn, or only some of its sectors. raft-wal drops it (it was never
// acknowledged) and everything before it is there.
func TestPowerCutTornLogTail(t *testing.T) {
	for _, tail := range []int{tailTorn, tailSectors} {
		for _, seed := range powerCutSeeds(4) {
			t.Run(fmt.Sprintf("tail=%d/%d", tail, seed), func(t *testing.T) {
				ims, _ := runPowerCut(t, seed, 2, func(rng *rand.Rand, _ int) cutPlan {
					return cutPlan{sync: 5 + rng.IntN(40), tail: tail}
				})
				for i, im := range ims {
					if im.unsynced == 0 {
						t.Errorf("cycle %d: the cut left no unsynced bytes to tear", i)
					}
				}
			})
		}
	}
}

// A cut after a checkpoint's bbolt commit is durable and before its log
// truncation: the file holds the records and the log still does too; the
// reopen must not apply any twice in a way that shows, nor lose the rest.
func TestPowerCutBetweenCheckpointCommitAndTruncation(t *testing.T) {
	for _, seed := range powerCutSeeds(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runPowerCut(t, seed, 2, func(rng *rand.Rand, _ int) cutPlan {
				return cutPlan{checkpoint: 1 + rng.IntN(3)}
			})
		})
	}
}

// A cut during a checkpoint's bbolt transaction: the board file is the
// previous checkpoint's, and the log still holds everything since; the
// reopen replays it.
func TestPowerCutDuringCheckpointCommit(t *testing.T) {
	for _, seed := range powerCutSeeds(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			_, replayed := runPowerCut(t, seed, 2, func(rng *rand.Rand, _ int) cutPlan {
				return cutPlan{checkpoint: 1 + rng.IntN(3), during: true}
			})
			for i, n := range replayed {
				if n == 0 {
					t.Errorf("cycle %d: the reopen replayed no record, so the cut left the checkpoint's records to the log only in name", i)
				}
			}
		})
	}
}

// Many cuts in a row, each store restarted from the last one's image,
// alternating the kinds of cut.
func TestPowerCutConsecutiveCycles(t *testing.T) {
	for _, seed := range powerCutSeeds(2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runPowerCut(t, seed, 6, func(rng *rand.Rand, cycle int) cutPlan {
				switch cycle % 3 {
				case 0:
					return cutPlan{sync: 1 + rng.IntN(30), tail: tailTorn}
				case 1:
					return cutPlan{checkpoint: 1 + rng.IntN(2), during: true}
				}
				return cutPlan{checkpoint: 1 + rng.IntN(2)}
			})
		})
	}
}
