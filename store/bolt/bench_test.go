package boltstore

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// BenchmarkClaimRelease measures durable writes per second with concurrent
// writers, each claiming and releasing its own card (two fsynced writes per
// iteration), through the group committer and through the two baselines:
// one plain Update per write, and bbolt's Batch with its default delay.
//
//	go test -run '^$' -bench ClaimRelease -benchtime 3s ./store/bolt/
func BenchmarkClaimRelease(b *testing.B) {
	modes := []struct {
		name string
		mode commitMode
	}{{"group", modeGroup}, {"update", modeUpdate}, {"boltbatch", modeBoltBatch}}
	for _, writers := range []int{1, 8, 32} {
		for _, m := range modes {
			b.Run(fmt.Sprintf("writers=%d/%s", writers, m.name), func(b *testing.B) {
				benchClaimRelease(b, m.mode, writers)
			})
		}
	}
}

func benchClaimRelease(b *testing.B, mode commitMode, writers int) {
	s, err := Open(filepath.Join(b.TempDir(), "bench.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.mode = mode
	ctx := b.Context()
	for i := range writers {
		if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: fmt.Sprintf("card-%d", i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	if writers == 1 {
		// One writer: the idle case, where group commit must add no
		// latency over a plain Update.
		for b.Loop() {
			card, err := s.Claim(ctx, board.ClaimParams{Card: "card-0", Marker: "bench-1000", Lease: lease})
			tok := card.Token()
			if err != nil {
				b.Fatal(err)
			}
			if err := s.ReleaseOwned(ctx, board.OwnedParams{Card: "card-0", Token: tok}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "writes/s")
		return
	}
	// RunParallel starts parallelism × GOMAXPROCS goroutines.
	procs := runtime.GOMAXPROCS(0)
	if writers%procs != 0 {
		b.Skipf("writers=%d is not a multiple of GOMAXPROCS=%d", writers, procs)
	}
	b.SetParallelism(writers / procs)
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		n := next.Add(1) - 1
		card := fmt.Sprintf("card-%d", n%int64(writers))
		marker := board.WorkerMarker("bench", int(1000+n))
		for pb.Next() {
			got, err := s.Claim(ctx, board.ClaimParams{Card: card, Marker: marker, Lease: lease})
			tok := got.Token()
			if err != nil {
				b.Error(err)
				return
			}
			if err := s.ReleaseOwned(ctx, board.OwnedParams{Card: card, Token: tok}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "writes/s")
}

// BenchmarkRenewClaims measures one batched RenewClaims over n live holds on
// a real file: the heartbeat's hot path (one call per tick renews every
// claim the agent holds). The clock advances a second per call so every
// lease really moves and the lease index is rewritten each time.
//
//	go test -run '^$' -bench RenewClaims -benchmem ./store/bolt/
func BenchmarkRenewClaims(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			benchRenewClaims(b, n)
		})
	}
}

func benchRenewClaims(b *testing.B, n int) {
	clock := newFakeClock()
	s, err := Open(filepath.Join(b.TempDir(), "bench.db"), Options{Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	holds := make([]board.Hold, n)
	// Set up from several goroutines so the group committer shares fsyncs.
	const workers = 32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				card := fmt.Sprintf("card-%05d", i)
				if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: card, Title: "a card with an ordinary title", Labels: []string{"team-a", "prio-2"}}); err != nil {
					errs <- err
					return
				}
				got, err := s.Claim(ctx, board.ClaimParams{Card: card, Marker: board.WorkerMarker("bench", 1000+i), Lease: lease})
				tok := got.Token()
				if err != nil {
					errs <- err
					return
				}
				holds[i] = board.Hold{Card: card, Token: tok}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("setup: %v", err)
	}
	b.ReportAllocs()
	// Wall time on a shared machine includes waiting for a core; the CPU
	// the process spent per call is the figure the agent's CPU budget is
	// about (DESIGN.md#heartbeat-batch: a tick every lease/3).
	cpu0, cpuOK := processCPU()
	for b.Loop() {
		clock.Advance(time.Second)
		res, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: holds, Lease: lease})
		if err != nil {
			b.Fatal(err)
		}
		if res[n-1].Err != nil || !res[n-1].LeaseUntil.Equal(clock.Now().Add(lease)) {
			b.Fatalf("last result %+v, want a lease until %s", res[n-1], clock.Now().Add(lease))
		}
	}
	if cpu1, ok := processCPU(); ok && cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	}
	b.ReportMetric(float64(n), "claims/op")
}

// BenchmarkStartFinish measures a card's lifecycle through the store's two
// lifecycle verbs, Start and Finish, from 8 concurrent writers on a real
// file: the store's share of the bench command's lifecycle scenario.
//
//	go test -run '^$' -bench StartFinish -benchmem ./store/bolt/
func BenchmarkStartFinish(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "bench.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	var made atomic.Int64
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism(max(1, 8/procs))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			b.StopTimer()
			id := fmt.Sprintf("life-%d", made.Add(1))
			_, err := s.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateReady})
			b.StartTimer()
			if err != nil {
				b.Error(err)
				return
			}
			st, err := s.Start(ctx, board.StartParams{Card: id, Marker: board.WorkerMarker("bench", 1000), Lease: lease, Run: board.Run{ID: id + "-1"}})
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := s.Finish(ctx, board.FinishParams{Card: id, Token: st.Token, RunID: st.Run.ID, Status: board.RunFinished}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lifecycles/s")
	st := s.Stats()
	b.ReportMetric(float64(st.Writes)/float64(max(1, st.Syncs)), "writes/fsync")
}
