package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	"github.com/leasekeeper/leasekeeper/pidprobe/pidprobetest"
)

var errUnreachable = errors.New("store unreachable")

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	store := &spy{}
	lease := func(d time.Duration) func() time.Duration { return func() time.Duration { return d } }
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no store", Config{Lease: lease(testLease)}},
		{"no lease", Config{Store: store}},
		{"zero lease", Config{Store: store, Lease: lease(0)}},
		{"negative margin", Config{Store: store, Lease: lease(testLease), Margin: -time.Second}},
		{"margin of half the lease", Config{Store: store, Lease: lease(testLease), Margin: testLease / 2}},
		{"negative keepalive window", Config{Store: store, Lease: lease(testLease), KeepaliveWindow: -1}},
		{"unknown mode", Config{Store: store, Lease: lease(testLease), Mode: func() Mode { return "telepathy" }}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("New(%s) err = %v, want ErrInvalidConfig", tt.name, err)
			}
		})
	}
	if _, err := New(Config{Store: store, Lease: lease(testLease)}); err != nil {
		t.Errorf("New(minimal config) err = %v, want nil", err)
	}
}

func TestDefaultMargin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		lease, want time.Duration
	}{
		{3 * time.Second, 300 * time.Millisecond},
		{20 * time.Second, 2 * time.Second},
		{30 * time.Second, 2 * time.Second},
		{10 * time.Minute, 2 * time.Second},
	}
	for _, tt := range tests {
		if got := DefaultMargin(tt.lease); got != tt.want {
			t.Errorf("DefaultMargin(%v) = %v, want %v", tt.lease, got, tt.want)
		}
	}
}

func TestAddRefusesInvalidClaims(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	now := h.clock.Now()
	good := board.ClaimToken{Marker: marker(4242), Epoch: 1}
	tests := []struct {
		name    string
		hold    board.Hold
		attempt time.Time
	}{
		{"no card", board.Hold{Token: good}, now},
		{"zero token", board.Hold{Card: "a"}, now},
		{"bad marker", board.Hold{Card: "a", Token: board.ClaimToken{Marker: "nodash", Epoch: 1}}, now},
		{"zero attempt start", board.Hold{Card: "a", Token: good}, time.Time{}},
	}
	for _, tt := range tests {
		if err := h.loop.Add(tt.hold, Owner{}, tt.attempt, 0); !errors.Is(err, ErrInvalidClaim) {
			t.Errorf("%s: Add err = %v, want ErrInvalidClaim", tt.name, err)
		}
	}
	if got := h.loop.Held(); len(got) != 0 {
		t.Errorf("Held() after refused adds = %v, want none", got)
	}
}

func TestZeroClaimsMakeNoStoreCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	res := h.loop.RunOnce(h.ctx)
	if res.StoreCalls != 0 || len(h.spy.renewCalls()) != 0 {
		t.Errorf("tick with nothing held: StoreCalls = %d, spy saw %d calls; want 0 and 0", res.StoreCalls, len(h.spy.renewCalls()))
	}
	if got, want := res.Next, testLease/3; got != want {
		t.Errorf("Next = %v, want %v", got, want)
	}
}

// DESIGN.md#heartbeat-batch: every held claim is renewed in ONE batched write per tick.
func TestOneBatchedStoreCallPerTick(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	me := self(t)
	const n = 50
	var want []board.Hold
	for i := range n {
		want = append(want, h.claim(fmt.Sprintf("card-%02d", i), marker(1000+i), me))
	}

	for tick := 1; tick <= 3; tick++ {
		h.clock.Advance(testLease / 3)
		attempt := h.clock.Now()
		res := h.loop.RunOnce(h.ctx)
		if res.StoreCalls != 1 || res.Renewed != n || res.Err != nil || len(res.Lost) != 0 {
			t.Fatalf("tick %d: %+v, want 1 call, %d renewed, no error, nothing lost", tick, res, n)
		}
		calls := h.spy.renewCalls()
		if got := len(calls); got != tick {
			t.Fatalf("after tick %d: %d RenewClaims calls, want %d", tick, got, tick)
		}
		last := calls[len(calls)-1]
		if !reflect.DeepEqual(last.holds, want) || last.lease != testLease {
			t.Fatalf("tick %d renewed %d holds with lease %v; want all %d with %v", tick, len(last.holds), last.lease, n, testLease)
		}
		// The real store moved every lease to now + lease.
		for _, hold := range want {
			if got, want := h.card(hold.Card).ClaimLeaseUntil, attempt.Add(testLease); !got.Equal(want) {
				t.Fatalf("tick %d: %s lease until %v, want %v", tick, hold.Card, got, want)
			}
		}
		for _, c := range h.loop.Held() {
			if got, want := c.TrustedUntil, attempt.Add(testLease-testMargin); !got.Equal(want) {
				t.Fatalf("tick %d: %s trusted until %v, want %v", tick, c.Hold.Card, got, want)
			}
		}
	}
}

