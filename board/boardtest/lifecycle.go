package boardtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// startReq is a Start of card id by marker with a run named runID.
func startReq(id, marker, runID string) board.StartParams {
	return board.StartParams{Card: id, Marker: marker, Lease: lease,
		Run: board.Run{ID: runID, Host: "host-" + marker, PID: 4242, Checkpoint: "step-0"}}
}

func (e *env) start(r board.StartParams) board.StartResult {
	e.t.Helper()
	st, err := e.s.Start(e.ctx, r)
	if err != nil {
		e.t.Fatalf("Start(%+v): %v", r, err)
	}
	return st
}

func (e *env) run(id string) board.Run {
	e.t.Helper()
	r, err := e.s.GetRun(e.ctx, board.GetRunParams{ID: id})
	if err != nil {
		e.t.Fatalf("GetRun(%q): %v", id, err)
	}
	return r
}

// wantTypes fails unless evs are exactly the event types want, in order.
func wantTypes(t *testing.T, evs []board.Event, what string, want ...board.EventType) {
	t.Helper()
	got := make([]board.EventType, len(evs))
	for i, ev := range evs {
		got[i] = ev.Type
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s logged %s, want %v", what, fmtEvents(evs), want)
	}
}

// refusedStart asserts a Start was refused with target and wrote nothing:
// the card (epoch included), the events and the run are all as before.
func (e *env) refusedStart(r board.StartParams, target error, what string) error {
	e.t.Helper()
	before := e.get(r.Card)
	seq := e.lastSeq()
	_, err := e.s.Start(e.ctx, r)
	wantErr(e.t, err, target, what)
	e.unchanged(before, what)
	e.noEventsSince(seq, what)
	if _, gerr := e.s.GetRun(e.ctx, board.GetRunParams{ID: r.Run.ID}); r.Run.ID != "" && !errors.Is(gerr, board.ErrNotFound) {
		e.t.Errorf("%s: GetRun(%q) = %v, want ErrNotFound: a refused Start creates no run", what, r.Run.ID, gerr)
	}
	return err
}

