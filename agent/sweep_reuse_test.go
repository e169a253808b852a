package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/pidreuse"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// TestBootSweepDoesNotAdoptAReusedPID: a worker's claim outlives the
// worker (killed while no agent ran), and a new process lands on its pid,
// within and beyond a second of the dead worker's start. The sweep must
// expire the claim, never adopt it for the newcomer.
func TestBootSweepDoesNotAdoptAReusedPID(t *testing.T) {
	if !pidreuse.Enter(t) {
		return
	}
	ctx := context.Background()
	host, err := pidprobe.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	prober := pidprobe.New()
	const lease = 30 * time.Second
	for _, tc := range pidreuse.Cases {
		store, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		if _, err := store.CreateCard(ctx, board.CreateCardParams{ID: "c"}); err != nil {
			t.Fatal(err)
		}
		// What the socket records for a worker's claim and run.
		pid, deadStart := pidreuse.Dead(t, nil, func(pid int) {
			marker := board.WorkerMarker(host, pid)
			card, err := store.Claim(ctx, board.ClaimParams{Card: "c", Marker: marker, Lease: lease})
			tok := card.Token()
			if err != nil {
				t.Fatal(err)
			}
			id, err := prober.Identify(ctx, pid)
			if err != nil {
				t.Fatal(err)
			}
			r, err := store.CreateRun(ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "r", Card: "c", Status: board.RunRunning,
				Host: host, PID: pid, PIDStart: id.StartMillis, PIDStartTicks: id.StartTicks, BootID: id.BootID}})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: "c", Token: tok, RunID: r.ID}); err != nil {
				t.Fatal(err)
			}
		})
		pidreuse.WaitPastTicks(t, deadStart+tc.Ticks-1)
		pidreuse.StartOnPID(t, pid, exec.Command("sleep", "600"))
		what := pidreuse.Describe(pid, deadStart, pidreuse.StartTicks(t, pid))

		items, adopted, err := BootSweep(ctx, SweepConfig{Store: store, Prober: prober, Host: host, SelfPID: os.Getpid(), Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		if len(adopted) != 0 {
			t.Errorf("%s: the sweep adopted %+v for %s", tc.Name, adopted, what)
		}
		if len(items) != 1 || items[0].Action != SweepExpired {
			t.Errorf("%s: sweep items %+v for %s, want the claim expired", tc.Name, items, what)
		}
	}
}
