package plugins

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/storespec"
)

// A plugin built before routing by labels speaks protocol 4 at most and
// drops the labels of a ClaimNext or a Start it cannot read: it would hand
// a worker that asked for "gpu" the oldest card of all. The agent never
// sends it a routed pick: the call is refused before it is sent, naming
// the fix, and no card is claimed (DESIGN.md#label-routing).
func TestAPluginFromBeforeLabelRoutingIsNotSentARoutedPick(t *testing.T) {
	t.Parallel()
	ctx, p := launchOlderPlugin(t, "before-labels")
	for _, nc := range []board.CreateCardParams{
		{ID: "plain", State: board.StateReady, Actor: "cli"},
		{ID: "gpu", State: board.StateReady, Labels: []string{"gpu"}, Actor: "cli"},
	} {
		if _, err := p.CreateCard(ctx, nc); err != nil {
			t.Fatal(err)
		}
	}
	c, err := p.ClaimNext(ctx, board.ClaimNextParams{Marker: "hosta-4242", Lease: 30 * time.Second, Labels: []string{"gpu"}})
	if err == nil {
		t.Errorf("ClaimNext [gpu] through a plugin from before label routing took %q, want a refusal", c.ID)
	} else if !errors.Is(err, board.ErrInvalidArgument) || !strings.Contains(err.Error(), "rebuild") {
		t.Errorf("ClaimNext [gpu] through a plugin from before label routing = %v, want ErrInvalidArgument naming the rebuild", err)
	}
	st, err := p.Start(ctx, board.StartParams{Next: true, Labels: []string{"gpu"}, Marker: "hosta-4242", Lease: 30 * time.Second,
		Run: board.Run{ID: "r1", Host: "hosta", PID: 4242}})
	if err == nil {
		t.Errorf("Start next [gpu] through a plugin from before label routing started %q, want a refusal", st.Card.ID)
	} else if !errors.Is(err, board.ErrInvalidArgument) {
		t.Errorf("Start next [gpu] through a plugin from before label routing = %v, want ErrInvalidArgument", err)
	}
	for _, id := range []string{"plain", "gpu"} {
		c, err := p.GetCard(ctx, board.GetCardParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if c.Claimed() {
			t.Errorf("%s was claimed by %q through a plugin that cannot route", id, c.Claim)
		}
	}
	// An unrouted pick still works with it.
	if c, err := p.ClaimNext(ctx, board.ClaimNextParams{Marker: "hosta-4242", Lease: 30 * time.Second}); err != nil || c.ID != "plain" {
		t.Errorf("unrouted ClaimNext = %q, %v; want plain", c.ID, err)
	}
}

// A plugin built before the retention verbs speaks protocol 5 at most and
// would answer Prune and DeleteCard Unimplemented at best. The agent never
// sends them: each is refused before it is sent, naming the rebuild, and
// nothing is deleted (DESIGN.md#retention).
func TestAPluginFromBeforeRetentionIsNotSentAPrune(t *testing.T) {
	t.Parallel()
	ctx, p := launchOlderPlugin(t, "before-retention")
	if _, err := p.CreateCard(ctx, board.CreateCardParams{ID: "old", State: board.StateDone, Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	_, err := p.Prune(ctx, board.PruneParams{Before: time.Now().Add(time.Hour)})
	if !errors.Is(err, board.ErrInvalidArgument) || !strings.Contains(err.Error(), "rebuild") || !strings.Contains(err.Error(), "protocol 5") {
		t.Errorf("Prune through a plugin from before retention = %v, want ErrInvalidArgument naming protocol 5 and the rebuild", err)
	}
	_, err = p.DeleteCard(ctx, board.DeleteCardParams{ID: "old", Actor: "uid:0"})
	if !errors.Is(err, board.ErrInvalidArgument) || !strings.Contains(err.Error(), "rebuild") {
		t.Errorf("DeleteCard through a plugin from before retention = %v, want ErrInvalidArgument naming the rebuild", err)
	}
	if _, err := p.GetCard(ctx, board.GetCardParams{ID: "old"}); err != nil {
		t.Errorf("the card is gone after a refused DeleteCard: %v", err)
	}
	evs, err := p.Events(ctx, board.EventsParams{After: 0, Limit: 10})
	if err != nil || len(evs) != 1 {
		t.Errorf("events after refused retention verbs = %v, %v; want the one card_created", evs, err)
	}
}

// TestAPluginFromBeforeRetriesIsNotSentARetryPolicy: a plugin that speaks
// protocol 5, from before the retry policy (DESIGN.md#retries), would store
// a card without its own policy, file a retryable failure as a plain one and
// drop a retry's backoff. The agent refuses to send it any of them, naming
// the rebuild, and sends nothing; the verbs without them still work.
func TestAPluginFromBeforeRetriesIsNotSentARetryPolicy(t *testing.T) {
	t.Parallel()
	ctx, p := launchOlderPlugin(t, "before-retries")
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, board.ErrInvalidArgument) || !strings.Contains(err.Error(), "rebuild") {
			t.Errorf("%s through a plugin from before the retry policy = %v, want ErrInvalidArgument naming the rebuild", what, err)
		}
	}
	_, err := p.CreateCard(ctx, board.CreateCardParams{ID: "own", Retry: &board.RetryPolicy{MaxAttempts: 2}, Actor: "cli"})
	refused("CreateCard with a retry policy", err)
	if _, err := p.GetCard(ctx, board.GetCardParams{ID: "own"}); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("GetCard own = %v: the refused create wrote the card", err)
	}
	if _, err := p.CreateCard(ctx, board.CreateCardParams{ID: "c1", Actor: "cli"}); err != nil {
		t.Fatalf("CreateCard without a policy: %v", err)
	}
	st, err := p.Start(ctx, board.StartParams{Card: "c1", Marker: "hosta-4242", Lease: 30 * time.Second, Run: board.Run{ID: "r1", Host: "hosta", PID: 4242}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	_, err = p.Finish(ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1", Status: board.RunFailed, FailureCode: "SIGNAL_9", Retryable: true})
	refused("a retryable Finish", err)
	_, err = p.SetStateOwned(ctx, board.SetStateOwnedParams{Card: "c1", Token: st.Token, To: board.StateReady, Retry: true})
	refused("a retry's move", err)
	if c, err := p.GetCard(ctx, board.GetCardParams{ID: "c1"}); err != nil || c.State != board.StateInProgress || c.Token() != st.Token {
		t.Errorf("c1 = %+v, %v: a refused write landed", c, err)
	}
	if _, err := p.Finish(ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1", Status: board.RunFailed, FailureCode: "EXIT_1"}); err != nil {
		t.Errorf("a plain Finish: %v", err)
	}
}

// TestAPluginFromBeforeRetriesCountsRunsAsAttempts: a plugin from before
// the retry policy keeps no attempts counter, so its cards always read 0
// attempts — and the run ceiling, now the retry policy's max_attempts
// (DESIGN.md#retries), would never be reached on it: a fleet card whose
// resumable runs keep failing would be returned to the pool for ever.
// Such a plugin cannot reopen a card's attempts either, so the agent reads
// a card's runs as its attempts, the count the ceiling had before.
func TestAPluginFromBeforeRetriesCountsRunsAsAttempts(t *testing.T) {
	t.Parallel()
	ctx, p := launchOlderPlugin(t, "before-retries")
	if _, err := p.CreateCard(ctx, board.CreateCardParams{ID: "c1", Actor: "cli"}); err != nil {
		t.Fatalf("CreateCard: %v", err)
	}
	for i := range 3 {
		st, err := p.Start(ctx, board.StartParams{Card: "c1", Marker: "hosta-4242", Lease: 30 * time.Second, Fresh: true,
			Run: board.Run{ID: fmt.Sprintf("r%d", i), Host: "hosta", PID: 4242}})
		if err != nil {
			t.Fatalf("Start %d: %v", i, err)
		}
		if _, err := p.Finish(ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: st.Run.ID, Status: board.RunFailedResumable}); err != nil {
			t.Fatalf("Finish %d: %v", i, err)
		}
	}
	c, err := p.GetCard(ctx, board.GetCardParams{ID: "c1"})
	if err != nil {
		t.Fatalf("GetCard: %v", err)
	}
	if len(c.Runs) != 3 || c.Attempts != 3 {
		t.Errorf("c1 through a plugin from before retries: %d runs, %d attempts; want 3 and 3 (its runs are its attempts)", len(c.Runs), c.Attempts)
	}
}

// launchOlderPlugin launches the test plugin as a build from before a
// protocol revision (mode names which) over a fresh bbolt file, for a
// minute at most; it is closed when the test ends.
func launchOlderPlugin(t *testing.T, mode string) (context.Context, *Proxy) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	p, err := Launch(ctx, LaunchConfig{
		Cmd:   testPluginCmd(t, mode),
		Child: &storespec.Spec{Backend: "bolt", Path: filepath.Join(t.TempDir(), "board.db"), Board: board.DefaultBoard(true), Lease: 30 * time.Second},
	})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return ctx, p
}