// The trusted deadline counts from the START of the confirming attempt,
// however long the store took to answer.
func TestTrustedDeadlineCountsFromAttemptStart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.claim("slow", marker(777), self(t))
	h.clock.Advance(testLease / 3)
	attempt := h.clock.Now()
	h.spy.setFault(func(ctx context.Context, holds []board.Hold, lease time.Duration) ([]board.RenewResult, error) {
		res, err := h.store.RenewClaims(ctx, board.RenewClaimsParams{Holds: holds, Lease: lease})
		h.clock.Advance(7 * time.Second) // the answer takes 7s to come back
		return res, err
	})
	if res := h.loop.RunOnce(h.ctx); res.Renewed != 1 {
		t.Fatalf("RunOnce = %+v, want 1 renewed", res)
	}
	held := h.loop.Held()
	if len(held) != 1 {
		t.Fatalf("Held() = %v, want the one claim", held)
	}
	if got, want := held[0].TrustedUntil, attempt.Add(testLease-testMargin); !got.Equal(want) {
		t.Errorf("TrustedUntil = %v, want attempt start + lease - margin = %v", got, want)
	}
	if got, want := held[0].ConfirmedAt, attempt; !got.Equal(want) {
		t.Errorf("ConfirmedAt = %v, want %v", got, want)
	}
	if got, want := held[0].LastRenewed, attempt.Add(7*time.Second); !got.Equal(want) {
		t.Errorf("LastRenewed = %v, want %v", got, want)
	}
}

// A conflict in the renewal results means the token no longer holds the
// card: report it, stop renewing it, keep renewing the others.
func TestConflictStopsTrackingTheClaim(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// steal changes the real store behind the holder's back.
		steal func(h *harness, card string, tok board.ClaimToken)
		want  LostReason
	}{
		{
			name: "another owner took the card",
			steal: func(h *harness, card string, tok board.ClaimToken) {
				if err := h.store.Release(h.ctx, board.ReleaseParams{Card: card, Marker: tok.Marker, Actor: "operator"}); err != nil {
					h.t.Fatalf("force release: %v", err)
				}
				if _, err := h.store.Claim(h.ctx, board.ClaimParams{Card: card, Marker: marker(9999), Lease: testLease}); err != nil {
					h.t.Fatalf("re-claim by another: %v", err)
				}
			},
			want: LostSuperseded,
		},
		{
			name: "an operator force-released the card",
			steal: func(h *harness, card string, tok board.ClaimToken) {
				if err := h.store.Release(h.ctx, board.ReleaseParams{Card: card, Marker: tok.Marker, Actor: "operator"}); err != nil {
					h.t.Fatalf("force release: %v", err)
				}
			},
			want: LostReleased,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			me := self(t)
			lostHold := h.claim("lost", marker(500), me)
			h.claim("kept", marker(501), me)
			tt.steal(h, lostHold.Card, lostHold.Token)

			h.clock.Advance(testLease / 3)
			res := h.loop.RunOnce(h.ctx)
			want := []Lost{{Card: "lost", Epoch: lostHold.Token.Epoch, Marker: lostHold.Token.Marker, Reason: tt.want, Owner: me}}
			if !reflect.DeepEqual(res.Lost, want) || !reflect.DeepEqual(h.lostSoFar(), want) {
				t.Fatalf("lost = %+v (OnLost saw %+v), want %+v", res.Lost, h.lostSoFar(), want)
			}
			if res.Renewed != 1 {
				t.Errorf("Renewed = %d, want 1 (the other claim)", res.Renewed)
			}
			if got, want := heldCards(h.loop), []string{"kept"}; !slices.Equal(got, want) {
				t.Errorf("Held() = %v, want %v", got, want)
			}
			// The next tick no longer renews the lost claim.
			h.clock.Advance(testLease / 3)
			h.loop.RunOnce(h.ctx)
			calls := h.spy.renewCalls()
			if got := calls[len(calls)-1].holds; len(got) != 1 || got[0].Card != "kept" {
				t.Errorf("next tick renewed %v, want only kept", got)
			}
		})
	}
}

