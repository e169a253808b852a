package boltstore

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

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
		if _, err := s.CreateCard(ctx, board.NewCard{ID: fmt.Sprintf("card-%d", i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	if writers == 1 {
		// One writer: the idle case, where group commit must add no
		// latency over a plain Update.
		for b.Loop() {
			tok, err := s.Claim(ctx, board.ClaimRequest{Card: "card-0", Marker: "bench-1000", Lease: lease})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.ReleaseOwned(ctx, "card-0", tok); err != nil {
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
			tok, err := s.Claim(ctx, board.ClaimRequest{Card: card, Marker: marker, Lease: lease})
			if err != nil {
				b.Error(err)
				return
			}
			if err := s.ReleaseOwned(ctx, card, tok); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "writes/s")
}
