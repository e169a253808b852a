package boardtest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

func exerciseRuns(t *testing.T, h Harness) {
	t.Run("CreateGetUpdate", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		tok := e.claim("c1", markerA)
		seq := e.lastSeq()

		in := board.Run{ID: "r1", Card: "c1", Status: board.RunRunning, Continuation: board.ContinuationNone,
			Owner: tok.Marker, Epoch: tok.Epoch, Host: "worker-a", PID: 101, PIDStart: 1_700_000_000_000,
			PIDStartTicks: 4_200_017, BootID: "6e1f3c2a-9b7d-4e51-8c3f-2d9a0b1c4e7f"}
		created, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: tok, Run: in})
		if err != nil {
			t.Fatalf("CreateRun: %v", err)
		}
		evs := e.eventsAfter(seq)
		if len(evs) != 2 || evs[0].Type != board.EventRunCreated || evs[1].Type != board.EventLastRun {
			t.Fatalf("CreateRun logged %s, want run_created then last_run", fmtEvents(evs))
		}
		if ev := evs[0]; ev.Card != "c1" || ev.Data.RunID != "r1" {
			t.Errorf("run_created event = card %q run %q, want c1 r1", ev.Card, ev.Data.RunID)
		}
		got, err := e.s.GetRun(e.ctx, board.GetRunParams{ID: "r1"})
		if err != nil {
			t.Fatalf("GetRun: %v", err)
		}
		if d := diffRuns(got, created); d != "" {
			t.Errorf("GetRun differs from what CreateRun returned: %s", d)
		}
		want := in
		want.CreatedAt, want.UpdatedAt = got.CreatedAt, got.UpdatedAt
		if d := diffRuns(got, want); d != "" {
			t.Errorf("stored run differs from the input: %s", d)
		}
		if got.CreatedAt.IsZero() {
			t.Errorf("run created_at is zero, want stamped")
		}
		if c := e.get("c1"); !slices.Contains(c.Runs, "r1") || c.LastRunID != "r1" || c.LastRunEpoch != tok.Epoch {
			t.Errorf("card runs = %q, last run %q epoch %d; want the new run r1 recorded and pointed at under epoch %d", c.Runs, c.LastRunID, c.LastRunEpoch, tok.Epoch)
		}

		e.clock.Advance(time.Second)
		seq = e.lastSeq()
		status, code, cp := board.RunFailedResumable, board.FailureProcessOrphaned, "step-7"
		cont := board.ContinuationRetryArmed
		running := board.RunRunning
		upd, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: tok, IfStatus: &running, Status: &status, FailureCode: &code, Checkpoint: &cp, Continuation: &cont, Actor: "reaper"})
		if err != nil {
			t.Fatalf("UpdateRun with a matching IfStatus: %v", err)
		}
		if upd.Status != status || upd.FailureCode != code || upd.Checkpoint != cp || upd.Continuation != cont || upd.Owner != tok.Marker {
			t.Errorf("UpdateRun result = %+v, want status %s code %s checkpoint %s continuation %s, owner kept", upd, status, code, cp, cont)
		}
		if got, _ := e.s.GetRun(e.ctx, board.GetRunParams{ID: "r1"}); diffRuns(got, upd) != "" {
			t.Errorf("stored run after UpdateRun differs from the result: %s", diffRuns(got, upd))
		}
		e.oneEventSince(seq, board.EventRunUpdated, "UpdateRun")

		// Nil fields are left alone.
		fin := board.RunFinished
		upd2, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: tok, Status: &fin})
		if err != nil || upd2.Status != fin || upd2.Checkpoint != cp || upd2.FailureCode != code {
			t.Errorf("UpdateRun of the status only = %+v, %v; want status finished, other fields kept", upd2, err)
		}
	})

	t.Run("UpdateRunIfStatusMismatchIsRefused", func(t *testing.T) {
		// The liveness oracle relies on this CAS: a late "finished" from a
		// living owner must never be overwritten by PROCESS_ORPHANED.
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		tok := e.claim("c1", markerA)
		if _, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "r1", Card: "c1", Status: board.RunFinished}}); err != nil {
			t.Fatal(err)
		}
		before, _ := e.s.GetRun(e.ctx, board.GetRunParams{ID: "r1"})
		e.clock.Advance(time.Second)
		seq := e.lastSeq()
		running, failed, code := board.RunRunning, board.RunFailed, board.FailureProcessOrphaned
		_, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: tok, IfStatus: &running, Status: &failed, FailureCode: &code})
		if err == nil {
			t.Fatalf("UpdateRun with IfStatus running on a finished run: nil error, want a refusal")
		}
		if errors.Is(err, board.ErrNotFound) {
			t.Errorf("UpdateRun CAS mismatch reported %v, want a refusal, not not-found", err)
		}
		after, _ := e.s.GetRun(e.ctx, board.GetRunParams{ID: "r1"})
		if d := diffRuns(after, before); d != "" {
			t.Errorf("a refused UpdateRun changed the run: %s", d)
		}
		e.noEventsSince(seq, "a refused UpdateRun")
	})

	t.Run("UnknownRunIsNotFound", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		_, err := e.s.GetRun(e.ctx, board.GetRunParams{ID: "nope"})
		wantErr(t, err, board.ErrNotFound, "GetRun of an unknown run")
		st := board.RunFailed
		seq := e.lastSeq()
		_, err = e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "nope", Token: board.ClaimToken{Marker: markerA, Epoch: 1}, Status: &st})
		wantErr(t, err, board.ErrNotFound, "UpdateRun of an unknown run")
		e.noEventsSince(seq, "UpdateRun of an unknown run")
	})

	t.Run("CreateRunBadInput", func(t *testing.T) {
		cases := []struct {
			name string
			run  board.Run
			want error
		}{
			{"UnknownCard", board.Run{ID: "r2", Card: "ghost", Status: board.RunRunning}, board.ErrNotFound},
			{"DuplicateID", board.Run{ID: "r1", Card: "c1", Status: board.RunRunning}, board.ErrInvalidArgument},
			{"EmptyID", board.Run{ID: "", Card: "c1", Status: board.RunRunning}, board.ErrInvalidArgument},
			{"UnknownStatus", board.Run{ID: "r2", Card: "c1", Status: "exploded"}, board.ErrInvalidArgument},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.card("c1", board.StateReady)
				tok := e.claim("c1", markerA)
				if _, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "r1", Card: "c1", Status: board.RunRunning}}); err != nil {
					t.Fatal(err)
				}
				before := e.get("c1")
				seq := e.lastSeq()
				_, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: tok, Run: tc.run})
				wantErr(t, err, tc.want, "CreateRun "+tc.name)
				e.unchanged(before, "a refused CreateRun")
				e.noEventsSince(seq, "a refused CreateRun")
			})
		}
	})
}

func diffRuns(got, want board.Run) string {
	g, w := got, want
	if !g.CreatedAt.Equal(w.CreatedAt) || !g.UpdatedAt.Equal(w.UpdatedAt) {
		return "timestamps: got created " + fmtTime(g.CreatedAt) + " updated " + fmtTime(g.UpdatedAt) +
			", want created " + fmtTime(w.CreatedAt) + " updated " + fmtTime(w.UpdatedAt)
	}
	g.CreatedAt, g.UpdatedAt, w.CreatedAt, w.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if g != w {
		return "got " + fmtRun(g) + ", want " + fmtRun(w)
	}
	return ""
}

func fmtRun(r board.Run) string {
	return "{id " + r.ID + " card " + r.Card + " status " + string(r.Status) + " continuation " + string(r.Continuation) +
		" failure " + r.FailureCode + " checkpoint " + r.Checkpoint + " owner " + r.Owner + "}"
}