// With no confirmed renewal, a claim is lost exactly when its trusted
// deadline passes: not a tick before, and whatever the reason the batch was
// not confirmed. ErrOutcomeUnknown never counts as renewed, even when the
// write did land in the store.
func TestUnconfirmedExactlyAtTrustedDeadline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fault func(h *harness) func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error)
	}{
		{"store unreachable", func(h *harness) func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error) {
			return func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error) {
				return nil, errUnreachable
			}
		}},
		{"outcome unknown after the write landed", func(h *harness) func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error) {
			return func(ctx context.Context, holds []board.Hold, lease time.Duration) ([]board.RenewResult, error) {
				if _, err := h.store.RenewClaims(ctx, board.RenewClaimsParams{Holds: holds, Lease: lease}); err != nil {
					return nil, err
				}
				return nil, fmt.Errorf("plugin died after sending: %w", board.ErrOutcomeUnknown)
			}
		}},
		{"per-hold outcome unknown", func(h *harness) func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error) {
			return func(_ context.Context, holds []board.Hold, _ time.Duration) ([]board.RenewResult, error) {
				out := make([]board.RenewResult, len(holds))
				for i, hd := range holds {
					out[i] = board.RenewResult{Card: hd.Card, Err: board.ErrOutcomeUnknown}
				}
				return out, nil
			}
		}},
		{"results for other cards", func(h *harness) func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error) {
			return func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error) {
				return []board.RenewResult{{Card: "someone-else"}}, nil
			}
		}},
		{"too few results", func(h *harness) func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error) {
			return func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error) {
				return nil, nil
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			me := self(t)
			confirmed := h.clock.Now()
			hold := h.claim("card", marker(600), me)
			deadline := confirmed.Add(testLease - testMargin)
			h.spy.setFault(tt.fault(h))

			// Failing ticks at lease/3 and 2·lease/3, then one just
			// before the deadline: still held, never renewed.
			for _, at := range []time.Time{confirmed.Add(testLease / 3), confirmed.Add(2 * testLease / 3), deadline.Add(-time.Nanosecond)} {
				h.clock.Set(at)
				res := h.loop.RunOnce(h.ctx)
				if res.Renewed != 0 || len(res.Lost) != 0 {
					t.Fatalf("tick at deadline%+v: %+v, want nothing renewed and nothing lost", at.Sub(deadline), res)
				}
				if res.StoreCalls != 1 {
					t.Fatalf("tick at deadline%+v: StoreCalls = %d, want 1 (keep trying)", at.Sub(deadline), res.StoreCalls)
				}
			}
			held := h.loop.Held()
			if len(held) != 1 || !held[0].TrustedUntil.Equal(deadline) || held[0].Failures != 3 {
				t.Fatalf("Held() = %+v, want the claim trusted until %v after 3 failures", held, deadline)
			}
			// The tick just before the deadline must not wait a full
			// interval: it schedules the next one at the deadline.
			if got, want := h.loop.RunOnce(h.ctx).Next, time.Nanosecond; got != want {
				t.Fatalf("Next just before the deadline = %v, want %v", got, want)
			}

			h.clock.Set(deadline)
			calls := len(h.spy.renewCalls())
			res := h.loop.RunOnce(h.ctx)
			want := []Lost{{Card: "card", Epoch: hold.Token.Epoch, Marker: hold.Token.Marker, Reason: LostUnconfirmed, Owner: me}}
			if !reflect.DeepEqual(res.Lost, want) {
				t.Fatalf("tick at the deadline lost %+v, want %+v", res.Lost, want)
			}
			if got := len(h.spy.renewCalls()); got != calls || res.StoreCalls != 0 {
				t.Errorf("a claim declared lost was renewed again (%d calls, want %d)", got, calls)
			}
			if got := h.loop.Held(); len(got) != 0 {
				t.Errorf("Held() after loss = %v, want none", got)
			}
		})
	}
}

