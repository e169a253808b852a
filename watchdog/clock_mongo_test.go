package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// The fleet twin stamps leases with the server's clock, so the reaper must
// judge them by the server's clock too. Here the server's clock runs 45 s
// behind or ahead of the agents' (the test server reports a clock the test
// drives, through mongotest.ClockProxy) while a live worker renews every
// lease/3 and a dead one does not: the live claim is never taken, and the
// dead worker's card is recovered within a lease and two passes.
func TestFleetJudgesLeasesByTheServersClock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		skew time.Duration
	}{
		{"server 45 s behind the agents", -45 * time.Second},
		{"server 45 s ahead of the agents", 45 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			server := boardtest.NewManualClock(time.Now().Add(tc.skew).Truncate(time.Millisecond))
			uri, db := mongotest.ClockProxy(t, server), mongotest.Database(t)
			open := func() *mongostore.Store {
				t.Helper()
				octx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				s, err := mongostore.Open(octx, mongostore.Options{
					URI: uri, Database: db, Lease: fleetLease, EventLag: serializedServer,
					// The store ages its reading of the server's clock by the
					// time that passes: here the server's simulated time.
					Clock: server,
				})
				if err != nil {
					t.Fatalf("mongostore.Open: %v", err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			workers := open()
			live, err := launch(ctx, workers, "live", board.StateInProgress, 4242, board.RunRunning)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := launch(ctx, workers, "dead", board.StateInProgress, 4343, board.RunFinished); err != nil {
				t.Fatal(err)
			}
			// The agent's own clock is whatever the machine says; the
			// reaper has no other.
			r, err := watchdog.New(watchdog.Config{
				Store: open(), Marker: "agent1-6001", Fleet: true, Workers: 1,
				Lease: func() time.Duration { return fleetLease }, Enabled: func() bool { return true },
			})
			if err != nil {
				t.Fatal(err)
			}

			interval := fleetLease / 3
			recoveredAt := time.Duration(-1)
			for elapsed := interval; elapsed <= fleetLease+2*interval; elapsed += interval {
				server.Advance(interval)
				res, err := workers.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "live", Token: live}}, Lease: fleetLease})
				if err != nil || res[0].Err != nil {
					t.Fatalf("after %s the live worker's renewal failed: %v %+v", elapsed, err, res)
				}
				if _, err := r.RunOnce(ctx, false); err != nil {
					t.Fatalf("RunOnce after %s: %v", elapsed, err)
				}
				c, err := workers.GetCard(ctx, board.GetCardParams{ID: "live"})
				if err != nil {
					t.Fatal(err)
				}
				if c.Token() != live || c.State != board.StateInProgress {
					t.Fatalf("after %s the live claim is %+v in %s, want %+v untouched in in_progress", elapsed, c.Token(), c.State, live)
				}
				if run, err := workers.GetRun(ctx, board.GetRunParams{ID: "live-run"}); err != nil || run.Status != board.RunRunning {
					t.Fatalf("after %s the live run is %s (%v), want running", elapsed, run.Status, err)
				}
				if d, err := workers.GetCard(ctx, board.GetCardParams{ID: "dead"}); err == nil && d.State == board.StateDone && !d.Claimed() && recoveredAt < 0 {
					recoveredAt = elapsed
				}
			}
			if recoveredAt < 0 {
				t.Fatalf("the dead worker's card was not recovered within a lease and two passes (%s)", fleetLease+2*interval)
			}
			t.Logf("dead card recovered %s after its claim", recoveredAt)
		})
	}
}
