package socketapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	"github.com/leasekeeper/leasekeeper/socketapi"
)

// memStore answers the verbs a claim + release and a Start + Finish make
// from memory, at once: the socket path's own cost with no store under it
// (a durable store's fsync would drown it). Every other verb panics
// (the embedded nil Store), so a request that reached one would show.
type memStore struct {
	board.Store
	mu    sync.Mutex
	cards map[string]*board.Card
}

func newMemStore() *memStore { return &memStore{cards: map[string]*board.Card{}} }

func (s *memStore) Traits() board.Traits                   { return board.Traits{} }
func (s *memStore) Now(context.Context) (time.Time, error) { return time.Now(), nil }
func (s *memStore) Close() error                           { return nil }

func (s *memStore) CreateCard(_ context.Context, nc board.CreateCardParams) (board.Card, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &board.Card{ID: nc.ID, State: "ready"}
	s.cards[nc.ID] = c
	return *c, nil
}

func (s *memStore) GetCard(ctx context.Context, p board.GetCardParams) (board.Card, error) {
	id := p.ID
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cards[id]
	if !ok {
		return board.Card{}, board.ErrNotFound
	}
	return *c, nil
}

func (s *memStore) claim(card, marker string, lease time.Duration) (board.Card, error) {
	c, ok := s.cards[card]
	if !ok {
		return board.Card{}, board.ErrNotFound
	}
	if c.Claim != "" && c.Claim != marker {
		return board.Card{}, board.Conflict(card, c.Claim, c.ClaimEpoch)
	}
	if c.Claim == "" {
		c.ClaimEpoch++
	}
	now := time.Now()
	c.Claim, c.ClaimedAt, c.ClaimLeaseUntil = marker, now, now.Add(lease)
	return *c, nil
}

func (s *memStore) Claim(_ context.Context, r board.ClaimParams) (board.Card, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claim(r.Card, r.Marker, r.Lease)
}

func (s *memStore) release(card string, tok board.ClaimToken) error {
	c, ok := s.cards[card]
	if !ok {
		return board.ErrNotFound
	}
	if c.Claim != tok.Marker || c.ClaimEpoch != tok.Epoch {
		return board.Conflict(card, c.Claim, c.ClaimEpoch)
	}
	c.Claim, c.ClaimedAt, c.ClaimLeaseUntil = "", time.Time{}, time.Time{}
	return nil
}

func (s *memStore) ReleaseOwned(ctx context.Context, p board.OwnedParams) error {
	card, tok := p.Card, p.Token
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.release(card, tok)
}

func (s *memStore) Start(_ context.Context, r board.StartParams) (board.StartResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.claim(r.Card, r.Marker, r.Lease)
	tok := c.Token()
	if err != nil {
		return board.StartResult{}, err
	}
	run := r.Run
	run.Card, run.Epoch = r.Card, tok.Epoch
	c.LastRunID = run.ID
	return board.StartResult{Card: c, Token: tok, Run: run}, nil
}

func (s *memStore) Finish(_ context.Context, r board.FinishParams) (board.FinishResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.release(r.Card, r.Token); err != nil {
		return board.FinishResult{}, err
	}
	return board.FinishResult{Card: *s.cards[r.Card], Run: board.Run{ID: r.RunID, Card: r.Card, Status: r.Status}}, nil
}

// startMemAgent wires the socket API over st as socketapitest.Start does.
func startMemAgent(b *testing.B, st board.Store) string {
	dir, err := os.MkdirTemp("", "lk")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "lk.sock")
	lease := func() time.Duration { return time.Hour }
	loop, err := heartbeat.New(heartbeat.Config{Store: st, Lease: lease})
	if err != nil {
		b.Fatal(err)
	}
	s, err := socketapi.New(socketapi.Config{
		Path: path, Store: st, Claims: loop, Prober: pidprobe.New(), Host: "benchhost", Lease: lease,
		Liveness: func() string { return apitype.LivenessPID }, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := loop.Start(ctx); err != nil {
		b.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		loop.Stop()
	})
	return path
}

// BenchmarkSocketPath is the cost of the socket path alone — client,
// Unix socket, socketapi, lease service, heartbeat tracking — over a store
// that answers from memory at once: claim + release (two requests) and
// Start + Finish (two requests), one worker (the latency of a cycle) and
// eight workers of one process (its CPU per cycle, reported as
// cpu-µs/op: client and agent share this process).
//
//	go test -run '^$' -bench SocketPath -benchmem ./socketapi/
func BenchmarkSocketPath(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("claim-release/workers=%d", workers), func(b *testing.B) {
			pathCycles(b, workers, func(ctx context.Context, c *client.Client, card string) error {
				cl, err := c.Claim(ctx, card)
				if err != nil {
					return err
				}
				return cl.Release(ctx)
			})
		})
		b.Run(fmt.Sprintf("start-finish/workers=%d", workers), func(b *testing.B) {
			pathCycles(b, workers, func(ctx context.Context, c *client.Client, card string) error {
				cl, err := c.Start(ctx, card, client.StartOptions{})
				if err != nil {
					return err
				}
				_, err = cl.Finish(ctx, client.Verdict{Status: board.RunFinished})
				return err
			})
		})
	}
}

func pathCycles(b *testing.B, workers int, cycle func(context.Context, *client.Client, string) error) {
	st := newMemStore()
	path := startMemAgent(b, st)
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(max(1, workers/2)) // GOMAXPROCS is 2 on the bench machine
	if workers == 1 {
		c := &client.Client{Socket: path}
		st.CreateCard(ctx, board.CreateCardParams{ID: "c"})
		cpu0 := cpuTime(b)
		for b.Loop() {
			if err := cycle(ctx, c, "c"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		return
	}
	b.ResetTimer()
	cpu0 := cpuTime(b)
	b.RunParallel(func(pb *testing.PB) {
		card := fmt.Sprintf("c-%d", next.Add(1))
		st.CreateCard(ctx, board.CreateCardParams{ID: card})
		c := &client.Client{Socket: path}
		for pb.Next() {
			if err := cycle(ctx, c, card); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the CPU time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