// A store that hangs does not hold the loss back: the call is bounded by
// the earliest trusted deadline, and the loss is declared in the same tick.
func TestHangingStoreIsCutAtTheDeadline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.Margin = testLease/3 - time.Millisecond })
	// With this margin the trusted deadline is 1ms after the 2·lease/3 tick,
	// so the bound on the hanging call is 1ms of real time.
	hold := h.claim("card", marker(601), self(t))
	h.clock.Advance(testLease / 3)
	if res := h.loop.RunOnce(h.ctx); res.Renewed != 1 {
		t.Fatalf("first tick: %+v, want renewed", res)
	}
	deadline := h.loop.Held()[0].TrustedUntil
	h.spy.setFault(func(ctx context.Context, _ []board.Hold, _ time.Duration) ([]board.RenewResult, error) {
		<-ctx.Done() // the store never answers
		h.clock.Set(deadline)
		return nil, ctx.Err()
	})
	h.clock.Set(deadline.Add(-time.Millisecond))
	res := h.loop.RunOnce(h.ctx)
	if !errors.Is(res.Err, context.DeadlineExceeded) {
		t.Errorf("Err = %v, want the call's deadline", res.Err)
	}
	if calls := h.spy.renewCalls(); !calls[len(calls)-1].hasDeadline {
		t.Errorf("the renewal call had no deadline")
	}
	if len(res.Lost) != 1 || res.Lost[0].Reason != LostUnconfirmed || res.Lost[0].Card != hold.Card {
		t.Errorf("Lost = %+v, want card unconfirmed", res.Lost)
	}
}

// A dead worker's claims are not renewed; they are expired through the
// owner's own fenced write so the watchdog can rule at once, and reported.
func TestDeadOwnerIsExpiredAndReported(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	me := self(t)

	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	pid := sleeper.Process.Pid
	start, err := pidprobe.New().Identify(h.ctx, pid)
	if err != nil {
		t.Fatalf("worker start time: %v", err)
	}
	worker := Owner{PID: pid, Start: start}
	a := h.claim("worker-a", marker(pid), worker)
	b := h.claim("worker-b", marker(pid), worker)
	h.claim("mine", marker(me.PID), me)

	// Alive: renewed like any other.
	h.clock.Advance(testLease / 3)
	if res := h.loop.RunOnce(h.ctx); res.Renewed != 3 {
		t.Fatalf("tick while alive: %+v, want 3 renewed", res)
	}

	if err := sleeper.Process.Kill(); err != nil {
		t.Fatalf("kill worker: %v", err)
	}
	_ = sleeper.Wait()

	h.clock.Advance(testLease / 3)
	now := h.clock.Now()
	res := h.loop.RunOnce(h.ctx)
	if got, want := h.spy.expireCalls(), []expireCall{{"worker-a", a.Token}, {"worker-b", b.Token}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ExpireClaimOwned calls = %+v, want %+v", got, want)
	}
	want := []Lost{
		{Card: "worker-a", Epoch: a.Token.Epoch, Marker: a.Token.Marker, Reason: LostOwnerDead, Owner: worker},
		{Card: "worker-b", Epoch: b.Token.Epoch, Marker: b.Token.Marker, Reason: LostOwnerDead, Owner: worker},
	}
	if !reflect.DeepEqual(res.Lost, want) || !reflect.DeepEqual(h.lostSoFar(), want) {
		t.Fatalf("lost = %+v (OnLost %+v), want %+v", res.Lost, h.lostSoFar(), want)
	}
	calls := h.spy.renewCalls()
	if got := calls[len(calls)-1].holds; len(got) != 1 || got[0].Card != "mine" {
		t.Errorf("renewed %v, want only the live owner's card", got)
	}
	// The real store now shows the dead owner's leases expired.
	for _, id := range []string{"worker-a", "worker-b"} {
		if c := h.card(id); !c.LeaseExpired(now) {
			t.Errorf("%s lease until %v, want expired at %v", id, c.ClaimLeaseUntil, now)
		}
	}
	if c := h.card("mine"); c.LeaseExpired(now) {
		t.Errorf("live owner's lease expired: %v", c.ClaimLeaseUntil)
	}
}

