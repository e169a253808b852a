package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	"github.com/leasekeeper/leasekeeper/socketapi"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// livePID starts a real process that lives until the test ends.
func livePID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// sweepStore opens a bbolt store on a manual clock at now, closed when the
// test ends, and returns it with this host's name, as the boot sweep's
// tests all begin.
func sweepStore(t *testing.T) (string, *boardtest.ManualClock, *boltstore.Store) {
	t.Helper()
	host, err := pidprobe.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	clock := boardtest.NewManualClock(time.Now())
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return host, clock, store
}

// deadPID returns the pid of a real process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// unleased is the store as a foreign writer may leave it on the fleet twin:
// one card's claim stripped of its lease (a legacy claim). Everything else,
// including the writes the sweep makes, goes to the real store.
type unleased struct {
	board.Store
	card string
}

func (u unleased) ListCards(ctx context.Context, f board.ListCardsParams) ([]board.Card, error) {
	cards, err := u.Store.ListCards(ctx, f)
	for i := range cards {
		if cards[i].ID == u.card {
			cards[i].ClaimLeaseUntil = time.Time{}
		}
	}
	return cards, err
}

func TestBootSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	host, err := pidprobe.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	prober := pidprobe.New()
	const lease = 30 * time.Second

	live, dead, reused := livePID(t), deadPID(t), livePID(t)
	liveID, err := prober.Identify(ctx, live)
	if err != nil {
		t.Fatal(err)
	}
	reusedID, err := prober.Identify(ctx, reused)
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()

	type setup struct {
		card   string
		marker string
		run    *board.Run // recorded run, if any
	}
	setups := []setup{
		{card: "live", marker: board.WorkerMarker(host, live), run: &board.Run{PID: live,
			PIDStart: liveID.StartMillis, PIDStartTicks: liveID.StartTicks, BootID: liveID.BootID}},
		{card: "dead", marker: board.WorkerMarker(host, dead)},
		{card: "legacy-dead", marker: board.WorkerMarker(host, dead)},
		// A live pid whose recorded start is one clock tick off: the pid
		// was reused by another process, so the claim's owner is gone.
		{card: "reused", marker: board.WorkerMarker(host, reused), run: &board.Run{PID: reused,
			PIDStart: reusedID.StartMillis, PIDStartTicks: reusedID.StartTicks - 1, BootID: reusedID.BootID}},
		// The same told by a run an older agent recorded: only the inexact
		// pid_start, here an hour off.
		{card: "legacy-reused", marker: board.WorkerMarker(host, reused), run: &board.Run{PID: reused, PIDStart: reusedID.StartMillis - 3_600_000}},
		{card: "recovery-dead", marker: board.RecoveryMarker(board.WorkerMarker(host, dead))},
		{card: "self-pid", marker: board.WorkerMarker(host, self)},
		{card: "other-host", marker: board.WorkerMarker("elsewhere.example", dead)},
		{card: "foreign-ns", marker: board.WorkerMarker(host+"~pidns", 4242)},
	}
	before := map[string]board.Card{}
	for _, s := range setups {
		if _, err := store.CreateCard(ctx, board.CreateCardParams{ID: s.card}); err != nil {
			t.Fatal(err)
		}
		card, err := store.Claim(ctx, board.ClaimParams{Card: s.card, Marker: s.marker, Lease: lease})
		tok := card.Token()
		if err != nil {
			t.Fatalf("claim %s as %s: %v", s.card, s.marker, err)
		}
		if s.run != nil {
			r := *s.run
			r.ID, r.Card, r.Status, r.Owner, r.Epoch, r.Host = "run-"+s.card, s.card, board.RunRunning, s.marker, tok.Epoch, host
			if _, err := store.CreateRun(ctx, board.CreateRunParams{Token: tok, Run: r}); err != nil {
				t.Fatal(err)
			}
			if err := store.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: s.card, Token: tok, RunID: r.ID}); err != nil {
				t.Fatal(err)
			}
		}
		c, err := store.GetCard(ctx, board.GetCardParams{ID: s.card})
		if err != nil {
			t.Fatal(err)
		}
		before[s.card] = c
	}

	cases := []struct {
		name      string
		keepalive bool
		want      map[string]SweepAction // cards absent here must not be touched
	}{
		{
			name: "pid mode",
			want: map[string]SweepAction{
				"live": SweepAdopted, "dead": SweepExpired, "legacy-dead": SweepReleased,
				"reused": SweepExpired, "legacy-reused": SweepExpired, "recovery-dead": SweepExpired, "self-pid": SweepExpired,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			items, adopted, err := BootSweep(ctx, SweepConfig{
				Store:     unleased{Store: store, card: "legacy-dead"},
				Prober:    prober,
				Host:      host,
				SelfPID:   self,
				Lease:     lease,
				Keepalive: tc.keepalive,
				Actor:     board.WorkerMarker(host, self),
			})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]SweepAction{}
			for _, it := range items {
				got[it.Card] = it.Action
			}
			for card, want := range tc.want {
				if got[card] != want {
					t.Errorf("card %s: action %q, want %q", card, got[card], want)
				}
			}
			for card, action := range got {
				if _, ok := tc.want[card]; !ok {
					t.Errorf("card %s: action %q, want it untouched", card, action)
				}
			}

			now := time.Now()
			for card, action := range tc.want {
				c, err := store.GetCard(ctx, board.GetCardParams{ID: card})
				if err != nil {
					t.Fatal(err)
				}
				switch action {
				case SweepExpired:
					if !c.LeaseExpired(now) || c.Token() != before[card].Token() {
						t.Errorf("card %s after expiry: claim %s@%d lease %v, want the same claim with an expired lease",
							card, c.Claim, c.ClaimEpoch, c.ClaimLeaseUntil)
					}
				case SweepReleased:
					if c.Claimed() {
						t.Errorf("card %s still claimed by %s after the release", card, c.Claim)
					}
				case SweepAdopted:
					if c.Token() != before[card].Token() || !c.ClaimLeaseUntil.After(before[card].ClaimLeaseUntil) {
						t.Errorf("card %s after adoption: %s@%d lease %v, want the same claim renewed past %v",
							card, c.Claim, c.ClaimEpoch, c.ClaimLeaseUntil, before[card].ClaimLeaseUntil)
					}
				}
			}
			for _, card := range []string{"other-host", "foreign-ns"} {
				c, err := store.GetCard(ctx, board.GetCardParams{ID: card})
				if err != nil {
					t.Fatal(err)
				}
				if c.Token() != before[card].Token() || !c.ClaimLeaseUntil.Equal(before[card].ClaimLeaseUntil) {
					t.Errorf("card %s was touched: %+v", card, c)
				}
			}

			if len(adopted) != 1 {
				t.Fatalf("adopted %d claims, want 1: %+v", len(adopted), adopted)
			}
			ad := adopted[0]
			if got, want := ad.Hold.Card, "live"; got != want {
				t.Errorf("adopted card %q, want %q", got, want)
			}
			// The owner must match what the socket will read for the same
			// process, or the worker's next owned write would be refused.
			if ad.Owner.PID != live || pidprobe.Compare(liveID, ad.Owner.Start) != pidprobe.MatchSame || !ad.Owner.Start.Exact() ||
				ad.Owner.KeepaliveID != before["live"].Claim {
				t.Errorf("adopted owner = %+v, want pid %d identity %+v key %q", ad.Owner, live, liveID, before["live"].Claim)
			}
		})
	}
}

