package heartbeat

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// manualClock is the injected clock the tests move by hand. Its readings
// carry no monotonic part, as a real clock's would after a round trip
// through a store, so the tests exercise the wall-time arithmetic.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newManualClock() *manualClock {
	return &manualClock{t: time.Date(2026, 9, 2, 12, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to t (forward only in these tests).
func (c *manualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

type renewCall struct {
	holds []board.Hold
	lease time.Duration
	// hasDeadline records whether the loop bounded the call.
	hasDeadline bool
}

type expireCall struct {
	card string
	tok  board.ClaimToken
}

// spy sits between the loop and the real store. It records every call and,
// only where a test must inject a failure, replaces or distorts the
// store's answer.
type spy struct {
	inner Renewer

	mu      sync.Mutex
	renews  []renewCall
	expires []expireCall
	// fault, when set, is consulted on each RenewClaims call. It may call
	// the inner store itself (a write that lands but is reported as
	// unknown) or not at all (store unreachable).
	fault func(ctx context.Context, holds []board.Hold, lease time.Duration) ([]board.RenewResult, error)
	// disownFault, when set, runs before each DisownClaimOwned reaches
	// the store (a slow write); disownBounded records whether the loop
	// bounded each such call.
	disownFault   func(ctx context.Context)
	disownBounded []bool
}

func (s *spy) RenewClaims(ctx context.Context, p board.RenewClaimsParams) ([]board.RenewResult, error) {
	holds, lease := p.Holds, p.Lease
	_, hasDeadline := ctx.Deadline()
	s.mu.Lock()
	s.renews = append(s.renews, renewCall{holds: append([]board.Hold(nil), holds...), lease: lease, hasDeadline: hasDeadline})
	fault := s.fault
	s.mu.Unlock()
	if fault != nil {
		return fault(ctx, holds, lease)
	}
	return s.inner.RenewClaims(ctx, p)
}

func (s *spy) ExpireClaimOwned(ctx context.Context, p board.OwnedParams) error {
	card, tok := p.Card, p.Token
	s.mu.Lock()
	s.expires = append(s.expires, expireCall{card, tok})
	s.mu.Unlock()
	return s.inner.ExpireClaimOwned(ctx, p)
}

// DisownClaimOwned passes through, after disownFault: what it marks is
// read back from the store.
func (s *spy) DisownClaimOwned(ctx context.Context, p board.OwnedParams) error {
	_, bounded := ctx.Deadline()
	s.mu.Lock()
	s.disownBounded = append(s.disownBounded, bounded)
	fault := s.disownFault
	s.mu.Unlock()
	if fault != nil {
		fault(ctx)
	}
	return s.inner.DisownClaimOwned(ctx, p)
}

func (s *spy) setFault(f func(ctx context.Context, holds []board.Hold, lease time.Duration) ([]board.RenewResult, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

func (s *spy) renewCalls() []renewCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]renewCall(nil), s.renews...)
}

func (s *spy) expireCalls() []expireCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]expireCall(nil), s.expires...)
}

// harness is a Loop over a real bbolt file, sharing one manual clock with
// the store.
type harness struct {
	t     *testing.T
	ctx   context.Context
	clock *manualClock
	store *boltstore.Store
	spy   *spy
	loop  *Loop
	lease atomic.Int64 // time.Duration; hot-reloadable
	mode  atomic.Value // Mode

	mu   sync.Mutex
	lost []Lost
}

const testLease = 30 * time.Second

// testMargin is DefaultMargin(testLease): 2s.
const testMargin = 2 * time.Second

func newHarness(t *testing.T, tweak ...func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, ctx: context.Background(), clock: newManualClock()}
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{Clock: h.clock})
	if err != nil {
		t.Fatalf("open bbolt store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	h.store = st
	h.spy = &spy{inner: st}
	h.lease.Store(int64(testLease))
	h.mode.Store(ModePID)
	cfg := Config{
		Store:  h.spy,
		Clock:  h.clock,
		Lease:  func() time.Duration { return time.Duration(h.lease.Load()) },
		Mode:   func() Mode { return h.mode.Load().(Mode) },
		Prober: pidprobe.New(),
		OnLost: func(l Lost) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.lost = append(h.lost, l)
		},
	}
	for _, f := range tweak {
		f(&cfg)
	}
	loop, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(loop.Stop)
	h.loop = loop
	return h
}

// self is an owner that is alive for the whole test: this test process,
// with its real start time.
func self(t *testing.T) Owner {
	t.Helper()
	o, err := ownerOfThisProcess()
	if err != nil {
		t.Fatalf("own start time: %v", err)
	}
	return o
}

func ownerOfThisProcess() (Owner, error) {
	pid := os.Getpid()
	start, err := pidprobe.New().Identify(context.Background(), pid)
	return Owner{PID: pid, Start: start}, err
}

// claim creates card, claims it for marker in the real store and hands it
// to the loop the way the agent does: with the attempt start taken before
// the Claim call.
func (h *harness) claim(card, marker string, o Owner) board.Hold {
	h.t.Helper()
	if _, err := h.store.CreateCard(h.ctx, board.CreateCardParams{ID: card}); err != nil {
		h.t.Fatalf("create %s: %v", card, err)
	}
	attempt := h.clock.Now()
	lease := time.Duration(h.lease.Load())
	got, err := h.store.Claim(h.ctx, board.ClaimParams{Card: card, Marker: marker, Lease: lease})
	tok := got.Token()
	if err != nil {
		h.t.Fatalf("claim %s: %v", card, err)
	}
	hold := board.Hold{Card: card, Token: tok}
	if err := h.loop.Add(hold, o, attempt, lease); err != nil {
		h.t.Fatalf("Add %s: %v", card, err)
	}
	return hold
}

func (h *harness) card(id string) board.Card {
	h.t.Helper()
	c, err := h.store.GetCard(h.ctx, board.GetCardParams{ID: id})
	if err != nil {
		h.t.Fatalf("get %s: %v", id, err)
	}
	return c
}

func (h *harness) lostSoFar() []Lost {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Lost(nil), h.lost...)
}

func heldCards(l *Loop) []string {
	var out []string
	for _, c := range l.Held() {
		out = append(out, c.Hold.Card)
	}
	return out
}

func marker(pid int) string { return board.WorkerMarker("testhost", pid) }