func exerciseLifecycle(t *testing.T, h Harness) {
	t.Run("StartByCard", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		seq := e.lastSeq()
		st := e.start(startReq("c1", markerA, "r1"))
		c := e.get("c1")
		if d := diffCards(c, st.Card); d != "" {
			t.Errorf("Started.Card differs from the stored card: %s", d)
		}
		if c.Token() != st.Token || st.Token.Marker != markerA || st.Token.Epoch <= 0 {
			t.Errorf("card claim %+v, token %+v; want claimed by %s under the returned token", c.Token(), st.Token, markerA)
		}
		if c.State != board.StateInProgress || c.LastRunID != "r1" || c.LastRunEpoch != st.Token.Epoch || !slices.Equal(c.Runs, []string{"r1"}) {
			t.Errorf("card after Start = state %s last run %q@%d runs %q; want in_progress pointing at r1 under epoch %d", c.State, c.LastRunID, c.LastRunEpoch, c.Runs, st.Token.Epoch)
		}
		r := e.run("r1")
		if d := diffRuns(r, st.Run); d != "" {
			t.Errorf("Started.Run differs from the stored run: %s", d)
		}
		if r.Owner != markerA || r.Epoch != st.Token.Epoch || r.Card != "c1" || r.Status != board.RunRunning || r.Checkpoint != "step-0" || r.Host != "host-"+markerA || r.PID != 4242 {
			t.Errorf("run = %s epoch %d pid %d host %s; want running, owned by the new token, identity as given", fmtRun(r), r.Epoch, r.PID, r.Host)
		}
		if st.Resumed {
			t.Errorf("Started.Resumed on a card with no recorded run")
		}
		wantTypes(t, e.eventsAfter(seq), "Start", board.EventClaimed, board.EventRunCreated, board.EventLastRun, board.EventState)
	})

	t.Run("StartInTheRunningColumnDoesNotMove", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateInProgress)
		seq := e.lastSeq()
		e.start(startReq("c1", markerA, "r1"))
		wantTypes(t, e.eventsAfter(seq), "Start in in_progress", board.EventClaimed, board.EventRunCreated, board.EventLastRun)
	})

	t.Run("StartNext", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		e.card("c2", board.StateReady)
		e.card("c0", board.StateBacklog)
		r := startReq("", markerA, "r1")
		r.Next = true
		st := e.start(r)
		if st.Card.ID != "c1" || st.Run.Card != "c1" || e.get("c1").LastRunID != "r1" {
			t.Errorf("Start next took %q (run card %q), want the oldest pool card c1 pointing at r1", st.Card.ID, st.Run.Card)
		}
		r2 := startReq("", markerB, "r2")
		r2.Next = true
		if st := e.start(r2); st.Card.ID != "c2" {
			t.Errorf("second Start next took %q, want c2", st.Card.ID)
		}
		r3 := startReq("", markerB, "r3")
		r3.Next = true
		seq := e.lastSeq()
		_, err := e.s.Start(e.ctx, r3)
		wantErr(t, err, board.ErrNotFound, "Start next with no claimable card")
		e.noEventsSince(seq, "a Start next that found nothing")
	})

	t.Run("RefusalsMintNothing", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("sink", board.StateDone)
		e.refusedStart(startReq("sink", markerA, "r1"), board.ErrTerminalStateExit, "Start of a card in a terminal state")

		e.card("held", board.StateReady)
		tok := e.claim("held", markerA)
		err := e.refusedStart(startReq("held", markerB, "r2"), board.ErrClaimConflict, "Start of a card held by another")
		wantConflict(t, err, markerA, tok.Epoch, "Start of a card held by another")
		err = e.refusedStart(startReq("held", markerA, "r3"), board.ErrClaimConflict, "Start of a card held by the same marker")
		wantConflict(t, err, markerA, tok.Epoch, "Start of a card held by the same marker")

		e.card("c1", board.StateReady)
		bad := startReq("c1", markerA, "")
		e.refusedStart(bad, board.ErrInvalidArgument, "Start without a run id")
		bad = startReq("c1", markerA, "r4")
		bad.Run.Status = board.RunFinished
		e.refusedStart(bad, board.ErrInvalidArgument, "Start of a finished run")
	})

	t.Run("RetryIsAnswered", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		first := e.start(startReq("c1", markerA, "r1"))
		before := e.get("c1")
		seq := e.lastSeq()
		// The retry comes later, and asks for a longer lease: the caller
		// counts the claim from the retry, so the store's lease must
		// reach as far (as an idempotent re-claim's does).
		e.clock.Advance(25 * time.Second)
		retry := startReq("c1", markerA, "r1")
		retry.Lease = 2 * time.Minute
		again := e.start(retry)
		if again.Token != first.Token || again.Run.ID != "r1" || again.Card.ClaimEpoch != first.Token.Epoch {
			t.Errorf("retried Start = token %+v run %q, want the first answer %+v r1", again.Token, again.Run.ID, first.Token)
		}
		c := e.get("c1")
		if d := diffCards(c, again.Card); d != "" {
			t.Errorf("the retry's Started.Card differs from the stored card: %s", d)
		}
		if e.local() && !c.ClaimLeaseUntil.Equal(e.clock.Now().Add(retry.Lease)) {
			t.Errorf("lease after a retried Start = %s, want the retry's now+lease = %s", fmtTime(c.ClaimLeaseUntil), fmtTime(e.clock.Now().Add(retry.Lease)))
		}
		if !e.local() && !c.ClaimLeaseUntil.After(before.ClaimLeaseUntil.Add(retry.Lease-lease-10*time.Second)) {
			t.Errorf("lease after a retried Start = %s, want about the retry's now+lease (the first was %s)", fmtTime(c.ClaimLeaseUntil), fmtTime(before.ClaimLeaseUntil))
		}
		// Only the lease moved: same epoch, no event, nothing else written.
		want := before
		want.ClaimLeaseUntil = c.ClaimLeaseUntil
		e.unchanged(want, "a retried Start")
		e.noEventsSince(seq, "a retried Start")
		// A shorter lease in a later retry never moves it back.
		e.start(startReq("c1", markerA, "r1"))
		if got := e.get("c1").ClaimLeaseUntil; got.Before(c.ClaimLeaseUntil) {
			t.Errorf("a retry with a shorter lease moved the lease back: %s, was %s", fmtTime(got), fmtTime(c.ClaimLeaseUntil))
		}
	})

	t.Run("ResumeRecordedRun", func(t *testing.T) {
		for _, end := range []string{"ReleaseOwned", "Release"} {
			t.Run("After"+end, func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.card("c1", board.StateReady)
				first := e.start(startReq("c1", markerA, "r1"))
				cp := "step-5"
				if _, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: first.Token, Checkpoint: &cp}); err != nil {
					t.Fatal(err)
				}
				if end == "Release" {
					if err := e.s.Release(e.ctx, board.ReleaseParams{Card: "c1", Marker: markerA, Actor: "uid:0"}); err != nil {
						t.Fatal(err)
					}
				} else {
					e.release("c1", first.Token)
				}
				if e.local() {
					// The local board's running column is a pool state.
				} else {
					e.setState("c1", board.StateReady)
				}
				seq := e.lastSeq()
				r := startReq("c1", markerB, "r2")
				r.Run.PID = 5151
				st := e.start(r)
				if !e.local() {
					// The fleet twin never resumes: the run is superseded
					// and a fresh one started, so its run ceiling counts it.
					if st.Resumed || st.Run.ID != "r2" {
						t.Fatalf("fleet Start over a recorded run without a verdict = resumed %v run %q, want a fresh r2", st.Resumed, st.Run.ID)
					}
					if old := e.run("r1"); old.Status != board.RunCancelled || old.FailureCode != board.FailureRunSuperseded || old.Checkpoint != cp {
						t.Errorf("fleet: the superseded run = %s, want cancelled with %s, its checkpoint kept", fmtRun(old), board.FailureRunSuperseded)
					}
					if c := e.get("c1"); !slices.Equal(c.Runs, []string{"r1", "r2"}) || c.LastRunID != "r2" {
						t.Errorf("fleet card after a Start: runs %q last %q, want [r1 r2] pointing at r2", c.Runs, c.LastRunID)
					}
					return
				}
				if !st.Resumed || st.Run.ID != "r1" {
					t.Fatalf("Start over a recorded run without a verdict = resumed %v run %q, want r1 resumed", st.Resumed, st.Run.ID)
				}
				got := e.run("r1")
				if got.Checkpoint != cp || got.Status != board.RunRunning || got.FailureCode != "" || got.Owner != markerB || got.Epoch != st.Token.Epoch || got.PID != 5151 || got.Host != "host-"+markerB {
					t.Errorf("resumed run = %s epoch %d pid %d; want checkpoint kept, running, no failure code, owner/epoch/identity the new claim's", fmtRun(got), got.Epoch, got.PID)
				}
				c := e.get("c1")
				if !slices.Equal(c.Runs, []string{"r1"}) || c.LastRunID != "r1" || c.LastRunEpoch != st.Token.Epoch {
					t.Errorf("card after resume: runs %q last %q@%d, want runs not grown, pointer stamped under epoch %d", c.Runs, c.LastRunID, c.LastRunEpoch, st.Token.Epoch)
				}
				if _, err := e.s.GetRun(e.ctx, board.GetRunParams{ID: "r2"}); !errors.Is(err, board.ErrNotFound) {
					t.Errorf("GetRun(r2) after a resume = %v, want ErrNotFound (the request's run id is unused)", err)
				}
				evs := e.eventsAfter(seq)
				if len(evs) < 3 || evs[0].Type != board.EventClaimed || evs[1].Type != board.EventRunUpdated || evs[2].Type != board.EventLastRun {
					t.Errorf("resuming Start logged %s, want claimed, run_updated, last_run", fmtEvents(evs))
				}
				// A retry of the resuming Start (its answer lost) names
				// the run id it asked for, by card or by next: it is
				// answered with what the first attempt wrote, and claims
				// nothing else.
				e.card("c2", board.StateReady)
				byNext := r
				byNext.Card, byNext.Next = "", true
				for _, retry := range []board.StartParams{r, byNext} {
					again, err := e.s.Start(e.ctx, retry)
					if err != nil || !again.Resumed || again.Run.ID != "r1" || again.Token != st.Token || again.Card.ID != "c1" {
						t.Errorf("retry (next %v) of a resuming Start = card %q token %+v run %q resumed %v, %v; want c1 %+v r1 resumed", retry.Next, again.Card.ID, again.Token, again.Run.ID, again.Resumed, err, st.Token)
					}
				}
				if c2 := e.get("c2"); c2.Claimed() {
					t.Errorf("a retried resuming Start claimed c2 (%s@%d)", c2.Claim, c2.ClaimEpoch)
				}
				// The earlier holder's late writes are refused by the fence.
				st2 := board.RunFinished
				if _, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: first.Token, Status: &st2}); !errors.Is(err, board.ErrClaimConflict) {
					t.Errorf("the earlier holder's UpdateRun of the resumed run = %v, want ErrClaimConflict", err)
				}
			})
		}
	})

	t.Run("PausedRunRefusesStart", func(t *testing.T) {
		for _, paused := range []board.RunStatus{board.RunPausedOperator, board.RunPausedWaitingHuman} {
			t.Run(string(paused), func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.card("c1", board.StateReady)
				first := e.start(startReq("c1", markerA, "r1"))
				if _, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: first.Token, Status: &paused}); err != nil {
					t.Fatal(err)
				}
				e.release("c1", first.Token)
				parked := e.run("r1")
				if parked.Status != paused {
					t.Fatalf("run after the holder's release = %s, want still %s (a release closes only a running or queued run)", fmtRun(parked), paused)
				}
				e.card("c2", board.StateReady)
				// A Start on the card, fresh or not, neither resumes nor
				// supersedes the parked run.
				for _, fresh := range []bool{false, true} {
					r := startReq("c1", markerB, "r2")
					r.Fresh = fresh
					err := e.refusedStart(r, board.ErrTransitionRejected, fmt.Sprintf("Start (fresh %v) of a card whose run is %s", fresh, paused))
					if err != nil && (!strings.Contains(err.Error(), `"r1"`) || !strings.Contains(err.Error(), string(paused))) {
						t.Errorf("the refusal %q does not name the run r1 and its status %s", err, paused)
					}
				}
				if d := diffRuns(e.run("r1"), parked); d != "" {
					t.Errorf("the refused Starts changed the parked run: %s", d)
				}
				// Start next passes the card over, as it does a held one.
				next := startReq("", markerB, "r3")
				next.Next = true
				if st := e.start(next); st.Card.ID != "c2" {
					t.Errorf("Start next took %q, want c2 (c1's run is %s)", st.Card.ID, paused)
				}
				next = startReq("", markerB, "r4")
				next.Next = true
				seq := e.lastSeq()
				_, err := e.s.Start(e.ctx, next)
				wantErr(t, err, board.ErrNotFound, "Start next with only a parked card free")
				e.noEventsSince(seq, "a Start next that found only a parked card")
			})
		}
	})

	t.Run("FreshClosesTheSupersededRun", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		first := e.start(startReq("c1", markerA, "r1"))
		e.release("c1", first.Token)
		if !e.local() {
			e.setState("c1", board.StateReady)
		}
		r := startReq("c1", markerB, "r2")
		r.Fresh = true
		st := e.start(r)
		if st.Resumed || st.Run.ID != "r2" {
			t.Errorf("fresh Start = resumed %v run %q, want a new run r2", st.Resumed, st.Run.ID)
		}
		old := e.run("r1")
		if old.Status != board.RunCancelled || old.FailureCode != board.FailureRunSuperseded {
			t.Errorf("superseded run = %s, want cancelled with %s", fmtRun(old), board.FailureRunSuperseded)
		}
		if c := e.get("c1"); !slices.Equal(c.Runs, []string{"r1", "r2"}) || c.LastRunID != "r2" {
			t.Errorf("card after a fresh Start: runs %q last %q, want [r1 r2] pointing at r2", c.Runs, c.LastRunID)
		}
	})

	t.Run("FinishFiles", func(t *testing.T) {
		resumable := board.StateInProgress // a pool state on the local board
		if h.Fleet {
			resumable = board.StateReady
		}
		cases := []struct {
			status board.RunStatus
			state  string
			reason board.Reason
		}{
			{board.RunFinished, board.StateDone, board.ReasonRunFinished},
			{board.RunFailed, board.StateFailed, board.ReasonRunFailed},
			{board.RunFailedResumable, resumable, board.ReasonNone},
		}
		for _, tc := range cases {
			t.Run(string(tc.status), func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.card("c1", board.StateReady)
				e.create(board.CreateCardParams{ID: "dep", DependsOn: []string{"c1"}})
				st := e.start(startReq("c1", markerA, "r1"))
				seq := e.lastSeq()
				cp := "step-9"
				f, err := e.s.Finish(e.ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1", Status: tc.status, FailureCode: "E1", Checkpoint: &cp})
				if err != nil {
					t.Fatalf("Finish %s: %v", tc.status, err)
				}
				c := e.get("c1")
				if d := diffCards(c, f.Card); d != "" {
					t.Errorf("Finished.Card differs from the stored card: %s", d)
				}
				if c.Claimed() || c.ClaimEpoch != st.Token.Epoch {
					t.Errorf("card after Finish: claim %q epoch %d, want released with the epoch kept (%d)", c.Claim, c.ClaimEpoch, st.Token.Epoch)
				}
				if c.State != tc.state || (tc.reason != board.ReasonNone && c.StateReason != tc.reason) {
					t.Errorf("card after Finish %s: state %s reason %q, want %s %q", tc.status, c.State, c.StateReason, tc.state, tc.reason)
				}
				r := e.run("r1")
				if r.Status != tc.status || r.FailureCode != "E1" || r.Checkpoint != cp || diffRuns(r, f.Run) != "" {
					t.Errorf("run after Finish = %s, want status %s, code E1, checkpoint %s, as returned", fmtRun(r), tc.status, cp)
				}
				evs := e.eventsAfter(seq)
				want := []board.EventType{board.EventRunUpdated, board.EventState, board.EventReleased}
				if tc.state == board.StateInProgress {
					want = []board.EventType{board.EventRunUpdated, board.EventReleased}
				}
				wantTypes(t, cardEvents(evs, "c1", len(evs)), "Finish "+string(tc.status), want...)
				var promoted []board.EventType
				if tc.status == board.RunFinished {
					// The promotion of the dependent this completes.
					promoted = []board.EventType{board.EventState}
				}
				wantTypes(t, cardEvents(evs, "dep", len(evs)), "Finish "+string(tc.status)+" for the dependent", promoted...)
				wantDep := board.StateWaitingDeps
				if tc.status == board.RunFinished {
					wantDep = board.StateReady
				}
				if d := e.get("dep"); d.State != wantDep {
					t.Errorf("dependent after Finish %s is in %s, want %s", tc.status, d.State, wantDep)
				}
			})
		}
	})

	t.Run("ResumableFinishReturnsTheCardWhereItWasStarted", func(t *testing.T) {
		// A card started by id out of a column outside the pool (backlog:
		// nobody's to pick up yet) goes back there on a resumable verdict,
		// not into the pool, where the next Start of any card would take it;
		// and again after a Start that resumes or replaces its run.
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateBacklog)
		for i, runID := range []string{"r1", "r2"} {
			st := e.start(startReq("c1", markerA, runID))
			if got := e.get("c1").State; got != board.StateInProgress {
				t.Fatalf("Start %d from backlog: card in %s, want %s", i+1, got, board.StateInProgress)
			}
			if got := e.run(st.Run.ID).StartedFrom; got != board.StateBacklog || st.Run.StartedFrom != got {
				t.Errorf("Start %d: run started_from %q (returned %q), want %s", i+1, got, st.Run.StartedFrom, board.StateBacklog)
			}
			seq := e.lastSeq()
			f, err := e.s.Finish(e.ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: st.Run.ID, Status: board.RunFailedResumable, FailureCode: "INTERRUPTED"})
			if err != nil {
				t.Fatalf("Finish %d: %v", i+1, err)
			}
			c := e.get("c1")
			if c.Claimed() || c.State != board.StateBacklog || c.StateReason != board.ReasonNone || diffCards(c, f.Card) != "" {
				t.Fatalf("card after resumable Finish %d = %s (reason %q), want free in %s, where it was started from, as returned", i+1, fmtCard(c), c.StateReason, board.StateBacklog)
			}
			evs := e.eventsAfter(seq)
			wantTypes(t, cardEvents(evs, "c1", len(evs)), "resumable Finish of a card started from backlog",
				board.EventRunUpdated, board.EventState, board.EventReleased)
			if r := e.run(st.Run.ID); r.Status != board.RunFailedResumable {
				t.Errorf("run after Finish %d = %s, want failed_resumable", i+1, fmtRun(r))
			}
			next := startReq("", markerB, "n"+runID)
			next.Next = true
			seq = e.lastSeq()
			_, err = e.s.Start(e.ctx, next)
			wantErr(t, err, board.ErrNotFound, "Start next with the card back in backlog")
			e.noEventsSince(seq, "a Start next that found nothing")
		}
	})

	t.Run("FinishLeavesAnOperatorsMove", func(t *testing.T) {
		cases := []struct {
			moved  string
			status board.RunStatus
		}{
			{board.StateCancelled, board.RunFinished},
			{board.StateBlocked, board.RunFailed},
			{board.StateAwaitingInput, board.RunFailedResumable},
		}
		for _, tc := range cases {
			t.Run(tc.moved+"/"+string(tc.status), func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.card("c1", board.StateReady)
				st := e.start(startReq("c1", markerA, "r1"))
				e.setState("c1", tc.moved)
				if _, err := e.s.Finish(e.ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1", Status: tc.status}); err != nil {
					t.Fatalf("Finish after an operator moved the card: %v", err)
				}
				c := e.get("c1")
				if c.State != tc.moved || c.Claimed() {
					t.Errorf("card = %s claimed %q, want left in %s, released", c.State, c.Claim, tc.moved)
				}
				if r := e.run("r1"); r.Status != tc.status {
					t.Errorf("run = %s, want the verdict %s recorded", fmtRun(r), tc.status)
				}
			})
		}
	})

	t.Run("FinishFenced", func(t *testing.T) {
		refused := func(e *env, r board.FinishParams, target error, what string) {
			e.t.Helper()
			before, run := e.get(r.Card), e.run(r.RunID)
			seq := e.lastSeq()
			_, err := e.s.Finish(e.ctx, r)
			wantErr(e.t, err, target, what)
			e.unchanged(before, what)
			e.noEventsSince(seq, what)
			if d := diffRuns(e.run(r.RunID), run); d != "" {
				e.t.Errorf("%s changed the run: %s", what, d)
			}
		}
		t.Run("StaleToken", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("c1", board.StateReady)
			st := e.start(startReq("c1", markerA, "r1"))
			stale := board.ClaimToken{Marker: markerA, Epoch: st.Token.Epoch + 1}
			refused(e, board.FinishParams{Card: "c1", Token: stale, RunID: "r1", Status: board.RunFinished}, board.ErrClaimConflict, "Finish with a stale token")
		})
		t.Run("RunOfAnotherClaim", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("c1", board.StateReady)
			st := e.start(startReq("c1", markerA, "r1"))
			e.release("c1", st.Token)
			tok := e.claim("c1", markerB)
			refused(e, board.FinishParams{Card: "c1", Token: tok, RunID: "r1", Status: board.RunFinished}, board.ErrClaimConflict, "Finish of a run another claim started")
		})
		t.Run("RunWithAVerdict", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("c1", board.StateReady)
			st := e.start(startReq("c1", markerA, "r1"))
			fin := board.RunFinished
			if _, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: st.Token, Status: &fin}); err != nil {
				t.Fatal(err)
			}
			refused(e, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1", Status: board.RunFailed}, board.ErrTransitionRejected, "Finish of a run that has its verdict")
		})
		t.Run("NotTheRecordedRun", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("c1", board.StateReady)
			st := e.start(startReq("c1", markerA, "r1"))
			if _, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: st.Token, Run: board.Run{ID: "r2", Card: "c1"}}); err != nil {
				t.Fatal(err)
			}
			refused(e, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1", Status: board.RunFinished}, board.ErrClaimConflict, "Finish of a run the card no longer records")
		})
	})

	t.Run("RunWritesFenced", func(t *testing.T) {
		t.Run("CreateRunStaleToken", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("c1", board.StateReady)
			tok := e.claim("c1", markerA)
			e.release("c1", tok)
			before := e.get("c1")
			seq := e.lastSeq()
			_, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "r1", Card: "c1"}})
			wantConflict(t, err, "", tok.Epoch, "CreateRun under a released token")
			e.unchanged(before, "a refused CreateRun")
			e.noEventsSince(seq, "a refused CreateRun")
			if _, err := e.s.GetRun(e.ctx, board.GetRunParams{ID: "r1"}); !errors.Is(err, board.ErrNotFound) {
				t.Errorf("GetRun after a refused CreateRun = %v, want ErrNotFound", err)
			}
		})
		t.Run("UpdateRunWorkerToken", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("c1", board.StateReady)
			st := e.start(startReq("c1", markerA, "r1"))
			before := e.run("r1")
			seq := e.lastSeq()
			cp := "late"
			for name, tok := range map[string]board.ClaimToken{
				"another epoch":  {Marker: markerA, Epoch: st.Token.Epoch + 1},
				"another marker": {Marker: markerB, Epoch: st.Token.Epoch},
			} {
				_, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: tok, Checkpoint: &cp})
				wantErr(t, err, board.ErrClaimConflict, "UpdateRun under "+name)
			}
			e.noEventsSince(seq, "refused UpdateRuns")
			if d := diffRuns(e.run("r1"), before); d != "" {
				t.Errorf("a refused UpdateRun changed the run: %s", d)
			}
			// A run of the same card that the claim did not start.
			e.release("c1", st.Token)
			tok := e.claim("c1", markerA)
			_, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: tok, Checkpoint: &cp})
			wantErr(t, err, board.ErrClaimConflict, "UpdateRun of a run an earlier claim of the same marker started")
		})
		t.Run("UpdateRunRecoveryToken", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("c1", board.StateReady)
			st := e.start(startReq("c1", markerA, "r0"))
			if _, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: st.Token, Run: board.Run{ID: "r1", Card: "c1"}}); err != nil {
				t.Fatal(err)
			}
			c := e.expire("c1", st.Token)
			card, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: st.Token, RecoveryMarker: recovery, Cutoff: c.ClaimLeaseUntil, Lease: lease})
			rec := card.Token()
			if err != nil {
				t.Fatalf("ReclaimExpired: %v", err)
			}
			failed, code := board.RunFailed, board.FailureProcessOrphaned
			running := board.RunRunning
			if _, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r0", Token: rec, IfStatus: &running, Status: &failed, FailureCode: &code}); !errors.Is(err, board.ErrClaimConflict) {
				t.Errorf("recovery UpdateRun of a run the card no longer records = %v, want ErrClaimConflict", err)
			}
			if _, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: st.Token, Status: &failed}); !errors.Is(err, board.ErrClaimConflict) {
				t.Errorf("the transferred worker's UpdateRun = %v, want ErrClaimConflict", err)
			}
			got, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: rec, IfStatus: &running, Status: &failed, FailureCode: &code, Actor: "watchdog"})
			if err != nil || got.Status != failed || got.FailureCode != code {
				t.Errorf("recovery UpdateRun of the judged claim's recorded run = %s, %v; want failed with %s", fmtRun(got), err, code)
			}
		})
	})

	t.Run("PointerAtAnotherClaimsOpenRunRefused", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		tokA := e.claim("c1", markerA)
		if _, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: tokA, Run: board.Run{ID: "r1", Card: "c1", Checkpoint: "ck"}}); err != nil {
			t.Fatal(err)
		}
		e.release("c1", tokA)
		tokB := e.claim("c1", markerB)
		before := e.get("c1")
		seq := e.lastSeq()
		// r1 has no verdict (the release left it resumable) and is not
		// tokB's: stamping the pointer under tokB would make the card's
		// pointer epoch disagree with the run's, so neither tokB nor a
		// watchdog judging tokB could write it. Taking it over is Start's.
		err := e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tokB, RunID: "r1"})
		wantErr(t, err, board.ErrInvalidArgument, "SetLastRunOwned at another claim's open run")
		if err != nil && !strings.Contains(err.Error(), "use Start to resume a run") {
			t.Errorf("the refusal %q does not point at Start", err)
		}
		e.unchanged(before, "a refused SetLastRunOwned")
		e.noEventsSince(seq, "a refused SetLastRunOwned")
		// A run that has its verdict may be pointed at by any claim, and
		// the claim's own run always.
		if _, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: tokB, Run: board.Run{ID: "r2", Card: "c1"}}); err != nil {
			t.Fatal(err)
		}
		fin := board.RunFinished
		if _, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r2", Token: tokB, Status: &fin}); err != nil {
			t.Fatal(err)
		}
		if err := e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tokB, RunID: "r2"}); err != nil {
			t.Errorf("SetLastRunOwned at the claim's own run: %v", err)
		}
		e.release("c1", tokB)
		tokC := e.claim("c1", markerA)
		if err := e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tokC, RunID: "r2"}); err != nil {
			t.Errorf("SetLastRunOwned at an earlier claim's finished run: %v", err)
		}
		if c := e.get("c1"); c.LastRunID != "r2" || c.LastRunEpoch != tokC.Epoch {
			t.Errorf("pointer = %s at epoch %d, want r2 at %d", c.LastRunID, c.LastRunEpoch, tokC.Epoch)
		}
	})

	t.Run("CreateRunClosesTheRunItDisplaces", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		st := e.start(startReq("c1", markerA, "r1"))
		seq := e.lastSeq()
		if _, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: st.Token, Run: board.Run{ID: "r2", Card: "c1"}}); err != nil {
			t.Fatal(err)
		}
		if old := e.run("r1"); old.Status != board.RunCancelled || old.FailureCode != board.FailureRunSuperseded || old.Checkpoint != "step-0" {
			t.Errorf("the displaced open run = %s, want cancelled with %s, its checkpoint kept", fmtRun(old), board.FailureRunSuperseded)
		}
		wantTypes(t, e.eventsAfter(seq), "CreateRun over an open run", board.EventRunUpdated, board.EventRunCreated, board.EventLastRun)
		if c := e.get("c1"); c.LastRunID != "r2" || !slices.Equal(c.Runs, []string{"r1", "r2"}) {
			t.Errorf("card after CreateRun: last %q runs %q, want r2, [r1 r2]", c.LastRunID, c.Runs)
		}
		// A displaced run that has its verdict keeps it.
		fin := board.RunFinished
		if _, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r2", Token: st.Token, Status: &fin}); err != nil {
			t.Fatal(err)
		}
		done := e.run("r2")
		seq = e.lastSeq()
		if _, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: st.Token, Run: board.Run{ID: "r3", Card: "c1"}}); err != nil {
			t.Fatal(err)
		}
		if d := diffRuns(e.run("r2"), done); d != "" {
			t.Errorf("CreateRun changed the finished run it displaced: %s", d)
		}
		wantTypes(t, e.eventsAfter(seq), "CreateRun over a finished run", board.EventRunCreated, board.EventLastRun)
		// A refused CreateRun closes nothing.
		r3 := e.run("r3")
		stale := board.ClaimToken{Marker: markerB, Epoch: st.Token.Epoch}
		if _, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: stale, Run: board.Run{ID: "r4", Card: "c1"}}); !errors.Is(err, board.ErrClaimConflict) {
			t.Errorf("CreateRun under another marker's token = %v, want ErrClaimConflict", err)
		}
		if d := diffRuns(e.run("r3"), r3); d != "" {
			t.Errorf("a refused CreateRun changed the open run: %s", d)
		}
	})

	t.Run("ReleaseHandsTheCardBack", func(t *testing.T) {
		for _, end := range []string{"Release", "ReleaseOwned"} {
			t.Run(end, func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.card("c1", board.StateReady)
				st := e.start(startReq("c1", markerA, "r1"))
				seq := e.lastSeq()
				if end == "Release" {
					if err := e.s.Release(e.ctx, board.ReleaseParams{Card: "c1", Marker: markerA, Actor: "uid:0"}); err != nil {
						t.Fatal(err)
					}
				} else {
					e.release("c1", st.Token)
				}
				r := e.run("r1")
				if r.Status != board.RunFailedResumable || r.FailureCode != board.FailureClaimReleased {
					t.Errorf("run after %s = %s, want failed_resumable with %s", end, fmtRun(r), board.FailureClaimReleased)
				}
				c := e.get("c1")
				want := []board.EventType{board.EventRunUpdated, board.EventReleased}
				wantState := board.StateInProgress
				if e.b.Strands(board.StateInProgress) {
					// The fleet board's running column is no pool state:
					// a free card there is picked up by nobody.
					wantState = e.b.FirstPool()
					want = []board.EventType{board.EventRunUpdated, board.EventState, board.EventReleased}
				}
				if c.Claimed() || c.ClaimEpoch != st.Token.Epoch || c.State != wantState || c.StateReason != board.ReasonNone {
					t.Errorf("card after %s = %s (reason %q), want free in %s, the epoch kept", end, fmtCard(c), c.StateReason, wantState)
				}
				wantTypes(t, e.eventsAfter(seq), end+" of a Start-made claim", want...)
				// The released holder's late writes are refused by the fence.
				fin := board.RunFinished
				if _, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: st.Token, Status: &fin}); !errors.Is(err, board.ErrClaimConflict) {
					t.Errorf("the released holder's late UpdateRun = %v, want ErrClaimConflict", err)
				}
				if _, err := e.s.Finish(e.ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1", Status: board.RunFinished}); !errors.Is(err, board.ErrClaimConflict) {
					t.Errorf("the released holder's late Finish = %v, want ErrClaimConflict", err)
				}
				// The card is where the next worker finds it.
				r2 := startReq("", markerB, "r2")
				r2.Next = true
				if got := e.start(r2); got.Card.ID != "c1" {
					t.Errorf("Start next after %s took %q, want c1", end, got.Card.ID)
				}
			})
		}
		t.Run("RecoveryClaimClosesNoRun", func(t *testing.T) {
			t.Parallel()
			e := open(t, h)
			e.card("c1", board.StateReady)
			st := e.start(startReq("c1", markerA, "r1"))
			c := e.expire("c1", st.Token)
			card, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: "c1", Prev: st.Token, RecoveryMarker: recovery, Cutoff: c.ClaimLeaseUntil, Lease: lease})
			rec := card.Token()
			if err != nil {
				t.Fatalf("ReclaimExpired: %v", err)
			}
			e.setState("c1", e.b.FirstPool())
			before := e.run("r1")
			e.release("c1", rec)
			if d := diffRuns(e.run("r1"), before); d != "" {
				t.Errorf("the release of a recovery claim changed the run: %s", d)
			}
			if c := e.get("c1"); c.Claimed() || c.State != e.b.FirstPool() {
				t.Errorf("card after the recovery claim's release = %s, want free in %s", fmtCard(c), e.b.FirstPool())
			}
		})
	})

	t.Run("RacingLifecycles", func(t *testing.T) { raceLifecycles(t, h) })
}