func TestBootSweepKeepaliveAdoptsSelfDeclaredWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	host, err := pidprobe.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	marker := board.WorkerMarker(host+"~pidns", 4242)
	if _, err := store.CreateCard(ctx, board.CreateCardParams{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Claim(ctx, board.ClaimParams{Card: "c", Marker: marker, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	items, adopted, err := BootSweep(ctx, SweepConfig{
		Store: store, Prober: pidprobe.New(), Host: host, SelfPID: os.Getpid(), Lease: time.Minute, Keepalive: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 || items[0].Action != SweepAdopted {
		t.Fatalf("items = %+v, want c adopted", items)
	}
	// Its pid names nothing in this namespace: only its pings count.
	if got := adopted[0].Owner; got.PID != 0 || got.KeepaliveID != marker {
		t.Errorf("owner = %+v, want no pid and keepalive key %q", got, marker)
	}
}

// TestBootSweepDoesNotReviveAClaimWhoseDeadlineHasPassed: after an agent
// outage longer than the lease, a live worker's claim is over — its client
// cancelled it by itself at its trusted deadline — so the sweep disowns it
// instead of adopting it, in either liveness mode. A claim whose lease ends
// within the heartbeat margin may be over too. A disowned claim's lease is
// left exactly as stored, never moved: its holder may trust it until that
// lease less a margin. A claim with time left is still adopted.
func TestBootSweepDoesNotReviveAClaimWhoseDeadlineHasPassed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	host, clock, store := sweepStore(t)
	const lease = 30 * time.Second
	margin := heartbeat.DefaultMargin(lease)
	live := livePID(t)

	claim := func(card, marker string) board.Card {
		t.Helper()
		if _, err := store.CreateCard(ctx, board.CreateCardParams{ID: card}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Claim(ctx, board.ClaimParams{Card: card, Marker: marker, Lease: lease}); err != nil {
			t.Fatal(err)
		}
		c, err := store.GetCard(ctx, board.GetCardParams{ID: card})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Claimed an hour before the sweep: the lease ended long ago.
	before := map[string]board.Card{
		"over":           claim("over", board.WorkerMarker(host, live)),
		"over-keepalive": claim("over-keepalive", board.WorkerMarker(host+"~pidns", 4242)),
	}
	clock.Advance(time.Hour - lease + margin/2)
	// Ends within the margin: every holder's trusted deadline has passed.
	before["ending"] = claim("ending", board.WorkerMarker(host, live))
	clock.Advance(lease - margin/2 - time.Second)
	// Claimed a second ago: its holder still trusts it.
	before["fresh"] = claim("fresh", board.WorkerMarker(host, live))
	clock.Advance(time.Second)

	items, adopted, err := BootSweep(ctx, SweepConfig{
		Store: store, Prober: pidprobe.New(), Clock: clock, Host: host,
		SelfPID: os.Getpid(), Lease: lease, Keepalive: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]SweepAction{"over": SweepDisowned, "over-keepalive": SweepDisowned, "ending": SweepDisowned, "fresh": SweepAdopted}
	got := map[string]SweepAction{}
	for _, it := range items {
		got[it.Card] = it.Action
		// A disowned claim is one the agent does not vouch for: the
		// caller hands it to the heartbeat's Disown, so its worker's
		// re-claim is a fresh one.
		if wantLost := map[SweepAction]heartbeat.LostReason{SweepDisowned: heartbeat.LostUnconfirmed}[it.Action]; it.Lost != wantLost {
			t.Errorf("card %s (%s): Lost = %q, want %q", it.Card, it.Action, it.Lost, wantLost)
		}
	}
	for card, w := range want {
		if got[card] != w {
			t.Errorf("card %s: action %q, want %q (items %+v)", card, got[card], w, items)
		}
	}
	if len(adopted) != 1 || adopted[0].Hold.Card != "fresh" {
		t.Errorf("adopted %+v, want only the claim with time left", adopted)
	}
	for card, w := range want {
		c, err := store.GetCard(ctx, board.GetCardParams{ID: card})
		if err != nil {
			t.Fatal(err)
		}
		if c.Token() != before[card].Token() {
			t.Errorf("card %s: token %+v, want %+v untouched", card, c.Token(), before[card].Token())
		}
		switch w {
		case SweepDisowned:
			// Neither renewed nor moved earlier: the lease runs its course.
			if !c.ClaimLeaseUntil.Equal(before[card].ClaimLeaseUntil) {
				t.Errorf("card %s: lease %v, want it left at %v", card, c.ClaimLeaseUntil, before[card].ClaimLeaseUntil)
			}
		case SweepAdopted:
			if !c.ClaimLeaseUntil.After(before[card].ClaimLeaseUntil) {
				t.Errorf("card %s: lease %v, want renewed past %v", card, c.ClaimLeaseUntil, before[card].ClaimLeaseUntil)
			}
		}
	}
}

// TestAgentBootDoesNotRenewAnEndedClaim: the real agent, started on a store
// where a live worker's lease ended an hour ago (an outage longer than the
// lease), expires that claim and never hands it to the heartbeat: the
// worker's client gave it up at its trusted deadline, so renewing it would
// keep the card held, for as long as the pid lives, by a process that no
// longer thinks it holds it.
func TestAgentBootDoesNotRenewAnEndedClaim(t *testing.T) {
	t.Parallel()
	host, err := pidprobe.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	live := livePID(t)
	marker := board.WorkerMarker(host, live)
	var claimed board.Card
	r := startRun(t, runOpts{
		// The gate off: the reaper's first pass, at start, would
		// otherwise decide the expired claim this test reads back.
		yaml:      "reaper: {enabled: false}\n",
		seedClock: boardtest.NewManualClock(time.Now().Add(-time.Hour)),
		seed: func(t *testing.T, s *boltstore.Store) {
			ctx := context.Background()
			if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "gave-up"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Claim(ctx, board.ClaimParams{Card: "gave-up", Marker: marker, Lease: 30 * time.Second}); err != nil {
				t.Fatal(err)
			}
			if claimed, err = s.GetCard(ctx, board.GetCardParams{ID: "gave-up"}); err != nil {
				t.Fatal(err)
			}
		},
	})
	// The sweep ran before the agent declared itself ready, so what the
	// heartbeat holds now is everything it will ever renew.
	if st := r.status(t); len(st.Claims) != 0 {
		t.Errorf("heartbeat holds %+v after boot, want nothing: the only claim's lease ended an hour ago", st.Claims)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := r.client().GetCard(ctx, "gave-up")
	if err != nil {
		t.Fatal(err)
	}
	if c.Token() != claimed.Token() || c.ClaimLeaseUntil.After(claimed.ClaimLeaseUntil) {
		t.Errorf("card after boot: %s@%d lease %v; want %s@%d with its lease left at %v (expired, not renewed)",
			c.Claim, c.ClaimEpoch, c.ClaimLeaseUntil, claimed.Claim, claimed.ClaimEpoch, claimed.ClaimLeaseUntil)
	}
	if !strings.Contains(r.logs.String(), "action=disowned") {
		t.Errorf("agent log does not report the claim disowned by the boot sweep:\n%s", r.logs.String())
	}
}

// TestAgentReclaimAfterBootSweepIsFresh: a claim the boot sweep buried
// instead of adopting is not handed back by the next claim of the same
// marker: the worker gets the card at a higher epoch. The marker here names
// the test process, which is also the agent's (the agent runs in it), so
// the sweep buries it as an earlier incarnation's; the claim through the
// socket then comes from that very marker.
func TestAgentReclaimAfterBootSweepIsFresh(t *testing.T) {
	t.Parallel()
	host, err := pidprobe.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	var old board.ClaimToken
	r := startRun(t, runOpts{
		// The gate off: the reaper's first pass, at start, would
		// otherwise take the expired claim over while this test claims.
		yaml:      "reaper: {enabled: false}\n",
		seedClock: boardtest.NewManualClock(time.Now().Add(-time.Hour)),
		seed: func(t *testing.T, s *boltstore.Store) {
			ctx := context.Background()
			if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "again"}); err != nil {
				t.Fatal(err)
			}
			c, err := s.Claim(ctx, board.ClaimParams{Card: "again", Marker: board.WorkerMarker(host, os.Getpid()), Lease: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			old = c.Token()
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := r.client().Claim(ctx, "again")
	if err != nil {
		t.Fatalf("claim after the boot sweep: %v", err)
	}
	if cl.Token().Marker != old.Marker || cl.Token().Epoch <= old.Epoch {
		t.Errorf("claim after the boot sweep got %+v, want %s at an epoch above the expired %d", cl.Token(), old.Marker, old.Epoch)
	}
	if err := cl.Context().Err(); err != nil {
		t.Errorf("claim ended at once: %v", context.Cause(cl.Context()))
	}
	if err := cl.Release(ctx); err != nil {
		t.Error(err)
	}
}

// filterRecorder records the filters ListCards is asked for.
type filterRecorder struct {
	board.Store
	filters []board.ListCardsParams
}

func (r *filterRecorder) ListCards(ctx context.Context, f board.ListCardsParams) ([]board.Card, error) {
	r.filters = append(r.filters, f)
	return r.Store.ListCards(ctx, f)
}

// TestBootSweepReadsOnlyThisHostsClaims: the sweep asks the store for the
// claims of its own host (and, in keepalive mode, of the workers it vouches
// for in another pid namespace), not the whole fleet's (DESIGN.md#boot-sweep).
func TestBootSweepReadsOnlyThisHostsClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	for _, keepalive := range []bool{false, true} {
		rec := &filterRecorder{Store: store}
		if _, _, err := BootSweep(ctx, SweepConfig{
			Store: rec, Prober: pidprobe.New(), Host: "hosta", SelfPID: os.Getpid(), Lease: time.Minute, Keepalive: keepalive,
		}); err != nil {
			t.Fatal(err)
		}
		want := []string{"hosta"}
		if keepalive {
			want = append(want, "hosta"+socketapi.ForeignHostSuffix)
		}
		if len(rec.filters) != 1 || !slices.Equal(rec.filters[0].ClaimHosts, want) || !rec.filters[0].ClaimedOnly {
			t.Errorf("keepalive %v: the sweep listed %+v, want one listing of the claims of %q", keepalive, rec.filters, want)
		}
	}
}
