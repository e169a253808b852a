package plugins

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// BenchmarkClaimReleaseThroughThePlugin runs claim + release cycles on
// distinct cards from 8 goroutines per CPU against a bbolt store served by
// the test plugin in its own process: the cost of the boundary under load.
// calls/msg is how many calls shared each message on the Calls stream.
//
//	go test -run '^$' -bench ClaimRelease -cpu 1,4 ./plugins/
func BenchmarkClaimReleaseThroughThePlugin(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Launch(ctx, LaunchConfig{
		Cmd:   testPluginCmd(b, ""),
		Child: &ChildConfig{Backend: "bolt", Path: filepath.Join(b.TempDir(), "board.db"), Board: board.DefaultBoard(true), Lease: 30 * time.Second},
	})
	if err != nil {
		b.Fatalf("Launch: %v", err)
	}
	defer p.Close()
	var calls, messages atomic.Int64
	cc := p.cur.store.calls
	cc.mu.Lock()
	cc.sending = func(batch *storepb.CallBatch) {
		messages.Add(1)
		calls.Add(int64(len(batch.GetCalls())))
	}
	cc.mu.Unlock()
	var next atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	defer func() {
		if m := messages.Load(); m > 0 {
			b.ReportMetric(float64(calls.Load())/float64(m), "calls/msg")
		}
	}()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		id := fmt.Sprintf("bench-%d", next.Add(1))
		if _, err := p.CreateCard(ctx, board.NewCard{ID: id}); err != nil {
			b.Error(err)
			return
		}
		marker := board.WorkerMarker("benchhost", int(next.Load()))
		for pb.Next() {
			_, tok, err := p.Claim(ctx, board.ClaimRequest{Card: id, Marker: marker, Lease: 30 * time.Second})
			if err != nil {
				b.Error(err)
				return
			}
			if err := p.ReleaseOwned(ctx, id, tok); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
