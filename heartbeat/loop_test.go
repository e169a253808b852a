package heartbeat

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// realLoop is a Loop on the system clock over a real bbolt file, for the
// tests of the background goroutine.
func realLoop(t *testing.T, lease time.Duration, tweak func(*Config)) (*Loop, *boltstore.Store, *spy) {
	t.Helper()
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	sp := &spy{inner: st}
	cfg := Config{Store: sp, Lease: func() time.Duration { return lease }}
	if tweak != nil {
		tweak(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(l.Stop)
	return l, st, sp
}

func claimReal(t *testing.T, l *Loop, st *boltstore.Store, card string, lease time.Duration) board.Hold {
	t.Helper()
	ctx := context.Background()
	if _, err := st.CreateCard(ctx, board.CreateCardParams{ID: card}); err != nil {
		t.Fatalf("create: %v", err)
	}
	attempt := time.Now()
	got, err := st.Claim(ctx, board.ClaimParams{Card: card, Marker: marker(4100), Lease: lease})
	tok := got.Token()
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	h := board.Hold{Card: card, Token: tok}
	if err := l.Add(h, self(t), attempt, lease); err != nil {
		t.Fatalf("Add: %v", err)
	}
	return h
}

func TestStartRenewsInTheBackground(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	ticks := make(chan TickResult, 64)
	l, st, _ := realLoop(t, lease, func(c *Config) {
		c.OnTick = func(r TickResult) {
			select {
			case ticks <- r:
			default:
			}
		}
	})
	claimReal(t, l, st, "card", lease)
	if err := l.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	timeout := time.After(20 * time.Second)
	for renewed := 0; renewed < 3; {
		select {
		case r := <-ticks:
			if len(r.Lost) != 0 {
				t.Fatalf("tick lost %+v", r.Lost)
			}
			renewed += r.Renewed
		case <-timeout:
			t.Fatalf("fewer than 3 renewals in 20s")
		}
	}
	l.Stop()
	if got := l.Held(); len(got) != 1 {
		t.Errorf("Held() after Stop = %v, want the claim kept", got)
	}
	c, err := st.GetCard(context.Background(), board.GetCardParams{ID: "card"})
	if err != nil || c.LeaseExpired(time.Now().Add(-lease)) {
		t.Errorf("card lease %v (err %v): want renewed", c.ClaimLeaseUntil, err)
	}
}

// Running in the background against a store that never answers, the loop
// declares the loss at the trusted deadline and not before.
func TestBackgroundLossIsNotEarly(t *testing.T) {
	t.Parallel()
	const lease = 600 * time.Millisecond
	lost := make(chan time.Time, 1)
	l, st, sp := realLoop(t, lease, func(c *Config) {
		c.OnLost = func(Lost) { lost <- time.Now() }
	})
	sp.setFault(func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error) {
		return nil, errUnreachable
	})
	claimReal(t, l, st, "card", lease)
	deadline := l.Held()[0].TrustedUntil
	if err := l.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	select {
	case at := <-lost:
		if at.Before(deadline) {
			t.Errorf("loss declared at %v, %v before the trusted deadline", at, deadline.Sub(at))
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no loss declared in 20s")
	}
}

func TestStartStopLifecycle(t *testing.T) {
	t.Parallel()
	l, _, _ := realLoop(t, time.Minute, nil)

	l.Stop() // stopping a loop never started is a no-op

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Start(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Start(cancelled ctx) = %v, want context.Canceled", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	if err := l.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	first := l.done
	if err := l.Start(ctx); err != nil || l.done != first {
		t.Errorf("second Start started another loop (err %v)", err)
	}
	// The loop ends with its ctx; Start then starts a fresh one.
	cancel()
	<-first
	if err := l.Start(context.Background()); err != nil {
		t.Fatalf("Start after ctx end: %v", err)
	}
	if l.done == first {
		t.Errorf("Start after the loop ended did not start a new one")
	}
	second := l.done
	l.Stop()
	<-second // closed: Stop waited for the goroutine
	l.Stop()
}

// Start, Stop and RunOnce from many goroutines at once: the race detector
// and the final state are the assertions.
func TestStartStopStress(t *testing.T) {
	t.Parallel()
	var ticks atomic.Int64
	l, st, _ := realLoop(t, 30*time.Millisecond, func(c *Config) {
		c.OnTick = func(TickResult) { ticks.Add(1) }
	})
	claimReal(t, l, st, "card", 30*time.Millisecond)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				switch (g + i) % 3 {
				case 0:
					if err := l.Start(ctx); err != nil {
						t.Errorf("Start: %v", err)
					}
				case 1:
					l.Stop()
				default:
					l.RunOnce(ctx)
				}
			}
		}()
	}
	wg.Wait()
	l.Stop()
	l.runMu.Lock()
	defer l.runMu.Unlock()
	if l.done != nil || l.cancel != nil {
		t.Errorf("loop still marked running after the final Stop")
	}
	if ticks.Load() == 0 {
		t.Errorf("no tick ran at all")
	}
}
