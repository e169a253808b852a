package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/boardadmin"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
	"github.com/leasekeeper/leasekeeper/storespec"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// testNow is a clock the board cache's age is measured by; the test moves
// it instead of sleeping out the TTL.
type testNow struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testNow) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testNow) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// countingCache is a board cache over s whose clock the test moves, and
// the number of times it read the store.
func countingCache(s board.Store) (*boardCache, *testNow, *atomic.Int64) {
	clock := &testNow{t: time.Unix(1_700_000_000, 0)}
	var reads atomic.Int64
	c := newBoardCache(func(ctx context.Context) (board.Board, error) {
		reads.Add(1)
		return s.LoadBoard(ctx)
	}, BoardTTL)
	c.now = clock.Now
	return c, clock, &reads
}

func openMongoSpec(t *testing.T, uri, db string) board.Store {
	t.Helper()
	s, err := OpenBuiltinStore(t.Context(), storespec.Spec{
		Backend: BackendMongo, URI: uri, Database: db, Board: board.DefaultBoard(false),
	}, board.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustBoard(t *testing.T, c *boardCache) board.Board {
	t.Helper()
	b, err := c.Board(t.Context())
	if err != nil {
		t.Fatalf("Board: %v", err)
	}
	return b
}

// TestBoardCacheFollowsAnotherAgentsStateSweep: two agents share one
// MongoDB; one renames a state with the board-administration sweep. The
// other agent's cache serves its copy while that is younger than BoardTTL
// (one store read, not one per caller) and re-reads the store once the
// copy is BoardTTL old: the documented bound.
func TestBoardCacheFollowsAnotherAgentsStateSweep(t *testing.T) {
	t.Parallel()
	uri, db := mongotest.URI(t), mongotest.Database(t)
	here, other := openMongoSpec(t, uri, db), openMongoSpec(t, uri, db)
	cache, clock, reads := countingCache(here)

	if b := mustBoard(t, cache); !b.Has(board.StateBacklog) {
		t.Fatalf("initial board = %s, want the seeded default", b)
	}
	admin, err := boardadmin.New(boardadmin.Config{Store: other, Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RenameState(t.Context(), board.StateBacklog, "icebox"); err != nil {
		t.Fatalf("RenameState through the other agent: %v", err)
	}

	clock.advance(BoardTTL - time.Millisecond)
	if b := mustBoard(t, cache); !b.Has(board.StateBacklog) || reads.Load() != 1 {
		t.Fatalf("within the TTL: board %s after %d store reads, want the cached copy after 1", b, reads.Load())
	}
	clock.advance(time.Millisecond)
	b := mustBoard(t, cache)
	if b.Has(board.StateBacklog) || !b.Has("icebox") {
		t.Errorf("at the TTL: board = %s, want icebox in backlog's place", b)
	}
	if reads.Load() != 2 {
		t.Errorf("store reads = %d, want 2 (the first read and one re-read)", reads.Load())
	}
}

// TestBoardCacheSeesThisAgentsOwnChangeAtOnce: a state sweep made through
// this agent's store (its board-administration verbs go through the
// metered store) is what the cache serves at once, without waiting out
// the TTL.
func TestBoardCacheSeesThisAgentsOwnChangeAtOnce(t *testing.T) {
	t.Parallel()
	raw, err := OpenBuiltinStore(t.Context(), storespec.Spec{
		Backend: BackendBolt, Path: filepath.Join(t.TempDir(), "board.db"), Board: board.DefaultBoard(true),
	}, board.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	s := meteredStore{inner: raw, m: newMetrics("v", func() int { return 0 }, func() bool { return false })}
	cache, _, reads := countingCache(s)
	s.boards = cache
	if b := mustBoard(t, cache); !b.Has(board.StateBacklog) {
		t.Fatalf("initial board = %s", b)
	}
	admin, err := boardadmin.New(boardadmin.Config{Store: s, Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RenameState(t.Context(), board.StateBacklog, "icebox"); err != nil {
		t.Fatal(err)
	}
	if b := mustBoard(t, cache); b.Has(board.StateBacklog) || !b.Has("icebox") {
		t.Errorf("board right after this agent's rename = %s, want icebox in backlog's place", b)
	}
	if reads.Load() != 1 {
		t.Errorf("the cache read the store %d times, want once (the change came to it)", reads.Load())
	}
}

// TestBoardCacheReReadDoesNotUndoThisAgentsChange: a re-read that read
// the store before this agent's own state sweep wrote the board, and
// returns after it, must not put the old board back.
func TestBoardCacheReReadDoesNotUndoThisAgentsChange(t *testing.T) {
	t.Parallel()
	raw, err := OpenBuiltinStore(t.Context(), storespec.Spec{
		Backend: BackendBolt, Path: filepath.Join(t.TempDir(), "board.db"), Board: board.DefaultBoard(true),
	}, board.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	s := meteredStore{inner: raw, m: newMetrics("v", func() int { return 0 }, func() bool { return false })}
	var hold atomic.Bool
	readOld, release := make(chan struct{}), make(chan struct{})
	clock := &testNow{t: time.Unix(1_700_000_000, 0)}
	cache := newBoardCache(func(ctx context.Context) (board.Board, error) {
		b, err := s.LoadBoard(ctx)
		if hold.Load() {
			close(readOld)
			<-release
		}
		return b, err
	}, BoardTTL)
	cache.now = clock.Now
	s.boards = cache
	mustBoard(t, cache)

	clock.advance(BoardTTL)
	hold.Store(true)
	reread := make(chan board.Board, 1)
	go func() {
		b, _ := cache.Board(context.Background())
		reread <- b
	}()
	<-readOld
	admin, err := boardadmin.New(boardadmin.Config{Store: s, Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RenameState(t.Context(), board.StateBacklog, "icebox"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if b := <-reread; b.Has(board.StateBacklog) {
		t.Errorf("the re-read in flight returned the board from before this agent's change: %s", b)
	}
	if b := mustBoard(t, cache); b.Has(board.StateBacklog) || !b.Has("icebox") {
		t.Errorf("board after the re-read = %s, want this agent's change", b)
	}
}

// TestBoardCacheReadHonoursItsContext: while the store does not answer (a
// connection that stops passing bytes), a caller whose context is
// cancelled, or whose deadline passes, returns at once with its
// context's error, even though another caller's re-read is stuck in
// flight; that caller in turn returns when its own context ends, and the
// next read after the store answers again succeeds.
func TestBoardCacheReadHonoursItsContext(t *testing.T) {
	t.Parallel()
	uri := mongotest.URI(t)
	host, err := mongoHost(uri)
	if err != nil {
		t.Skip(err)
	}
	fz := newFreezer(t, host)
	s := openMongoSpec(t, "mongodb://"+fz.addr()+"/?directConnection=true", mongotest.Database(t))
	cache, clock, _ := countingCache(s)
	mustBoard(t, cache)
	clock.advance(BoardTTL)

	fz.freeze()
	stuckCtx, unstick := context.WithCancel(t.Context())
	defer unstick()
	stuck := make(chan error, 1)
	go func() {
		_, err := cache.Board(stuckCtx)
		stuck <- err
	}()
	select {
	case <-fz.held:
	case err := <-stuck:
		t.Fatalf("the re-read returned (%v) before reaching the frozen store", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the re-read never reached the store")
	}

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if _, err := cache.Board(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Board with a cancelled context = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Board with a cancelled context took %s", d)
	}
	short, cancelShort := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancelShort()
	start = time.Now()
	if _, err := cache.Board(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Board past its deadline = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Board with a 100ms deadline took %s", d)
	}
	select {
	case err := <-stuck:
		t.Fatalf("the stuck re-read returned (%v) while the store was frozen", err)
	default:
	}

	unstick()
	select {
	case err := <-stuck:
		if err == nil {
			t.Error("the stuck re-read succeeded against a frozen store")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stuck re-read did not return within 5s of its context's cancellation")
	}

	fz.thaw()
	ctx, cancelRead := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancelRead()
	if b, err := cache.Board(ctx); err != nil || !b.Has(board.StateReady) {
		t.Errorf("Board after the store answers again = %s, %v", b, err)
	}
}

// mongoHost is the single host of a mongodb:// test URI.
func mongoHost(uri string) (string, error) {
	const scheme = "mongodb://"
	if len(uri) <= len(scheme) || uri[:len(scheme)] != scheme {
		return "", errors.New("needs a mongodb:// test server")
	}
	rest := uri[len(scheme):]
	for i, r := range rest {
		if r == '/' || r == '?' {
			rest = rest[:i]
			break
		}
		if r == '@' || r == ',' {
			return "", errors.New("needs a single-host test server without credentials")
		}
	}
	return rest, nil
}

// freezer is a TCP proxy to a server that can stop passing the client's
// bytes on: a store that has not died but does not answer.
type freezer struct {
	ln     net.Listener
	target string
	held   chan struct{} // closed when frozen bytes first wait

	mu     sync.Mutex
	open   chan struct{} // closed while bytes pass
	signal sync.Once
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target, held: make(chan struct{}), open: make(chan struct{})}
	close(f.open)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, up)
			f.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
			go func() { defer wg.Done(); f.pass(up, c); _ = up.Close() }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		f.thaw()
		f.mu.Lock()
		for _, c := range f.conns {
			_ = c.Close()
		}
		f.mu.Unlock()
		wg.Wait()
	})
	return f
}

func (f *freezer) addr() string { return f.ln.Addr().String() }

// pass copies the client's bytes to the server, holding each read while
// the freezer is frozen.
func (f *freezer) pass(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.mu.Lock()
			open := f.open
			f.mu.Unlock()
			select {
			case <-open:
			default:
				f.signal.Do(func() { close(f.held) })
				<-open
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.open:
		f.open = make(chan struct{})
	default:
	}
}

func (f *freezer) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.open:
	default:
		close(f.open)
	}
}

// TestStartRefusesAStoredBoardTheWatchdogCannotWorkOn: the stored board
// wins over the configured states, so the check that the board has a
// failed column for the watchdog to file into is made on the stored one,
// at start; the agent says the stored board differs and does not serve.
func TestStartRefusesAStoredBoardTheWatchdogCannotWorkOn(t *testing.T) {
	t.Parallel()
	def := board.DefaultBoard(true)
	noFailed := board.Board{}
	for _, s := range def.States {
		if s.Name != board.StateFailed {
			noFailed.States = append(noFailed.States, s)
		}
	}
	r := startRun(t, runOpts{noWait: true, seed: func(t *testing.T, s *boltstore.Store) {
		if set, err := s.SetBoard(t.Context(), board.SetBoardParams{Expect: def, Next: noFailed}); err != nil || !set.Changed {
			t.Fatalf("SetBoard = %v, %v", set.Changed, err)
		}
	}})
	select {
	case err := <-r.done:
		r.done <- err
		if !errors.Is(err, watchdog.ErrInvalidConfig) {
			t.Errorf("Run = %v, want watchdog.ErrInvalidConfig", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop within 30s")
	}
	if !strings.Contains(r.logs.String(), "differ from the board stored") {
		t.Errorf("no drift warning in the log:\n%s", r.logs.String())
	}
}
