package boardtest

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
)

// wantWaiting fails unless err refuses a claim of a card waiting on its
// blockers (board.ErrWaitingOnBlockers, which is a transition refusal),
// naming every outstanding blocker in the message and none of the
// complete ones.
func wantWaiting(t *testing.T, err error, outstanding, complete []string, what string) {
	t.Helper()
	if !errors.Is(err, board.ErrWaitingOnBlockers) || !errors.Is(err, board.ErrTransitionRejected) {
		t.Errorf("%s: got error %v, want ErrWaitingOnBlockers (wrapping ErrTransitionRejected)", what, err)
		return
	}
	for _, id := range outstanding {
		if !strings.Contains(err.Error(), `"`+id+`"`) {
			t.Errorf("%s: refusal %q does not name the outstanding blocker %q", what, err, id)
		}
	}
	for _, id := range complete {
		if strings.Contains(err.Error(), `"`+id+`"`) {
			t.Errorf("%s: refusal %q names %q, which is complete", what, err, id)
		}
	}
}

// exerciseBlockers pins what a claim by id means for the column the card
// is in (DESIGN.md#lifecycle-refusals): a card waiting in waiting_deps on
// its blockers is refused, naming them, and nothing is written; a card in
// any other working column is the caller's to take.
func exerciseBlockers(t *testing.T, h Harness) {
	t.Run("ClaimByIDOfAWaitingCardIsRefused", func(t *testing.T) {
		t.Parallel()
		e := open(t, h)
		e.card("done1", board.StateDone)
		e.card("open1", board.StateReady)
		e.card("open2", board.StateBacklog)
		d := e.create(board.CreateCardParams{ID: "d", DependsOn: []string{"done1", "open1", "open2"}})
		if d.State != board.StateWaitingDeps {
			t.Fatalf("a card with open blockers was created in %q, want waiting_deps", d.State)
		}
		seq := e.lastSeq()

		_, err := e.s.Claim(e.ctx, board.ClaimParams{Card: "d", Marker: markerA, Lease: lease})
		wantWaiting(t, err, []string{"open1", "open2"}, []string{"done1"}, "Claim of a card waiting on its blockers")
		e.unchanged(d, "a refused Claim")
		e.noEventsSince(seq, "a refused Claim")

		err = e.refusedStart(startReq("d", markerA, "r1"), board.ErrWaitingOnBlockers, "Start of a card waiting on its blockers")
		wantWaiting(t, err, []string{"open1", "open2"}, []string{"done1"}, "Start of a card waiting on its blockers")
		fresh := startReq("d", markerB, "r2")
		fresh.Fresh = true
		e.refusedStart(fresh, board.ErrWaitingOnBlockers, "a fresh Start of a card waiting on its blockers")

		// One blocker done: the refusal names only the other.
		e.setState("open1", board.StateDone)
		_, err = e.s.Claim(e.ctx, board.ClaimParams{Card: "d", Marker: markerA, Lease: lease})
		wantWaiting(t, err, []string{"open2"}, []string{"done1", "open1"}, "Claim with one blocker left")

		// The last one done: d is promoted, and a claim by id takes it.
		e.setState("open2", board.StateDone)
		if got := e.get("d").State; got != e.b.FirstPool() {
			t.Fatalf("d after its last blocker completed is in %q, want promoted to %q", got, e.b.FirstPool())
		}
		st := e.start(startReq("d", markerA, "r3"))
		if st.Card.State != board.StateInProgress || st.Card.Claim != markerA {
			t.Errorf("Start of the promoted card: %s claimed by %q, want in_progress under %s", st.Card.State, st.Card.Claim, markerA)
		}
	})

	t.Run("ParkedInWaitingDepsWithNothingOutstanding", func(t *testing.T) {
		// An operator may park a card in waiting_deps whose blockers are
		// all complete: the column still gates a claim by id, and the
		// refusal says how to let it out.
		t.Parallel()
		e := open(t, h)
		e.card("b", board.StateDone)
		e.create(board.CreateCardParams{ID: "d", DependsOn: []string{"b"}})
		e.setState("d", board.StateWaitingDeps)
		d := e.get("d")
		seq := e.lastSeq()
		_, err := e.s.Claim(e.ctx, board.ClaimParams{Card: "d", Marker: markerA, Lease: lease})
		wantWaiting(t, err, nil, []string{"b"}, "Claim of a card parked in waiting_deps")
		if err != nil && !strings.Contains(err.Error(), "no blocker is outstanding") {
			t.Errorf("refusal %q does not say that no blocker is outstanding", err)
		}
		e.unchanged(d, "a refused Claim")
		e.noEventsSince(seq, "a refused Claim")
	})

	t.Run("ClaimByIDTakesAnyOtherWorkingColumn", func(t *testing.T) {
		// Outside the pool, a card is claimed by naming it: backlog,
		// awaiting_input, and a dependent an operator moved out of
		// waiting_deps before its blocker completed (the operator's call,
		// as ClaimNext would take it from the pool too).
		t.Parallel()
		e := open(t, h)
		e.card("open", board.StateReady)
		e.create(board.CreateCardParams{ID: "let-go", DependsOn: []string{"open"}})
		e.setState("let-go", board.StateReady)
		e.card("back", board.StateBacklog)
		e.card("asking", board.StateAwaitingInput)
		for _, id := range []string{"back", "let-go"} {
			if _, err := e.s.Claim(e.ctx, board.ClaimParams{Card: id, Marker: markerA, Lease: lease}); err != nil {
				t.Errorf("Claim of %s (in %s): %v", id, e.get(id).State, err)
			}
		}
		if st, err := e.s.Start(e.ctx, startReq("asking", markerB, "r1")); err != nil {
			t.Errorf("Start of a card in awaiting_input: %v", err)
		} else if st.Card.State != board.StateInProgress {
			t.Errorf("Start of a card in awaiting_input left it in %s, want in_progress", st.Card.State)
		}
	})

	t.Run("AHeldCardMovedIntoWaitingDeps", func(t *testing.T) {
		// The rule is about taking a card: its holder's idempotent
		// re-claim still refreshes the lease, and anyone else is told who
		// holds it.
		t.Parallel()
		e := open(t, h)
		e.card("b", board.StateReady)
		e.create(board.CreateCardParams{ID: "d", DependsOn: []string{"b"}})
		e.setState("d", board.StateReady)
		tok := e.claim("d", markerA)
		e.setState("d", board.StateWaitingDeps)
		if again := e.claim("d", markerA); again != tok {
			t.Errorf("the holder's re-claim = %+v, want its token %+v", again, tok)
		}
		_, err := e.s.Claim(e.ctx, board.ClaimParams{Card: "d", Marker: markerB, Lease: lease})
		wantConflict(t, err, markerA, tok.Epoch, "Claim by another marker of a held card in waiting_deps")
	})
}