// The owner check is evidence-driven: only a proof of death stops renewal.
func TestOwnerVerdicts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		owner Owner
		setup func(f *pidprobetest.Fake)
		want  LostReason // "" means still renewed
	}{
		{"alive", Owner{PID: 100, Start: pidprobetest.ID(5)}, func(f *pidprobetest.Fake) { f.Spawn(100, 5) }, ""},
		{"unknown conserves", Owner{PID: 100, Start: pidprobetest.ID(5)}, func(f *pidprobetest.Fake) { f.Spawn(100, 5); f.SetUnknown(100, true) }, ""},
		{"pid reused", Owner{PID: 100, Start: pidprobetest.ID(5)}, func(f *pidprobetest.Fake) { f.Spawn(100, 6) }, LostOwnerDead},
		{"gone", Owner{PID: 100, Start: pidprobetest.ID(5)}, func(*pidprobetest.Fake) {}, LostOwnerDead},
		{"start unknown, pid exists", Owner{PID: 100}, func(f *pidprobetest.Fake) { f.Spawn(100, 6) }, ""},
		{"invisible owner without key", Owner{}, func(*pidprobetest.Fake) {}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := &pidprobetest.Fake{}
			tt.setup(fake)
			h := newHarness(t, func(c *Config) { c.Prober = fake })
			h.claim("card", marker(4000), tt.owner)
			h.clock.Advance(testLease / 3)
			res := h.loop.RunOnce(h.ctx)
			switch {
			case tt.want == "" && (res.Renewed != 1 || len(res.Lost) != 0):
				t.Errorf("RunOnce = %+v, want renewed", res)
			case tt.want != "" && (len(res.Lost) != 1 || res.Lost[0].Reason != tt.want):
				t.Errorf("Lost = %+v, want %s", res.Lost, tt.want)
			}
		})
	}
}

// One probe per distinct worker process, however many claims it holds.
func TestOneProbePerOwnerPerTick(t *testing.T) {
	t.Parallel()
	fake := &pidprobetest.Fake{}
	fake.Spawn(100, 1)
	fake.Spawn(200, 2)
	h := newHarness(t, func(c *Config) { c.Prober = fake })
	for i := range 10 {
		o := Owner{PID: 100, Start: pidprobetest.ID(1)}
		if i%2 == 1 {
			o = Owner{PID: 200, Start: pidprobetest.ID(2)}
		}
		h.claim(fmt.Sprintf("c%d", i), marker(o.PID), o)
	}
	h.loop.RunOnce(h.ctx)
	if got, want := fake.Probes(), 2; got != want {
		t.Errorf("probes = %d, want %d", got, want)
	}
}

func TestKeepalive(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.Mode = func() Mode { return ModeKeepalive } })
	pinged := h.claim("pinged", marker(300), Owner{KeepaliveID: "client-1"})
	silent := h.claim("silent", marker(301), Owner{KeepaliveID: "client-2"})
	step := testLease / 3

	// Both are fine until the silent client's window (2·lease/3 since its
	// claim) has passed.
	for tick := 1; tick <= 2; tick++ {
		h.clock.Advance(step)
		if !h.loop.Ping("client-1") {
			t.Fatalf("Ping(client-1) = false, want true")
		}
		if res := h.loop.RunOnce(h.ctx); res.Renewed != 2 || len(res.Lost) != 0 {
			t.Fatalf("tick %d: %+v, want both renewed", tick, res)
		}
	}
	h.clock.Advance(step)
	h.loop.Ping("client-1")
	now := h.clock.Now()
	// The latest deadline the silent owner could have been given: had it
	// pinged just before it fell silent, its answer carried this.
	var trusted time.Time
	for _, c := range h.loop.Held() {
		if c.Hold.Card == "silent" {
			trusted = c.TrustedUntil
		}
	}
	res := h.loop.RunOnce(h.ctx)
	want := []Lost{{Card: "silent", Epoch: silent.Token.Epoch, Marker: silent.Token.Marker, Reason: LostKeepaliveMissed, Owner: Owner{KeepaliveID: "client-2"}}}
	if !reflect.DeepEqual(res.Lost, want) || res.Renewed != 1 {
		t.Fatalf("tick 3: renewed %d, lost %+v; want 1 renewed, lost %+v", res.Renewed, res.Lost, want)
	}
	// A silent owner is not a dead one: its lease is not cut short, and
	// runs out no earlier than the deadline it may still be working to
	// (DESIGN.md#keepalive).
	if got := h.spy.expireCalls(); len(got) != 0 {
		t.Errorf("expire calls = %+v, want none for a silent owner", got)
	}
	if c := h.card("silent"); c.LeaseExpired(now) || c.ClaimLeaseUntil.Before(trusted) {
		t.Errorf("silent lease until %v: want it left to run out, not before the owner's deadline %v", c.ClaimLeaseUntil, trusted)
	}
	// It is marked given up in the store, where a restarted agent's boot
	// sweep reads it; the pinged claim is not.
	if c := h.card("silent"); !c.Disowned() {
		t.Errorf("silent claim not marked disowned in the store: disowned_epoch %d, claim epoch %d", c.DisownedEpoch, c.ClaimEpoch)
	}
	if c := h.card(pinged.Card); c.Disowned() {
		t.Errorf("pinged claim marked disowned")
	}
	// Nor is it renewed again.
	before := h.card("silent").ClaimLeaseUntil
	h.clock.Advance(step)
	h.loop.Ping("client-1")
	h.loop.RunOnce(h.ctx)
	if got := h.card("silent").ClaimLeaseUntil; !got.Equal(before) {
		t.Errorf("silent lease renewed after the miss: %v, was %v", got, before)
	}
	if c := h.card(pinged.Card); c.LeaseExpired(now) {
		t.Errorf("pinged claim's lease expired")
	}
	// The silent client's key is gone with its last claim.
	if h.loop.Ping("client-2") {
		t.Errorf("Ping(client-2) after its claim was lost = true, want false")
	}
}

