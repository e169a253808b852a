package plugins

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/lease"
	"github.com/leasekeeper/leasekeeper/storespec"
)

// The store plugin is killed after a Start commits and before it answers
// (DESIGN.md#outcome-unknown). The worker sees an unknown outcome, nothing
// is tracked for it, and its retry with the same run id gets the very grant
// the first attempt wrote: one claim, one epoch, one run — no double grant
// and no claim lost.
func TestKilledAfterCommitBeforeReplyRetryGetsTheSameGrant(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	logs := newLogWatch()
	sentinel := filepath.Join(t.TempDir(), "died")
	launchCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	p, err := Launch(launchCtx, LaunchConfig{
		Cmd:        testPluginCmd(t, "", "TESTPLUGIN_DIE_AFTER_START="+sentinel),
		Child:      &storespec.Spec{Backend: "bolt", Path: filepath.Join(t.TempDir(), "board.db"), Board: board.DefaultBoard(true), Lease: 30 * time.Second},
		Logger:     logs.logger(),
		MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	const term = 30 * time.Second
	hb, err := heartbeat.New(heartbeat.Config{Store: p, Lease: func() time.Duration { return term },
		Mode: func() heartbeat.Mode { return heartbeat.ModeKeepalive }})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := lease.New(lease.Config{Store: p, Claims: hb, Lease: func() time.Duration { return term }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.CreateCard(ctx, board.CreateCardParams{ID: "c1", State: board.StateReady, Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	w := lease.Worker{Marker: "hosta-4242", Owner: heartbeat.Owner{KeepaliveID: "hosta-4242"}}
	req := apitype.StartRequest{Card: "c1", RunID: "run-1"}

	_, err = svc.Start(ctx, w, req)
	if !errors.Is(err, board.ErrOutcomeUnknown) {
		t.Fatalf("Start whose plugin died after the commit = %v, want ErrOutcomeUnknown", err)
	}
	if _, held := hb.Lookup("c1"); held {
		t.Error("a Start with an unknown outcome is tracked")
	}
	waitCtx, cancelWait := context.WithTimeout(ctx, time.Minute)
	defer cancelWait()
	if err := p.WaitUp(waitCtx); err != nil {
		t.Fatalf("WaitUp after the crash: %v", err)
	}
	landed, err := p.GetCard(ctx, board.GetCardParams{ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if landed.Claim != w.Marker || landed.LastRunID != "run-1" {
		t.Fatalf("setup: the first Start did not land before the crash: %s@%d run %q", landed.Claim, landed.ClaimEpoch, landed.LastRunID)
	}

	again, err := svc.Start(ctx, w, req)
	if err != nil {
		t.Fatalf("the retried Start: %v", err)
	}
	if again.Token != landed.Token() || again.Run.ID != "run-1" {
		t.Errorf("retry granted %+v run %q, want the first attempt's %+v run-1", again.Token, again.Run.ID, landed.Token())
	}
	if h, held := hb.Lookup("c1"); !held || h.Hold.Token != landed.Token() {
		t.Errorf("after the retry the heartbeat tracks %+v (held %v), want %+v", h.Hold.Token, held, landed.Token())
	}
	evs, err := p.Events(ctx, board.EventsParams{After: 0, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var claimed, created int
	for _, e := range evs {
		if e.Card != "c1" {
			continue
		}
		switch e.Type {
		case board.EventClaimed:
			claimed++
		case board.EventRunCreated:
			created++
		}
	}
	if claimed != 1 || created != 1 {
		t.Errorf("event log holds %d claims and %d run creations of c1, want 1 and 1", claimed, created)
	}
}
