package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
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

func (u unleased) ListCards(ctx context.Context, f board.CardFilter) ([]board.Card, error) {
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
	liveStart, err := prober.StartTime(ctx, live)
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
		{card: "live", marker: board.WorkerMarker(host, live), run: &board.Run{PID: live, PIDStart: liveStart}},
		{card: "dead", marker: board.WorkerMarker(host, dead)},
		{card: "legacy-dead", marker: board.WorkerMarker(host, dead)},
		// A live pid whose recorded start time is an hour off: the pid was
		// reused by another process, so the claim's owner is gone.
		{card: "reused", marker: board.WorkerMarker(host, reused), run: &board.Run{PID: reused, PIDStart: liveStart - 3_600_000}},
		{card: "recovery-dead", marker: board.RecoveryMarker(board.WorkerMarker(host, dead))},
		{card: "self-pid", marker: board.WorkerMarker(host, self)},
		{card: "other-host", marker: board.WorkerMarker("elsewhere.example", dead)},
		{card: "foreign-ns", marker: board.WorkerMarker(host+"~pidns", 4242)},
	}
	before := map[string]board.Card{}
	for _, s := range setups {
		if _, err := store.CreateCard(ctx, board.NewCard{ID: s.card}); err != nil {
			t.Fatal(err)
		}
		tok, err := store.Claim(ctx, board.ClaimRequest{Card: s.card, Marker: s.marker, Lease: lease})
		if err != nil {
			t.Fatalf("claim %s as %s: %v", s.card, s.marker, err)
		}
		if s.run != nil {
			r := *s.run
			r.ID, r.Card, r.Status, r.Owner, r.Epoch, r.Host = "run-"+s.card, s.card, board.RunRunning, s.marker, tok.Epoch, host
			if _, err := store.CreateRun(ctx, r); err != nil {
				t.Fatal(err)
			}
			if err := store.SetLastRunOwned(ctx, s.card, tok, r.ID); err != nil {
				t.Fatal(err)
			}
		}
		c, err := store.GetCard(ctx, s.card)
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
				"reused": SweepExpired, "recovery-dead": SweepExpired, "self-pid": SweepExpired,
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
				c, err := store.GetCard(ctx, card)
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
				c, err := store.GetCard(ctx, card)
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
			if ad.Owner.PID != live || ad.Owner.StartMillis != liveStart || ad.Owner.KeepaliveID != before["live"].Claim {
				t.Errorf("adopted owner = %+v, want pid %d start %d key %q", ad.Owner, live, liveStart, before["live"].Claim)
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
	if _, err := store.CreateCard(ctx, board.NewCard{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Claim(ctx, board.ClaimRequest{Card: "c", Marker: marker, Lease: time.Minute}); err != nil {
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
