package heartbeat

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// BenchmarkTick10k measures one tick renewing 10,000 claims against a real
// bbolt file: the owner probe (one process), one batched RenewClaims and
// the bookkeeping. Run with: go test -run '^$' -bench Tick10k ./heartbeat/
func BenchmarkTick10k(b *testing.B) {
	const n = 10_000
	ctx := context.Background()
	st, err := boltstore.Open(filepath.Join(b.TempDir(), "board.db"), boltstore.Options{})
	if err != nil {
		b.Fatalf("open: %v", err)
	}
	defer st.Close()
	l, err := New(Config{Store: st, Lease: func() time.Duration { return testLease }})
	if err != nil {
		b.Fatalf("New: %v", err)
	}
	owner, err := ownerOfThisProcess()
	if err != nil {
		b.Fatalf("own start time: %v", err)
	}

	// Set up the claims from several goroutines so the store's group
	// commit shares fsyncs between them.
	const workers = 32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				card := fmt.Sprintf("card-%05d", i)
				if _, err := st.CreateCard(ctx, board.CreateCardParams{ID: card}); err != nil {
					errs <- err
					return
				}
				attempt := time.Now()
				got, err := st.Claim(ctx, board.ClaimParams{Card: card, Marker: marker(2 + i), Lease: testLease})
				tok := got.Token()
				if err != nil {
					errs <- err
					return
				}
				if err := l.Add(board.Hold{Card: card, Token: tok}, owner, attempt, testLease); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("setup: %v", err)
	}

	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res := l.RunOnce(ctx)
		if res.Renewed != n || res.StoreCalls != 1 {
			b.Fatalf("tick renewed %d in %d calls (err %v), want %d in 1", res.Renewed, res.StoreCalls, res.Err, n)
		}
	}
	b.ReportMetric(float64(n), "claims/tick")
}
