package socketapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

// BenchmarkClaimReleaseWhileHolding is one claim + release through the
// client over the real socket while the agent already tracks `held` other
// claims: the per-request work of the claim path must not grow with them.
// The other claims are handed to the tracker directly (their cards need not
// exist: the lease is long enough that no tick renews them during the run).
func BenchmarkClaimReleaseWhileHolding(b *testing.B) {
	for _, held := range []int{0, 10_000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			a := socketapitest.Start(b, socketapitest.Options{Lease: time.Hour})
			ctx := context.Background()
			now := time.Now()
			for i := range held {
				h := board.Hold{Card: fmt.Sprintf("other-%05d", i), Token: board.ClaimToken{Marker: board.WorkerMarker("elsewhere", 1000+i%50), Epoch: 1}}
				if err := a.Loop.Add(h, heartbeat.Owner{}, now, 0); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := a.Store.CreateCard(ctx, board.CreateCardParams{ID: "c"}); err != nil {
				b.Fatal(err)
			}
			c := &client.Client{Socket: a.Path}
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
		})
	}
}