// Switching into keepalive mode gives every owner a fresh window: clients
// were not bound to ping before.
func TestSwitchToKeepaliveStartsAFreshWindow(t *testing.T) {
	t.Parallel()
	fake := &pidprobetest.Fake{}
	fake.Spawn(100, 0)
	h := newHarness(t, func(c *Config) { c.Prober = fake })
	h.claim("card", marker(302), Owner{PID: 100, KeepaliveID: "client"})

	// Long in pid mode, no pings at all.
	for range 5 {
		h.clock.Advance(testLease / 3)
		if res := h.loop.RunOnce(h.ctx); res.Renewed != 1 {
			t.Fatalf("pid mode tick: %+v", res)
		}
	}
	h.mode.Store(ModeKeepalive)
	h.clock.Advance(testLease / 3)
	if res := h.loop.RunOnce(h.ctx); res.Renewed != 1 || len(res.Lost) != 0 {
		t.Fatalf("first keepalive tick: %+v, want renewed (fresh window)", res)
	}
	h.clock.Advance(testLease / 3)
	h.loop.RunOnce(h.ctx)
	h.clock.Advance(testLease/3 + time.Millisecond)
	if res := h.loop.RunOnce(h.ctx); len(res.Lost) != 1 || res.Lost[0].Reason != LostKeepaliveMissed {
		t.Fatalf("after the window: %+v, want keepalive_missed", res)
	}
}

// The lease is re-read every tick: a hot reload changes the renewal and
// the interval on the next tick.
func TestLeaseHotReload(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.claim("card", marker(303), self(t))
	h.clock.Advance(testLease / 3)
	if res := h.loop.RunOnce(h.ctx); res.Lease != testLease || res.Next != testLease/3 {
		t.Fatalf("before reload: lease %v next %v", res.Lease, res.Next)
	}
	h.lease.Store(int64(9 * time.Second))
	h.clock.Advance(testLease / 3)
	attempt := h.clock.Now()
	res := h.loop.RunOnce(h.ctx)
	if res.Lease != 9*time.Second || res.Next != 3*time.Second {
		t.Errorf("after reload: lease %v next %v, want 9s and 3s", res.Lease, res.Next)
	}
	calls := h.spy.renewCalls()
	if got := calls[len(calls)-1].lease; got != 9*time.Second {
		t.Errorf("renewed with lease %v, want 9s", got)
	}
	// The trusted deadline uses the new lease and its default margin. It
	// never moves backwards, so it stays at the earlier, longer one.
	held := h.loop.Held()[0]
	if got, want := held.TrustedUntil, attempt.Add(-testLease/3).Add(testLease-testMargin); !got.Equal(want) {
		t.Errorf("TrustedUntil = %v, want the earlier deadline %v", got, want)
	}
	// A reload to nonsense keeps the last valid lease.
	h.lease.Store(0)
	if res := h.loop.RunOnce(h.ctx); res.Lease != 9*time.Second {
		t.Errorf("after a zero reload: lease %v, want 9s kept", res.Lease)
	}
}

