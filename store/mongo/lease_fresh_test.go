package mongostore_test

import (
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// TestALeaseFromAFreshReadingGainsNothingFromTheRoundTrip: a write that
// asks the server for its clock itself sent that hello after its caller's
// attempt began, so the time the server reported is already no earlier
// than the server's time at the attempt, and a lease of that time + lease
// outlasts the holder's deadline by the whole margin (DESIGN.md#twin-clock).
// Adding the hello's round trip to it only stretches the lease past what
// the holder was granted, and the boot sweep, which infers the holder's
// deadline from the stored lease, pays for every millisecond of it out of
// its second margin (DESIGN.md#boot-sweep). So a lease from a fresh
// reading ends one lease after the reported time (and the millisecond the
// report is truncated to), however slow the hello; only a reused reading,
// which may be older than the attempt, adds its uncertainty.
func TestALeaseFromAFreshReadingGainsNothingFromTheRoundTrip(t *testing.T) {
	t.Parallel()
	const (
		lease = 30 * time.Second
		slow  = 200 * time.Millisecond
	)
	clock := boardtest.NewManualClock(time.Date(2033, 6, 7, 8, 9, 10, 0, time.UTC))
	server := &mongotest.SlowClock{Clock: clock}
	s := openStore(t, mongostore.Options{URI: mongotest.ClockProxy(t, server), Clock: clock})
	ctx := t.Context()
	if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "c1", Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	// Every write below is past the last reading's second: it asks anew.
	clock.Advance(time.Second)
	at := clock.Now()
	server.SetDelay(slow)
	card, err := s.Claim(ctx, board.ClaimParams{Card: "c1", Marker: "host-a-4242", Lease: lease})
	server.SetDelay(0)
	if err != nil {
		t.Fatal(err)
	}
	if most := at.Add(lease + time.Millisecond); card.ClaimLeaseUntil.Before(at.Add(lease)) || card.ClaimLeaseUntil.After(most) {
		t.Errorf("claimed through a %v hello at server time %s: lease until %s, want %s + lease and at most a millisecond more (%v more)",
			slow, at.Format(time.StampMilli), card.ClaimLeaseUntil.Format(time.StampMilli), at.Format(time.StampMilli), card.ClaimLeaseUntil.Sub(at.Add(lease)))
	}

	clock.Advance(10 * time.Second)
	at = clock.Now()
	server.SetDelay(slow)
	res, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "c1", Token: card.Token()}}, Lease: lease})
	server.SetDelay(0)
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("RenewClaims = %+v, %v", res, err)
	}
	if got, most := res[0].LeaseUntil, at.Add(lease+time.Millisecond); got.Before(at.Add(lease)) || got.After(most) {
		t.Errorf("renewed through a %v hello at server time %s: lease until %s, want %s + lease and at most a millisecond more (%v more)",
			slow, at.Format(time.StampMilli), got.Format(time.StampMilli), at.Format(time.StampMilli), got.Sub(at.Add(lease)))
	}
}
