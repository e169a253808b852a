package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

// The lifecycle verbs end to end: a real socket, a real bbolt store, the
// real heartbeat. Each test states the rule it pins.

// lifecycleEnv starts a real agent with the given cards and a client of it.
func lifecycleEnv(t *testing.T, cards ...string) (*socketapitest.Agent, *client.Client, context.Context) {
	t.Helper()
	a := socketapitest.Start(t, socketapitest.Options{})
	for _, id := range cards {
		a.Card(t, id)
	}
	return a, &client.Client{Socket: a.Path}, testCtx(t)
}

// mustStart is Start that fails the test on an error.
func mustStart(t *testing.T, ctx context.Context, c *client.Client, card string, o client.StartOptions) *client.Claim {
	t.Helper()
	cl, err := c.Start(ctx, card, o)
	if err != nil {
		t.Fatalf("Start %s: %v", card, err)
	}
	return cl
}

func eventsSince(t *testing.T, a *socketapitest.Agent, after int64) []board.Event {
	t.Helper()
	evs, err := a.Store.Events(context.Background(), board.EventsParams{After: after, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func lastSeq(t *testing.T, a *socketapitest.Agent) int64 {
	t.Helper()
	evs := eventsSince(t, a, 0)
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

func getCard(t *testing.T, a *socketapitest.Agent, id string) board.Card {
	t.Helper()
	c, err := a.Store.GetCard(context.Background(), board.GetCardParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func getRun(t *testing.T, a *socketapitest.Agent, id string) board.Run {
	t.Helper()
	r, err := a.Store.GetRun(context.Background(), board.GetRunParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestStartThenFinish: Start claims the card, starts its run owned by the
// new claim and moves the card into the running column; Finish records the
// verdict, files the card to the completion state and releases the claim.
// The heartbeat renews the claim in between and forgets it after.
func TestStartThenFinish(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t, "life")
	cl := mustStart(t, ctx, c, "life", client.StartOptions{Checkpoint: "step-0"})
	run := cl.Run()
	if run.ID == "" || run.Status != board.RunRunning || run.Owner != cl.Token().Marker || run.Epoch != cl.Token().Epoch {
		t.Fatalf("Start's run = %+v, want running, owned by %+v", run, cl.Token())
	}
	if cl.Resumed() {
		t.Error("a card with no recorded run reported its run resumed")
	}
	card := getCard(t, a, "life")
	if card.Token() != cl.Token() || card.State != board.StateInProgress || card.LastRunID != run.ID || card.LastRunEpoch != cl.Token().Epoch {
		t.Fatalf("after Start the card is %+v, want claimed by %+v in %s pointing at %s", card, cl.Token(), board.StateInProgress, run.ID)
	}
	if _, ok := a.Loop.Lookup("life"); !ok {
		t.Fatal("the heartbeat does not renew the started claim")
	}

	f, err := cl.Finish(ctx, client.Verdict{Status: board.RunFinished})
	if err != nil {
		t.Fatal(err)
	}
	if f.Card.State != board.StateDone || f.Card.Claimed() || f.Run.Status != board.RunFinished {
		t.Fatalf("Finish answered card %+v run %+v, want done, free, finished", f.Card, f.Run)
	}
	if got := getRun(t, a, run.ID); got.Status != board.RunFinished {
		t.Errorf("stored run status %s, want finished", got.Status)
	}
	if _, ok := a.Loop.Lookup("life"); ok {
		t.Error("the heartbeat still renews a finished claim")
	}
	if cause := waitDone(t, cl.Context(), time.Second); !errors.Is(cause, client.ErrReleased) {
		t.Errorf("the claim's context ended with %v, want ErrReleased", cause)
	}
}

// TestStartRefusalsMintNothing: Start on a card in a sink, on a card
// someone holds, or on a card waiting on its blockers, is refused before
// anything is written — no epoch bump, no run, no event — and each refusal
// keeps its identity across the socket.
func TestStartRefusalsMintNothing(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	ctx := testCtx(t)
	a.Card(t, "sunk")
	if err := a.Store.SetState(ctx, board.MoveParams{Card: "sunk", To: board.StateDone, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	a.Card(t, "taken")
	if _, err := a.Store.Claim(ctx, board.ClaimParams{Card: "taken", Marker: "otherhost-4242", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	a.Card(t, "blocker")
	if _, err := a.Store.CreateCard(ctx, board.CreateCardParams{ID: "gated", DependsOn: []string{"blocker"}, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	before := map[string]board.Card{"sunk": getCard(t, a, "sunk"), "taken": getCard(t, a, "taken"), "gated": getCard(t, a, "gated")}
	seq := lastSeq(t, a)

	c := &client.Client{Socket: a.Path}
	if _, err := c.Start(ctx, "sunk", client.StartOptions{}); !errors.Is(err, board.ErrTerminalStateExit) {
		t.Errorf("Start on a card in a sink: %v, want ErrTerminalStateExit", err)
	}
	_, err := c.Start(ctx, "taken", client.StartOptions{})
	if ce, ok := board.AsClaimConflict(err); !ok || ce.Holder != "otherhost-4242" {
		t.Errorf("Start on a held card: %v, want a conflict naming the holder", err)
	}
	_, err = c.Start(ctx, "gated", client.StartOptions{})
	if !errors.Is(err, board.ErrWaitingOnBlockers) || !errors.Is(err, board.ErrTransitionRejected) || !strings.Contains(err.Error(), `"blocker"`) {
		t.Errorf("Start on a card waiting on its blocker: %v, want ErrWaitingOnBlockers naming the blocker", err)
	}
	if _, err := c.Claim(ctx, "gated"); !errors.Is(err, board.ErrWaitingOnBlockers) {
		t.Errorf("Claim of a card waiting on its blocker: %v, want ErrWaitingOnBlockers", err)
	}
	for id, want := range before {
		got := getCard(t, a, id)
		if got.ClaimEpoch != want.ClaimEpoch || got.Claim != want.Claim || got.LastRunID != want.LastRunID || len(got.Runs) != len(want.Runs) || got.State != want.State {
			t.Errorf("refused Start changed %s: %+v, was %+v", id, got, want)
		}
	}
	if evs := eventsSince(t, a, seq); len(evs) != 0 {
		t.Errorf("refused Starts wrote events: %+v", evs)
	}
}

// TestForceReleaseLeavesTheRunResumable: an operator's force-release closes
// the holder's open run in the same write (failed_resumable,
// CLAIM_RELEASED); the holder's late Finish is refused by the fence; the
// next Start resumes the recorded run — same id, same checkpoint, a new
// owner and epoch — instead of starting another.
func TestForceReleaseLeavesTheRunResumable(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t, "steal")
	first := mustStart(t, ctx, c, "steal", client.StartOptions{Checkpoint: "halfway"})
	if _, err := c.ForceRelease(ctx, "steal"); err != nil {
		t.Fatal(err)
	}
	r := getRun(t, a, first.Run().ID)
	if r.Status != board.RunFailedResumable || r.FailureCode != board.FailureClaimReleased {
		t.Fatalf("the released holder's run is %s/%s, want %s/%s", r.Status, r.FailureCode, board.RunFailedResumable, board.FailureClaimReleased)
	}
	waitDone(t, first.Context(), 5*time.Second)
	if _, err := first.Finish(ctx, client.Verdict{Status: board.RunFinished}); !errors.Is(err, board.ErrClaimConflict) {
		t.Fatalf("the released holder's Finish: %v, want a conflict", err)
	}
	if got := getCard(t, a, "steal"); got.State == board.StateDone || got.Claimed() {
		t.Fatalf("the refused Finish filed or claimed the card: %+v", got)
	}

	second := mustStart(t, ctx, c, "steal", client.StartOptions{Checkpoint: "ignored on resume"})
	run := second.Run()
	if !second.Resumed() || run.ID != first.Run().ID || run.Checkpoint != "halfway" || run.Epoch != second.Token().Epoch || run.Status != board.RunRunning || run.FailureCode != "" {
		t.Fatalf("the next Start got run %+v (resumed %v), want %s resumed at checkpoint halfway under epoch %d", run, second.Resumed(), first.Run().ID, second.Token().Epoch)
	}
	if card := getCard(t, a, "steal"); len(card.Runs) != 1 {
		t.Errorf("a resumed run grew the card's runs to %v", card.Runs)
	}
	if _, err := second.Finish(ctx, client.Verdict{Status: board.RunFailed, FailureCode: "EXIT_3"}); err != nil {
		t.Fatal(err)
	}
	if card := getCard(t, a, "steal"); card.State != board.StateFailed || card.Claimed() {
		t.Errorf("after a failed verdict the card is %+v, want failed and free", card)
	}
}

// TestFreshStartClosesTheSupersededRun: with Fresh, a recorded run without a
// verdict is closed (cancelled, RUN_SUPERSEDED) and a new one started, so
// no run is left open with nothing pointing at it.
func TestFreshStartClosesTheSupersededRun(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t, "anew")
	first := mustStart(t, ctx, c, "anew", client.StartOptions{})
	if _, err := first.Finish(ctx, client.Verdict{Status: board.RunFailedResumable}); err != nil {
		t.Fatal(err)
	}
	second, err := c.Start(ctx, "anew", client.StartOptions{Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	if second.Resumed() || second.Run().ID == first.Run().ID {
		t.Fatalf("a fresh Start resumed run %s", second.Run().ID)
	}
	if old := getRun(t, a, first.Run().ID); old.Status != board.RunCancelled || old.FailureCode != board.FailureRunSuperseded {
		t.Errorf("the superseded run is %s/%s, want cancelled/%s", old.Status, old.FailureCode, board.FailureRunSuperseded)
	}
}

// TestLastRunMustNameARunOfThisCard: the fine-grained last-run stamp is
// refused for a run id that names no run, or a run of another card.
func TestLastRunMustNameARunOfThisCard(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t, "mine", "theirs")
	other, err := c.Start(ctx, "theirs", client.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.Claim(ctx, "mine")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.SetLastRun(ctx, "run-nowhere"); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("last-run naming no run: %v, want ErrNotFound", err)
	}
	if err := cl.SetLastRun(ctx, other.Run().ID); !errors.Is(err, board.ErrInvalidArgument) {
		t.Errorf("last-run naming another card's run: %v, want ErrInvalidArgument", err)
	}
	if got := getCard(t, a, "mine"); got.LastRunID != "" {
		t.Errorf("a refused last-run stamp landed: %q", got.LastRunID)
	}
}

// TestRunWritesAreFencedByTheClaim: once an operator took the claim away,
// the run's former owner can no longer write it (the store refuses the
// stale token), although it started the run.
func TestRunWritesAreFencedByTheClaim(t *testing.T) {
	t.Parallel()
	a, c, ctx := lifecycleEnv(t, "fenced")
	cl, err := c.Claim(ctx, "fenced")
	if err != nil {
		t.Fatal(err)
	}
	run, err := cl.StartRun(ctx, client.RunSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if card := getCard(t, a, "fenced"); card.LastRunID != run.ID || card.LastRunEpoch != cl.Token().Epoch {
		t.Fatalf("StartRun did not point the card at its run in the same write: %+v", card)
	}
	if _, err := c.ForceRelease(ctx, "fenced"); err != nil {
		t.Fatal(err)
	}
	// Once the client knows the claim is over, a late write is sent as is
	// and it is the agent (the store) that refuses it.
	waitDone(t, cl.Context(), 5*time.Second)
	finished := board.RunFinished
	if _, err := cl.UpdateRun(ctx, run.ID, updateStatus(finished)); !errors.Is(err, board.ErrClaimConflict) {
		t.Fatalf("a released owner's run update: %v, want a conflict", err)
	}
	if got := getRun(t, a, run.ID); got.Status == board.RunFinished {
		t.Error("the released owner's verdict landed")
	}
}

func updateStatus(s board.RunStatus) apitype.UpdateRunRequest {
	return apitype.UpdateRunRequest{Status: &s}
}