func TestRemoveStopsRenewalSilently(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	me := self(t)
	h.claim("a", marker(304), me)
	h.claim("b", marker(305), me)
	if !h.loop.Remove("a") {
		t.Fatalf("Remove(a) = false, want true")
	}
	if h.loop.Remove("a") {
		t.Errorf("second Remove(a) = true, want false")
	}
	h.clock.Advance(testLease / 3)
	h.loop.RunOnce(h.ctx)
	calls := h.spy.renewCalls()
	if got := calls[0].holds; len(got) != 1 || got[0].Card != "b" {
		t.Errorf("renewed %v, want only b", got)
	}
	if got := h.lostSoFar(); len(got) != 0 {
		t.Errorf("OnLost after Remove: %+v, want nothing", got)
	}
}

// A result for a claim removed or replaced while the store call was in
// flight must not touch the new state.
func TestChangesDuringTheCallWin(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	me := self(t)
	old := h.claim("replaced", marker(306), me)
	h.claim("removed", marker(307), me)
	newTok := board.ClaimToken{Marker: old.Token.Marker, Epoch: old.Token.Epoch + 1}
	h.spy.setFault(func(ctx context.Context, holds []board.Hold, lease time.Duration) ([]board.RenewResult, error) {
		h.loop.Remove("removed")
		// A fresh grant under a new token lands mid-call.
		if err := h.loop.Add(board.Hold{Card: "replaced", Token: newTok}, me, h.clock.Now(), testLease); err != nil {
			t.Errorf("Add during call: %v", err)
		}
		out := make([]board.RenewResult, len(holds))
		for i, hd := range holds {
			out[i] = board.RenewResult{Card: hd.Card, Err: board.Conflict(hd.Card, marker(1), 99)}
		}
		return out, nil
	})
	h.clock.Advance(testLease / 3)
	res := h.loop.RunOnce(h.ctx)
	if len(res.Lost) != 0 || len(h.lostSoFar()) != 0 {
		t.Errorf("stale conflicts reported: %+v", res.Lost)
	}
	held := h.loop.Held()
	if len(held) != 1 || held[0].Hold.Token != newTok {
		t.Errorf("Held() = %+v, want only the replaced card under %+v", held, newTok)
	}
}

// Re-adding the same token (an idempotent re-claim) only moves the
// confirmation forward.
func TestReAddSameTokenMovesForwardOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	me := self(t)
	hold := h.claim("card", marker(308), me)
	first := h.loop.Held()[0]
	if err := h.loop.Add(hold, me, first.ConfirmedAt.Add(-time.Minute), testLease); err != nil {
		t.Fatalf("Add: %v", err)
	}
	if got := h.loop.Held()[0]; !got.TrustedUntil.Equal(first.TrustedUntil) {
		t.Errorf("older re-add moved TrustedUntil to %v, want %v", got.TrustedUntil, first.TrustedUntil)
	}
	later := first.ConfirmedAt.Add(5 * time.Second)
	if err := h.loop.Add(hold, me, later, testLease); err != nil {
		t.Fatalf("Add: %v", err)
	}
	if got, want := h.loop.Held()[0].TrustedUntil, later.Add(testLease-testMargin); !got.Equal(want) {
		t.Errorf("newer re-add: TrustedUntil = %v, want %v", got, want)
	}
}

func TestPingUnknownKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, key := range []string{"", "nobody"} {
		if h.loop.Ping(key) {
			t.Errorf("Ping(%q) = true, want false", key)
		}
	}
}

func TestOnTickSeesEveryResult(t *testing.T) {
	t.Parallel()
	var got []TickResult
	h := newHarness(t, func(c *Config) { c.OnTick = func(r TickResult) { got = append(got, r) } })
	h.claim("card", marker(309), self(t))
	r1 := h.loop.RunOnce(h.ctx)
	r2 := h.loop.RunOnce(h.ctx)
	if len(got) != 2 || !reflect.DeepEqual(got[0], r1) || !reflect.DeepEqual(got[1], r2) {
		t.Errorf("OnTick saw %+v, want %+v and %+v", got, r1, r2)
	}
}