// raceLifecycles races Start, Finish, Release and ReclaimExpired on a few
// cards from many goroutines, then checks the log: at every point at most
// one run without a final verdict per card, every worker claim followed in
// the same write by its run and pointer, and exactly as many claims,
// releases-by-Finish and run creations as the calls that succeeded — so a
// refused call wrote nothing.
func raceLifecycles(t *testing.T, h Harness) {
	e := open(t, h)
	cards := []string{"c1", "c2", "c3"}
	for _, id := range cards {
		e.card(id, board.StateReady)
	}
	const workers, rounds = 6, 40
	var (
		mu                        sync.Mutex
		starts, created, finishes int
		reclaims                  int
		wg                        sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			marker := fmt.Sprintf("worker-%c-%d", 'a'+w, 100+w)
			var mine *board.StartResult
			for i := range rounds {
				id := cards[rng.IntN(len(cards))]
				switch op := rng.IntN(10); {
				case op < 4 && mine == nil:
					r := startReq(id, marker, fmt.Sprintf("r-%d-%d", w, i))
					r.Fresh = rng.IntN(4) == 0
					st, err := e.s.Start(e.ctx, r)
					if err == nil {
						mine = &st
						mu.Lock()
						starts++
						if !st.Resumed {
							created++
						}
						mu.Unlock()
					}
				case op < 7 && mine != nil:
					status := []board.RunStatus{board.RunFinished, board.RunFailedResumable, board.RunFailedResumable}[rng.IntN(3)]
					_, err := e.s.Finish(e.ctx, board.FinishParams{Card: mine.Card.ID, Token: mine.Token, RunID: mine.Run.ID, Status: status})
					if err == nil {
						mu.Lock()
						finishes++
						mu.Unlock()
					}
					mine = nil
				case op < 8:
					if c, err := e.s.GetCard(e.ctx, board.GetCardParams{ID: id}); err == nil && c.Claimed() {
						_ = e.s.Release(e.ctx, board.ReleaseParams{Card: id, Marker: c.Claim, Actor: "uid:0"})
					}
				case op < 9:
					c, err := e.s.GetCard(e.ctx, board.GetCardParams{ID: id})
					if err != nil || !c.Claimed() {
						continue
					}
					if err := e.s.ExpireClaimOwned(e.ctx, board.OwnedParams{Card: id, Token: c.Token()}); err != nil {
						continue
					}
					if c, err = e.s.GetCard(e.ctx, board.GetCardParams{ID: id}); err != nil || !c.Claimed() {
						continue
					}
					if _, err := e.s.ReclaimExpired(e.ctx, board.ReclaimExpiredParams{Card: id, Prev: c.Token(), RecoveryMarker: board.RecoveryMarker(marker), Cutoff: c.ClaimLeaseUntil, Lease: lease}); err == nil {
						mu.Lock()
						reclaims++
						mu.Unlock()
					}
				default:
					if c, err := e.s.GetCard(e.ctx, board.GetCardParams{ID: id}); err == nil && e.b.IsTerminal(c.State) {
						_ = e.s.Reopen(e.ctx, board.MoveParams{Card: id, From: c.State, To: board.StateReady, Actor: "uid:0"})
					}
				}
			}
		}()
	}
	wg.Wait()

	evs := e.allEvents()
	open := map[string]map[string]bool{} // card → runs without a final verdict
	var claimed, runCreated, finishReleases int
	for i, ev := range evs {
		switch ev.Type {
		case board.EventClaimed:
			claimed++
			if board.IsRecoveryMarker(ev.Data.Marker) {
				continue
			}
			// A worker claim here only comes from Start: its run (after
			// the run a fresh Start supersedes) and its pointer are the
			// card's next events.
			next := cardEvents(evs[i+1:], ev.Card, 3)
			j := 0
			for j < len(next) && j < 2 && (next[j].Type == board.EventRunCreated || next[j].Type == board.EventRunUpdated) {
				j++
			}
			if j == 0 || j >= len(next) || next[j].Type != board.EventLastRun {
				t.Errorf("claim #%d of %s by %s is not followed by its run and pointer: %s", ev.Seq, ev.Card, ev.Data.Marker, fmtEvents(next))
			}
		case board.EventRunCreated, board.EventRunUpdated:
			if ev.Type == board.EventRunCreated {
				runCreated++
			}
			if open[ev.Card] == nil {
				open[ev.Card] = map[string]bool{}
			}
			if board.RunStatus(ev.Data.Status).Final() {
				delete(open[ev.Card], ev.Data.RunID)
			} else {
				open[ev.Card][ev.Data.RunID] = true
			}
			if n := len(open[ev.Card]); n > 1 {
				t.Errorf("after event #%d card %s has %d runs without a verdict: %v", ev.Seq, ev.Card, n, open[ev.Card])
			}
		case board.EventReleased:
			if ev.Actor != "uid:0" {
				finishReleases++
			}
		}
	}
	if claimed != starts+reclaims {
		t.Errorf("log holds %d claims, want %d (%d Starts + %d reclaims succeeded): a refused call wrote", claimed, starts+reclaims, starts, reclaims)
	}
	if runCreated != created {
		t.Errorf("log holds %d run creations, want %d (the Starts that did not resume)", runCreated, created)
	}
	if finishReleases != finishes {
		t.Errorf("log holds %d releases by a holder, want %d (the Finishes that succeeded)", finishReleases, finishes)
	}
	if starts == 0 || finishes == 0 {
		t.Errorf("the race exercised too little: %d Starts, %d Finishes", starts, finishes)
	}
}

// cardEvents returns the first n events of card in evs.
func cardEvents(evs []board.Event, card string, n int) []board.Event {
	var out []board.Event
	for _, ev := range evs {
		if ev.Card == card {
			out = append(out, ev)
			if len(out) == n {
				break
			}
		}
	}
	return out
}
