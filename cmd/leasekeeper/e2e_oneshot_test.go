package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
)

// watchHints opens a watch stream on the agent's socket and returns its
// launch frames as they come, once the agent has said hello.
func (e *env) watchHints() <-chan apitype.Frame {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	frames := make(chan apitype.Frame, 16)
	hello := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := &client.Client{Socket: e.Socket}
		_ = c.Watch(ctx, -1, func(f apitype.Frame) error {
			switch f.Type {
			case apitype.FrameHello:
				select {
				case hello <- struct{}{}:
				default:
				}
			case apitype.FrameLaunch:
				frames <- f
			}
			return nil
		})
	}()
	e.t.Cleanup(func() { cancel(); <-done })
	select {
	case <-hello:
	case <-time.After(10 * time.Second):
		e.t.Fatal("no hello on the watch stream")
	}
	return frames
}

func nextHint(t *testing.T, frames <-chan apitype.Frame) apitype.Frame {
	t.Helper()
	select {
	case f := <-frames:
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no launch hint")
		return apitype.Frame{}
	}
}

// TestE2EOneShotOnAWaitingCardFiresAtItsPromotion: a card created with a
// one-shot label into waiting_deps (its blocker not complete) is not
// hinted and keeps the label while it waits; when the blocker completes
// and promotes it into ready, it is hinted once and the label consumed.
func TestE2EOneShotOnAWaitingCardFiresAtItsPromotion(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"bolt", "mongo"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "lease: 3s\n")
			if backend == "mongo" {
				cfg := fmt.Sprintf("lease: 3s\nsocket: %s\nstore: {backend: mongo, uri: %q, database: %s}\n",
					e.Socket, mongotest.URI(t), mongotest.Database(t))
				if err := os.WriteFile(e.Config, []byte(cfg), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			e.Start()
			oneShotWaitsForPromotion(t, e)
		})
	}
}

func oneShotWaitsForPromotion(t *testing.T, e *env) {
	e.MustRun("card", "create", "blocker", "--state", "in_progress")
	frames := e.watchHints()

	e.MustRun("card", "create", "dep", "--depends-on", "blocker", "--label", "once:go", "--label", "keep")
	if c := e.Card("dep"); c.State != board.StateWaitingDeps {
		t.Fatalf("dep created in %q, want waiting_deps", c.State)
	}
	// A sentinel moved into ready after dep's creation: the effects layer
	// reads the log in order, so a hint the creation fired comes first —
	// or, for a one-shot on a fleet, whose hint waits until its consumption
	// is read back from the log, instead of one of the hints awaited below.
	e.MustRun("card", "create", "sentinel", "--state", "backlog")
	e.MustRun("card", "move", "sentinel", "ready")
	if f := nextHint(t, frames); f.Card != "sentinel" {
		t.Errorf("first hint = %+v, want the sentinel's: the waiting card was hinted", f)
		nextHint(t, frames)
	}
	if c := e.Card("dep"); !slices.Contains(c.Labels, "once:go") {
		t.Errorf("dep labels = %v while it waits: the one-shot was consumed without a launch", c.Labels)
	}

	e.MustRun("card", "move", "blocker", "done")
	if f := nextHint(t, frames); f.Card != "dep" || f.State != board.StateReady {
		t.Errorf("hint = %+v, want dep entering ready", f)
	}
	e.WaitFor(5*time.Second, "the one-shot to be consumed", func() bool {
		return !slices.Contains(e.Card("dep").Labels, "once:go")
	})
	if got := e.Card("dep").Labels; !slices.Equal(got, []string{"keep"}) {
		t.Errorf("dep labels = %v, want [keep]", got)
	}
	e.MustRun("card", "create", "sentinel2", "--state", "backlog")
	e.MustRun("card", "move", "sentinel2", "ready")
	if f := nextHint(t, frames); f.Card != "sentinel2" {
		t.Errorf("hint = %+v, want the second sentinel's: the one-shot fired twice", f)
	}
}