// A renewal the store could not confirm is retried soon, not a whole
// interval later: a store that is back within the claim's remaining trust
// (a plugin restarted, a database failed over) keeps the claim.
func TestUnconfirmedRenewalIsRetriedSoon(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	confirmed := h.clock.Now()
	h.claim("card", marker(600), self(t))
	h.spy.setFault(func(context.Context, []board.Hold, time.Duration) ([]board.RenewResult, error) {
		return nil, errUnreachable
	})
	h.clock.Set(confirmed.Add(testLease / 3))
	res := h.loop.RunOnce(h.ctx)
	if res.Unconfirmed != 1 || res.Next != RetryDelay(testLease) {
		t.Fatalf("failed tick: unconfirmed %d, next %s; want 1 and the retry delay %s", res.Unconfirmed, res.Next, RetryDelay(testLease))
	}
	// The store is back before the next interval: the retry renews.
	h.spy.setFault(nil)
	h.clock.Advance(res.Next)
	res = h.loop.RunOnce(h.ctx)
	if res.Renewed != 1 || res.Unconfirmed != 0 || res.Next != testLease/3 {
		t.Errorf("retry: renewed %d, unconfirmed %d, next %s; want 1, 0, back to lease/3", res.Renewed, res.Unconfirmed, res.Next)
	}
	if got := RetryDelay(4 * time.Second); got != 100*time.Millisecond {
		t.Errorf("RetryDelay(4s) = %s, want 100ms", got)
	}
}

// The mark of a silent owner's claim (DESIGN.md#keepalive) is one more
// store write in the tick. A slow one must not hold up the renewal of the
// claims whose owners still ping: they would pass their trusted deadlines
// unrenewed and be lost for a write about someone else's claim. So the
// renewal goes first, and the mark, bounded, after it.
func TestASlowMarkDoesNotCostTheLiveClaimsTheirRenewal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.Mode = func() Mode { return ModeKeepalive } })
	h.claim("pinged", marker(310), Owner{KeepaliveID: "client-1"})
	h.claim("silent", marker(311), Owner{KeepaliveID: "client-2"})
	step := testLease / 3
	for tick := 1; tick <= 2; tick++ {
		h.clock.Advance(step)
		h.loop.Ping("client-1")
		if res := h.loop.RunOnce(h.ctx); res.Renewed != 2 || len(res.Lost) != 0 {
			t.Fatalf("tick %d: %+v, want both renewed", tick, res)
		}
	}
	h.clock.Advance(step)
	h.loop.Ping("client-1")
	var deadline time.Time
	for _, c := range h.loop.Held() {
		if c.Hold.Card == "pinged" {
			deadline = c.TrustedUntil
		}
	}
	// The mark takes until past the pinged claim's trusted deadline (a
	// store busy with a long write, a database failing over).
	h.spy.mu.Lock()
	h.spy.disownFault = func(context.Context) { h.clock.Set(deadline.Add(time.Second)) }
	h.spy.mu.Unlock()
	res := h.loop.RunOnce(h.ctx)
	if len(res.Lost) != 1 || res.Lost[0].Card != "silent" || res.Lost[0].Reason != LostKeepaliveMissed {
		t.Errorf("tick 3 lost %+v, want only silent, keepalive-missed", res.Lost)
	}
	if c := h.card("silent"); !c.Disowned() {
		t.Errorf("the silent claim was not marked (disowned_epoch %d, epoch %d)", c.DisownedEpoch, c.ClaimEpoch)
	}
	held := false
	for _, c := range h.loop.Held() {
		if c.Hold.Card == "pinged" {
			held = true
			if !c.TrustedUntil.After(h.clock.Now()) {
				t.Errorf("the pinged claim is trusted until %v, not past now %v: the slow mark held up its renewal", c.TrustedUntil, h.clock.Now())
			}
		}
	}
	if !held {
		t.Errorf("the pinged claim is no longer held after the slow mark (tick: %+v)", res)
	}
	h.spy.mu.Lock()
	bounded := append([]bool(nil), h.spy.disownBounded...)
	h.spy.mu.Unlock()
	if len(bounded) != 1 || !bounded[0] {
		t.Errorf("mark calls bounded: %v, want one, with a deadline", bounded)
	}
}
