package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// `prune --dry-run` says what a prune would delete and deletes nothing;
// `prune` then deletes exactly that, through a real agent, its plugin
// child and a real bbolt file. A follower positioned below what was
// pruned is told so (410 events_pruned), never served a gap
// (DESIGN.md#retention).
func TestE2EPruneDryRunThenPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	for _, id := range []string{"old1", "old2"} {
		e.MustRun("card", "create", id)
		if _, errs, code := e.Run("claim", id, "--", "true"); code != 0 {
			t.Fatalf("claim %s exit %d: %s", id, code, errs)
		}
	}
	e.MustRun("card", "create", "open") // not finished: its history stays
	runID := e.Card("old1").LastRunID
	e.GetRun(runID)

	dry := e.MustRun("prune", "--older-than", "1ms", "--dry-run")
	for _, want := range []string{"would prune 2 run(s) of 2 finished card(s)", "cards: old1 old2"} {
		if !strings.Contains(dry, want) {
			t.Errorf("prune --dry-run output lacks %q:\n%s", want, dry)
		}
	}
	e.GetRun(runID) // still there

	out := e.MustRun("prune", "--older-than", "1ms")
	for _, want := range []string{"pruned 2 run(s) of 2 finished card(s)", "cards: old1 old2", "events through seq"} {
		if !strings.Contains(out, want) {
			t.Errorf("prune output lacks %q:\n%s", want, out)
		}
	}
	c := &client.Client{Socket: e.Socket}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.GetRun(ctx, runID); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("run %s after prune: %v, want not found", runID, err)
	}
	if got := e.Card("old1"); got.State != board.StateDone {
		t.Errorf("a pruned card is %s, want it kept in done", got.State)
	}

	_, err := c.Events(ctx, 1, 10)
	var ae *apitype.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusGone || ae.Body.Code != apitype.CodeEventsPruned || !errors.Is(err, board.ErrEventsPruned) {
		t.Errorf("events after=1 once pruned = %v, want 410 events_pruned", err)
	}
	e.MustRun("card", "create", "after")
	if evs, err := c.Events(ctx, 0, 10); err != nil || len(evs) == 0 || evs[len(evs)-1].Card != "after" {
		t.Errorf("events from 0 after the prune = %v, %v; want what the log keeps", evs, err)
	}
	if again := e.MustRun("prune", "--older-than", "1ms"); !strings.Contains(again, "pruned 0 run(s)") {
		t.Errorf("a second prune found runs to delete:\n%s", again)
	}
}

// `card delete` refuses a claimed card, deletes it with --force (its
// holder told and fenced off), deletes a finished card with its runs, and
// records a card_deleted event; only an operator may.
func TestE2ECardDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "fin")
	if _, errs, code := e.Run("claim", "fin", "--", "true"); code != 0 {
		t.Fatalf("claim exit %d: %s", code, errs)
	}
	runID := e.Card("fin").LastRunID
	out := e.MustRun("card", "delete", "fin")
	if !strings.Contains(out, "deleted fin (done) and 1 run(s)") {
		t.Errorf("card delete output = %q", out)
	}
	if _, errs, code := e.Run("card", "show", "fin"); code == 0 || !strings.Contains(errs, "not found") {
		t.Errorf("card show of a deleted card: exit %d, %s", code, errs)
	}
	c := &client.Client{Socket: e.Socket}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.GetRun(ctx, runID); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("the deleted card's run: %v, want not found", err)
	}
	if evs := e.MustRun("events", "--type", "card_deleted"); !strings.Contains(evs, "card_deleted") || !strings.Contains(evs, "fin from done by uid:") {
		t.Errorf("events --type card_deleted:\n%s", evs)
	}

	e.MustRun("card", "create", "held")
	claim := e.startClaim("held", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	e.workerPID("worker.pid")
	_, errs, code := e.Run("card", "delete", "held")
	if code == 0 || !strings.Contains(errs, "claim conflict") || !strings.Contains(errs, "release it first") {
		t.Errorf("card delete of a claimed card: exit %d, %s; want a claim conflict saying to release it first", code, errs)
	}
	e.Card("held")
	out = e.MustRun("card", "delete", "held", "--force")
	if !strings.Contains(out, "released held from") || !strings.Contains(out, "deleted held") {
		t.Errorf("card delete --force output = %q", out)
	}
	if got, want := claim.wait(t, 5*time.Second), claimExitLost; got != want {
		t.Errorf("the holder's claim exit = %d, want %d (lost); output:\n%s", got, want, claim.output.String())
	}
}

// A follower whose position was pruned (`events --follow` resuming after a
// long disconnection) is told what happened and what to do, not handed a
// bare 410 (DESIGN.md#retention).
func TestPrunedEventsErrorIsExplained(t *testing.T) {
	t.Parallel()
	env := &cli{}
	c := &client.Client{Socket: "unused.sock"}
	gone := &apitype.Error{Status: http.StatusGone, Body: apitype.ErrorBody{Code: apitype.CodeEventsPruned, Error: "events after 3 were pruned through 9"}}
	if retryable(gone) {
		t.Error("a pruned position is retried, but no retry brings the events back")
	}
	err := env.agentError(c, gone)
	if !errors.Is(err, board.ErrEventsPruned) || !strings.Contains(err.Error(), "deleted by retention") || !strings.Contains(err.Error(), "run the command again") {
		t.Errorf("agentError = %v; want it to say retention deleted them and how to read on", err)
	}
}
