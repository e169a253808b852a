package heartbeat

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// A claim added while the running loop waits for a far tick re-plans the
// wait: its loss is declared at its own trusted deadline, not at the next
// scheduled tick. The other claims held stay as they were: only the added
// claim's deadline decides how soon the loop wakes.
func TestAddedClaimWithANearDeadlineWakesTheLoop(t *testing.T) {
	t.Parallel()
	const (
		cadence = 3 * time.Minute // Lease()/3 = 1 minute between ticks
		short   = 600 * time.Millisecond
	)
	ticked := make(chan TickResult, 16)
	lost := make(chan Lost, 16)
	l, st, sp := realLoop(t, cadence, func(c *Config) {
		c.OnTick = func(r TickResult) { ticked <- r }
		c.OnLost = func(x Lost) { lost <- x }
	})
	// Claims granted under the long lease: trusted for minutes.
	for i := range 50 {
		claimReal(t, l, st, fmt.Sprintf("long-%02d", i), cadence)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	select {
	case r := <-ticked: // the first tick runs at once; the next is a minute away
		if r.Renewed != 50 {
			t.Fatalf("first tick renewed %d, want 50", r.Renewed)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no first tick in 20s")
	}
	// From now on the store never answers, so the short claim cannot be
	// confirmed and must be declared lost at its trusted deadline.
	sp.setFault(func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error) {
		return nil, errUnreachable
	})
	h := claimReal(t, l, st, "short", short)
	deadline := mustLookup(t, l, "short").TrustedUntil
	select {
	case got := <-lost:
		if got.Card != h.Card {
			t.Fatalf("lost %+v, want the short claim", got)
		}
		if now := time.Now(); now.Before(deadline) {
			t.Errorf("loss declared %v before the trusted deadline", deadline.Sub(now))
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the short claim was not declared lost within 20s: the added deadline did not wake the loop")
	}
	if _, ok := l.Lookup("long-00"); !ok {
		t.Errorf("a long claim was dropped with the short one")
	}
}

func mustLookup(t *testing.T, l *Loop, card string) Claim {
	t.Helper()
	c, ok := l.Lookup(card)
	if !ok {
		t.Fatalf("Lookup(%q): not tracked", card)
	}
	return c
}

// A grant trusted past the loop's planned tick leaves the loop asleep: the
// tick covers it, and waking the loop on every grant costs a goroutine
// switch per claim on the socket's hot path. A grant whose deadline comes
// first, or one made while no tick is planned ahead (the loop is ticking,
// or its timer is due), still wakes it. White-box: no loop goroutine runs
// here to drain the wake channel, so what Add sent stays in it.
func TestAddWakesTheLoopOnlyBeforeItsPlannedTick(t *testing.T) {
	t.Parallel()
	l, _, _ := realLoop(t, 3*time.Minute, nil)
	h := func(card string) board.Hold {
		return board.Hold{Card: card, Token: board.ClaimToken{Marker: marker(4100), Epoch: 1}}
	}
	woke := func() bool {
		select {
		case <-l.wake:
			return true
		default:
			return false
		}
	}
	l.plan(time.Now().Add(time.Minute))
	if err := l.Add(h("far"), self(t), time.Now(), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if woke() {
		t.Errorf("a claim trusted for minutes woke the loop whose tick is a minute away")
	}
	if err := l.Add(h("near"), self(t), time.Now(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if !woke() {
		t.Errorf("a claim trusted for about a second did not wake the loop whose tick is a minute away")
	}
	l.plan(time.Now().Add(-time.Millisecond)) // the timer is due: the loop is about to tick
	if err := l.Add(h("during"), self(t), time.Now(), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if !woke() {
		t.Errorf("a claim added while the loop's tick was due did not wake it")
	}
}
