package boardtest

import (
	"slices"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

func exerciseEvents(t *testing.T, h Harness) {
	t.Run("EveryWriteLogsItsEvent", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		var tok board.ClaimToken
		steps := []struct {
			name string
			do   func() error
			want board.EventType
			card string
		}{
			{"CreateCard", func() error {
				_, err := e.s.CreateCard(e.ctx, board.CreateCardParams{ID: "c1", Actor: "cli"})
				return err
			}, board.EventCardCreated, "c1"},
			{"Claim", func() (err error) {
				c, err := e.s.Claim(e.ctx, board.ClaimParams{Card: "c1", Marker: markerA, Lease: lease})
				tok = c.Token()
				return err
			}, board.EventClaimed, "c1"},
			{"SetStateOwned", func() error {
				// Not the running column: a release files a card out of
				// the fleet's, which is a second event (see Lifecycle).
				_, err := e.s.SetStateOwned(e.ctx, board.SetStateOwnedParams{Card: "c1", Token: tok, To: board.StateAwaitingInput})
				return err
			}, board.EventState, "c1"},
			{"CreateRun", func() error {
				_, err := e.s.CreateRun(e.ctx, board.CreateRunParams{Token: tok, Run: board.Run{ID: "r1", Card: "c1", Status: board.RunRunning}})
				return err
			}, board.EventRunCreated, "c1"},
			{"SetLastRunOwned", func() error {
				return e.s.SetLastRunOwned(e.ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tok, RunID: "r0"})
			}, board.EventLastRun, "c1"},
			{"SetAwaitingInputOwned", func() error {
				return e.s.SetAwaitingInputOwned(e.ctx, board.SetAwaitingInputOwnedParams{Card: "c1", Token: tok, Awaiting: true})
			}, board.EventAwaitingInput, "c1"},
			{"UpdateRun", func() error {
				st := board.RunFinished
				_, err := e.s.UpdateRun(e.ctx, board.UpdateRunParams{ID: "r1", Token: tok, Status: &st})
				return err
			}, board.EventRunUpdated, "c1"},
			{"SetGaveUpOwned", func() error {
				return e.s.SetGaveUpOwned(e.ctx, board.SetGaveUpOwnedParams{Card: "c1", Token: tok, GaveUp: &board.GaveUp{Reason: "test", At: e.clock.Now()}})
			}, board.EventGaveUp, "c1"},
			{"AdjustLabels", func() error {
				_, err := e.s.AdjustLabels(e.ctx, board.AdjustLabelsParams{Card: "c1", Add: []string{"l"}, Actor: "bot"})
				return err
			}, board.EventLabels, "c1"},
			{"SetLabels", func() error {
				_, err := e.s.SetLabels(e.ctx, board.SetLabelsParams{Card: "c1", Labels: []string{"m"}, Actor: "bot"})
				return err
			}, board.EventLabels, "c1"},
			{"ReleaseOwned", func() error { return e.s.ReleaseOwned(e.ctx, board.OwnedParams{Card: "c1", Token: tok}) }, board.EventReleased, "c1"},
			{"SetState", func() error {
				return e.s.SetState(e.ctx, board.MoveParams{Card: "c1", To: board.StateBacklog, Actor: "uid:0"})
			}, board.EventState, "c1"},
			{"SetStateFrom", func() error {
				_, err := e.s.SetStateFrom(e.ctx, board.MoveParams{Card: "c1", From: board.StateBacklog, To: board.StateDone, Actor: "bot"})
				return err
			}, board.EventState, "c1"},
			{"Reopen", func() error {
				return e.s.Reopen(e.ctx, board.MoveParams{Card: "c1", To: board.StateReady, Actor: "uid:0"})
			}, board.EventState, "c1"},
			{"ClaimThenRelease", func() error {
				if _, err := e.s.Claim(e.ctx, board.ClaimParams{Card: "c1", Marker: markerB, Lease: lease}); err != nil {
					return err
				}
				return e.s.Release(e.ctx, board.ReleaseParams{Card: "c1", Marker: markerB, Actor: "uid:0"})
			}, "", "c1"},
		}
		prev := int64(0)
		for _, st := range steps {
			e.clock.Advance(time.Second)
			seq := e.lastSeq()
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			evs := e.eventsAfter(seq)
			if st.name == "CreateRun" {
				// A fenced run start points the card at the run in the
				// same write.
				if len(evs) != 2 || evs[0].Type != board.EventRunCreated || evs[1].Type != board.EventLastRun || evs[1].Card != st.card {
					t.Errorf("%s logged %s, want run_created then last_run for %s", st.name, fmtEvents(evs), st.card)
				}
			} else if st.want == "" {
				if len(evs) != 2 || evs[0].Type != board.EventClaimed || evs[1].Type != board.EventReleased {
					t.Errorf("%s logged %s, want claimed then released", st.name, fmtEvents(evs))
				}
			} else if len(evs) != 1 || evs[0].Type != st.want || evs[0].Card != st.card {
				t.Errorf("%s logged %s, want one %q event for %s", st.name, fmtEvents(evs), st.want, st.card)
			}
			for _, ev := range evs {
				if ev.Seq <= prev {
					t.Errorf("%s: event seq %d after %d, want strictly increasing", st.name, ev.Seq, prev)
				}
				prev = ev.Seq
				if ev.At.IsZero() {
					t.Errorf("%s: event #%d has no time", st.name, ev.Seq)
				}
				if e.local() && !ev.At.Equal(e.clock.Now()) {
					t.Errorf("%s: event at %s, want the clock's %s", st.name, fmtTime(ev.At), fmtTime(e.clock.Now()))
				}
			}
		}
	})

	t.Run("ActorRecordedAndBlankedForMachineReasons", func(t *testing.T) {
		for _, r := range append(board.MachineReasons(), board.ReasonNone, board.ReasonUnblocked, board.ReasonRunFinished) {
			t.Run("Reason="+string(r), func(t *testing.T) {
				t.Parallel()
				e := open(t, h)
				e.card("c1", board.StateReady)
				seq := e.lastSeq()
				if err := e.s.SetState(e.ctx, board.MoveParams{Card: "c1", To: board.StateBacklog, Reason: r, Actor: "uid:1000"}); err != nil {
					t.Fatal(err)
				}
				ev := e.oneEventSince(seq, board.EventState, "SetState")
				if ev.Reason != r {
					t.Errorf("event reason = %q, want %q", ev.Reason, r)
				}
				want := "uid:1000"
				if board.IsMachineReason(r) {
					want = ""
				}
				if ev.Actor != want {
					t.Errorf("event actor = %q, want %q", ev.Actor, want)
				}
				if c := e.get("c1"); c.StateReason != r {
					t.Errorf("state_reason = %q, want %q", c.StateReason, r)
				}
			})
		}
	})

	t.Run("MachineReasonFromSetStateFromBlanksActor", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("c1", board.StateReady)
		seq := e.lastSeq()
		if _, err := e.s.SetStateFrom(e.ctx, board.MoveParams{Card: "c1", From: board.StateReady, To: board.StateBacklog, Reason: board.ReasonStateRename, Actor: "bot"}); err != nil {
			t.Fatal(err)
		}
		if ev := e.oneEventSince(seq, board.EventState, "SetStateFrom"); ev.Actor != "" || ev.Reason != board.ReasonStateRename {
			t.Errorf("event actor %q reason %q, want blank actor, reason state_rename", ev.Actor, ev.Reason)
		}
	})

	t.Run("Paging", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		for i := range 7 {
			e.card(string(rune('a'+i)), board.StateReady)
		}
		all := e.allEvents()
		if len(all) != 7 {
			t.Fatalf("events after 7 creations = %d, want 7: %s", len(all), fmtEvents(all))
		}
		var paged []board.Event
		after := int64(0)
		for range 10 {
			page, err := e.s.Events(e.ctx, board.EventsParams{After: after, Limit: 3})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > 3 {
				t.Fatalf("Events(%d, 3) returned %d events", after, len(page))
			}
			if len(page) == 0 {
				break
			}
			paged = append(paged, page...)
			after = page[len(page)-1].Seq
		}
		if got, want := seqs(paged), seqs(all); !slices.Equal(got, want) {
			t.Errorf("paged seqs = %v, want %v", got, want)
		}
		if !slices.IsSorted(seqs(all)) || len(slices.Compact(seqs(all))) != len(all) {
			t.Errorf("seqs %v not strictly increasing", seqs(all))
		}
		mid := all[3].Seq
		rest, err := e.s.Events(e.ctx, board.EventsParams{After: mid, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := seqs(rest), seqs(all[4:]); !slices.Equal(got, want) {
			t.Errorf("Events(after %d) seqs = %v, want %v", mid, got, want)
		}
		if tail, err := e.s.Events(e.ctx, board.EventsParams{After: all[len(all)-1].Seq, Limit: 100}); err != nil || len(tail) != 0 {
			t.Errorf("Events after the newest = %s, %v; want none", fmtEvents(tail), err)
		}
	})
}

func seqs(evs []board.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Seq
	}
	return out
}
