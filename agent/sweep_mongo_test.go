package agent

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// TestBootSweepOnMongoJudgesASlowRenewalsLeaseByItsHoldersDeadline: on
// MongoDB a renewal's lease is the server's time + lease, stamped however
// slow the hello that read that time. The boot sweep infers the holder's
// earliest deadline from the stored lease (DESIGN.md#boot-sweep: less one
// renewal interval and the margin, its second margin absorbing the clock's
// uncertainty), so a lease stamped further past the renewal's attempt than
// that margin makes a restarted agent adopt a claim whose holder may
// already have given it up. Here the renewal's hello takes longer than the
// margin while the server's clock, read at the attempt, stands still: the
// lease must still end one lease after that reading, not a round trip
// later, and the sweep must judge the claim over once the deadline the
// holder may be counting (from the claim, before that renewal) has passed.
func TestBootSweepOnMongoJudgesASlowRenewalsLeaseByItsHoldersDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	host, err := pidprobe.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	const lease = 3 * time.Second
	margin := heartbeat.DefaultMargin(lease) // 300ms
	interval := lease / 3                    // the heartbeat's renewal interval
	slowHello := margin + 100*time.Millisecond

	t0 := time.Date(2033, 6, 7, 8, 9, 10, 0, time.UTC)
	clock := boardtest.NewManualClock(t0)
	server := &mongotest.SlowClock{Clock: clock}
	store, err := mongostore.Open(ctx, mongostore.Options{URI: mongotest.ClockProxy(t, server), Database: mongotest.Database(t), Clock: clock})
	if err != nil {
		t.Fatalf("mongostore.Open: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })

	live := livePID(t)
	if _, err := store.CreateCard(ctx, board.CreateCardParams{ID: "c1"}); err != nil {
		t.Fatal(err)
	}
	// The claim's attempt is at t0: its holder trusts it until
	// t0 + lease − margin.
	claimed, err := store.Claim(ctx, board.ClaimParams{Card: "c1", Marker: board.WorkerMarker(host, live), Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	// One interval later the heartbeat renews (its attempt at t0+interval,
	// a fresh reading of the server's clock), and the hello is slow.
	clock.Advance(interval)
	renewedAt := clock.Now()
	server.SetDelay(slowHello)
	res, err := store.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "c1", Token: claimed.Token()}}, Lease: lease})
	server.SetDelay(0)
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("RenewClaims = %+v, %v", res, err)
	}
	renewed := res[0].LeaseUntil

	// The agent dies. The holder's client may still be counting from the
	// claim (the renewal's ping may not have reached it): its deadline is
	// t0 + lease − margin, which has just passed when the agent is back.
	holderDeadline := t0.Add(lease - margin)
	clock.Set(holderDeadline.Add(time.Millisecond))
	items, adopted, err := BootSweep(ctx, SweepConfig{
		Store: store, Prober: pidprobe.New(), Clock: clock, Host: host,
		SelfPID: os.Getpid(), Lease: lease,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 || items[0].Action != SweepDisowned || len(adopted) != 0 {
		t.Errorf("boot sweep after a renewal whose hello took %v: items %+v, adopted %d; want c1 disowned: "+
			"its holder's deadline %s (counted from the claim) has passed, and the renewal at %s stamped the lease until %s, "+
			"%v past that attempt + lease",
			slowHello, items, len(adopted), holderDeadline.Format(time.StampMilli), renewedAt.Format(time.StampMilli),
			renewed.Format(time.StampMilli), renewed.Sub(renewedAt.Add(lease)))
	}
}
