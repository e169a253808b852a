package lease_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/lease"
)

// prunedRuns is a store that no longer holds some runs its cards name,
// as after a prune.
type prunedRuns struct {
	board.Store
	gone map[string]bool
}

func (s prunedRuns) GetRun(ctx context.Context, p board.GetRunParams) (board.Run, error) {
	id := p.ID
	if s.gone[id] {
		return board.Run{}, board.NotFound("run", id)
	}
	return s.Store.GetRun(ctx, p)
}

// TestListRuns: runs newest first, one card's or every card's, narrowed by
// status and limit; a run a card names but the store no longer holds is
// left out; a bad filter or an unknown card is refused.
func TestListRuns(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, heartbeat.ModeKeepalive)
	w := lease.Worker{Marker: "hosta-4242", Owner: heartbeat.Owner{KeepaliveID: "hosta-4242"}}
	for _, id := range []string{"c1", "c2"} {
		if _, err := r.s.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateReady}); err != nil {
			t.Fatal(err)
		}
	}
	// c1: run-1 finished, then run-2 (fresh) running; c2: run-3 running.
	for _, st := range []struct {
		card, run string
		finish    bool
	}{{"c1", "run-1", true}, {"c1", "run-2", false}, {"c2", "run-3", false}} {
		s, err := r.svc.Start(ctx, w, apitype.StartRequest{Card: st.card, RunID: st.run, Fresh: true})
		if err != nil {
			t.Fatal(err)
		}
		if st.finish {
			if _, err := r.svc.Finish(ctx, w, st.card, apitype.FinishRequest{Fenced: apitype.Fenced{Epoch: s.Token.Epoch}, RunID: st.run, Status: board.RunFinished}); err != nil {
				t.Fatal(err)
			}
			if _, err := r.svc.Reopen(ctx, "uid:0", st.card, board.StateReady, ""); err != nil {
				t.Fatal(err)
			}
		}
		r.clk.Advance(time.Second)
	}
	ids := func(f lease.RunFilter) []string {
		t.Helper()
		runs, err := r.svc.ListRuns(ctx, f)
		if err != nil {
			t.Fatalf("ListRuns(%+v): %v", f, err)
		}
		out := []string{}
		for _, run := range runs {
			out = append(out, run.ID)
		}
		return out
	}
	for _, tc := range []struct {
		f    lease.RunFilter
		want []string
	}{
		{lease.RunFilter{}, []string{"run-3", "run-2", "run-1"}},
		{lease.RunFilter{Card: "c1"}, []string{"run-2", "run-1"}},
		{lease.RunFilter{Status: board.RunRunning}, []string{"run-3", "run-2"}},
		{lease.RunFilter{Status: board.RunFinished}, []string{"run-1"}},
		{lease.RunFilter{Limit: 1}, []string{"run-3"}},
		{lease.RunFilter{Card: "c1", Status: board.RunFailed}, []string{}},
	} {
		if got := ids(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("ListRuns(%+v) = %v, want %v", tc.f, got, tc.want)
		}
	}

	for _, f := range []lease.RunFilter{{Status: "done"}, {Limit: -1}, {Limit: lease.MaxRunsLimit + 1}} {
		if _, err := r.svc.ListRuns(ctx, f); !errors.Is(err, board.ErrInvalidArgument) {
			t.Errorf("ListRuns(%+v) = %v, want ErrInvalidArgument", f, err)
		}
	}
	if _, err := r.svc.ListRuns(ctx, lease.RunFilter{Card: "nope"}); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("ListRuns of an unknown card = %v, want ErrNotFound", err)
	}

	// A pruned run is left out, not an error.
	pruned, err := lease.New(lease.Config{Store: prunedRuns{Store: r.s, gone: map[string]bool{"run-1": true}}, Claims: r.hb, Clock: r.clk,
		Lease: func() time.Duration { return term }})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := pruned.ListRuns(ctx, lease.RunFilter{Card: "c1"})
	if err != nil || len(runs) != 1 || runs[0].ID != "run-2" {
		t.Errorf("ListRuns with run-1 pruned = %+v, %v; want run-2 alone", runs, err)
	}
}
