package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// Go benchmarks of the hot paths, one operation each, with allocations:
//
//	cd bench && go test -run '^$' -bench . -benchmem
//
// The command (go run .) measures the same paths under concurrency and
// against the alternatives; these isolate one call so a change to it shows.

func openStore(b *testing.B) *boltstore.Store {
	b.Helper()
	st, err := boltstore.Open(filepath.Join(b.TempDir(), "board.db"), boltstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// BenchmarkClaimCAS is one durable claim + one durable fenced release of a
// free card by one caller: the idle latency of the claim CAS, fsync
// included.
func BenchmarkClaimCAS(b *testing.B) {
	st := openStore(b)
	ctx := context.Background()
	if _, err := st.CreateCard(ctx, board.CreateCardParams{ID: "c"}); err != nil {
		b.Fatal(err)
	}
	marker := board.WorkerMarker("benchhost", 1234)
	b.ReportAllocs()
	for b.Loop() {
		held, err := st.Claim(ctx, board.ClaimParams{Card: "c", Marker: marker, Lease: benchLease})
		tok := held.Token()
		if err != nil {
			b.Fatal(err)
		}
		if err := st.ReleaseOwned(ctx, board.OwnedParams{Card: "c", Token: tok}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimConflict is a claim refused by the CAS (another holder):
// the path a losing worker takes; it writes nothing and costs no fsync.
func BenchmarkClaimConflict(b *testing.B) {
	st := openStore(b)
	ctx := context.Background()
	if _, err := st.CreateCard(ctx, board.CreateCardParams{ID: "c"}); err != nil {
		b.Fatal(err)
	}
	if _, err := st.Claim(ctx, board.ClaimParams{Card: "c", Marker: board.WorkerMarker("benchhost", 1000), Lease: benchLease}); err != nil {
		b.Fatal(err)
	}
	other := board.WorkerMarker("benchhost", 2000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := st.Claim(ctx, board.ClaimParams{Card: "c", Marker: other, Lease: benchLease}); err == nil {
			b.Fatal("claim of a held card succeeded")
		}
	}
}

// BenchmarkRenewClaims is one batched renewal write of 1,000 and 10,000
// holds (the store half of a heartbeat tick, without the loop).
func BenchmarkRenewClaims(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("holds=%d", n), func(b *testing.B) {
			if n > 1_000 && testing.Short() {
				b.Skip("10,000 serial durable setup writes; skipped with -short")
			}
			st := openStore(b)
			ctx := context.Background()
			marker := board.WorkerMarker("benchhost", 1234)
			holds := make([]board.Hold, n)
			for i := range holds {
				id := fmt.Sprintf("card-%05d", i)
				if _, err := st.CreateCard(ctx, board.CreateCardParams{ID: id}); err != nil {
					b.Fatal(err)
				}
				held, err := st.Claim(ctx, board.ClaimParams{Card: id, Marker: marker, Lease: benchLease})
				tok := held.Token()
				if err != nil {
					b.Fatal(err)
				}
				holds[i] = board.Hold{Card: id, Token: tok}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := st.RenewClaims(ctx, board.RenewClaimsParams{Holds: holds, Lease: benchLease})
				if err != nil {
					b.Fatal(err)
				}
				if res[n-1].Err != nil {
					b.Fatal(res[n-1].Err)
				}
			}
		})
	}
}

// BenchmarkDecideStuckCard runs the pure decision table over one input of
// each shape the reaper meets.
func BenchmarkDecideStuckCard(b *testing.B) {
	bd := board.DefaultBoard(true)
	now := time.Now()
	card := board.Card{ID: "c", State: board.StateInProgress, LastRunID: "r", Claim: "elsewhere-42", ClaimEpoch: 3,
		ClaimedAt: now.Add(-3 * benchLease), ClaimLeaseUntil: now.Add(-2 * benchLease)}
	var inputs []watchdog.StuckCard
	for _, st := range []board.RunStatus{board.RunRunning, board.RunPausedOperator, board.RunCancelled, board.RunFinished, board.RunFailed, board.RunFailedResumable} {
		run := &board.Run{ID: "r", Card: "c", Status: st, Continuation: board.ContinuationNone}
		inputs = append(inputs, watchdog.StuckCard{Run: run, Card: card, Board: bd, Now: now, Lease: benchLease})
	}
	noRun := card
	noRun.LastRunID = ""
	inputs = append(inputs, watchdog.StuckCard{Card: noRun, Board: bd, Now: now, Lease: benchLease})
	inputs = append(inputs, watchdog.StuckCard{Card: card, Board: bd, Now: now, Lease: benchLease})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if d := watchdog.DecideStuckCard(inputs[i%len(inputs)]); d.Action == "" {
			b.Fatal("no action")
		}
		i++
	}
}

func benchAgent(b *testing.B) *agent {
	b.Helper()
	dir, err := os.MkdirTemp("", "lkb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	a, err := startAgent(context.Background(), dir, benchLease)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(a.stop)
	return a
}

// BenchmarkSocketRoundTrip is one read through the client over the real
// Unix socket (GetCard: no disk write), i.e. the cost of the API itself.
func BenchmarkSocketRoundTrip(b *testing.B) {
	a := benchAgent(b)
	ctx := context.Background()
	if _, err := a.store.CreateCard(ctx, board.CreateCardParams{ID: "c"}); err != nil {
		b.Fatal(err)
	}
	c := &client.Client{Socket: a.path}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.GetCard(ctx, "c"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSocketClaimRelease is one claim + release through the client
// over the socket: the product's whole claim path for one idle worker.
func BenchmarkSocketClaimRelease(b *testing.B) {
	a := benchAgent(b)
	ctx := context.Background()
	if _, err := a.store.CreateCard(ctx, board.CreateCardParams{ID: "c"}); err != nil {
		b.Fatal(err)
	}
	c := &client.Client{Socket: a.path}
	b.ReportAllocs()
	for b.Loop() {
		cl, err := c.Claim(ctx, "c")
		if err != nil {
			b.Fatal(err)
		}
		if err := cl.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
