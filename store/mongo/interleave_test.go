package mongostore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// interleaver runs a write through a second store between a card write's
// read and its compare-and-set: once armed, just before the next
// findAndModify on the cards collection is sent.
type interleaver struct {
	armed atomic.Bool
	fn    func()
}

func (in *interleaver) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "findAndModify" {
			return
		}
		if v, err := e.Command.LookupErr("findAndModify"); err != nil || v.StringValue() != "cards" {
			return
		}
		if in.armed.CompareAndSwap(true, false) {
			in.fn()
		}
	}}
}

// before arms fn for the next card CAS.
func (in *interleaver) before(fn func()) {
	in.fn = fn
	in.armed.Store(true)
}

// interleavedPair opens two stores on one database: the first one's card
// writes can be interleaved with the second one's.
func interleavedPair(t *testing.T) (*mongostore.Store, *mongostore.Store, *interleaver) {
	t.Helper()
	in := &interleaver{}
	uri, db := mongotest.URI(t), mongotest.Database(t)
	a := openStore(t, mongostore.Options{URI: uri, Database: db, Monitor: in.monitor()})
	b := openStore(t, mongostore.Options{URI: uri, Database: db})
	return a, b, in
}

const interleavedWorker = "hosta-4242"

// An operator files a free card to a sink between Start's read and its
// CAS. The card does not move (it is in the running column already), but
// the state as read is part of the CAS all the same: Start is refused as
// on a card read in the sink, and mints nothing.
func TestStartRefusesACardFiledToASinkMidWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b, in := interleavedPair(t)
	if _, err := b.CreateCard(ctx, board.CreateCardParams{ID: "c1", State: board.StateInProgress}); err != nil {
		t.Fatal(err)
	}
	in.before(func() {
		if err := b.SetState(ctx, board.MoveParams{Card: "c1", To: board.StateDone, Actor: "uid:0"}); err != nil {
			t.Errorf("the operator's SetState: %v", err)
		}
	})
	_, err := a.Start(ctx, board.StartParams{Card: "c1", Marker: interleavedWorker, Lease: 30 * time.Second, Run: board.Run{ID: "r1"}})
	if !errors.Is(err, board.ErrTerminalStateExit) {
		t.Errorf("Start racing a filing to done = %v, want ErrTerminalStateExit", err)
	}
	c, err := b.GetCard(ctx, board.GetCardParams{ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.State != board.StateDone || c.Claimed() || c.LastRunID != "" {
		t.Errorf("card after the refused Start = %s claimed by %q last run %q, want done, free, no run", c.State, c.Claim, c.LastRunID)
	}
	if _, err := b.GetRun(ctx, board.GetRunParams{ID: "r1"}); !errors.Is(err, board.ErrNotFound) {
		t.Errorf("GetRun(r1) after the refused Start = %v, want ErrNotFound", err)
	}
}

// An operator files the first free card to a sink between Start-next's
// listing and its CAS on that card. The sink refuses a Start by id, but
// for Start-next the card is only a candidate that left the pool: it is
// passed over and the next free card is started.
func TestStartNextPassesOverACardFiledToASinkMidWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b, in := interleavedPair(t)
	for _, id := range []string{"c1", "c2"} {
		if _, err := b.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateReady}); err != nil {
			t.Fatal(err)
		}
	}
	in.before(func() {
		if err := b.SetState(ctx, board.MoveParams{Card: "c1", To: board.StateDone, Actor: "uid:0"}); err != nil {
			t.Errorf("the operator's SetState: %v", err)
		}
	})
	st, err := a.Start(ctx, board.StartParams{Next: true, Marker: interleavedWorker, Lease: 30 * time.Second, Run: board.Run{ID: "r1"}})
	if err != nil {
		t.Fatalf("Start next racing a filing of the first candidate to done = %v, want c2 started", err)
	}
	if in.armed.Load() {
		t.Fatal("no card CAS was interleaved: the case tests nothing")
	}
	if st.Card.ID != "c2" || st.Run.ID != "r1" || st.Token.Marker != interleavedWorker {
		t.Errorf("Start next = card %q run %q token %+v, want c2, r1, %s", st.Card.ID, st.Run.ID, st.Token, interleavedWorker)
	}
	c1, err := b.GetCard(ctx, board.GetCardParams{ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if c1.State != board.StateDone || c1.Claimed() || c1.LastRunID != "" {
		t.Errorf("c1 after Start next = %s claimed by %q last run %q, want done, free, no run", c1.State, c1.Claim, c1.LastRunID)
	}
}

// An operator moved the card out of the running column while its run went
// on, and moves it back between Finish's read and its CAS. A resumable
// verdict read in awaiting_input would leave the card there; the CAS on
// the state as read makes Finish decide again, on the running column, and
// file the card to the pool instead of leaving it free where nothing picks
// it up.
func TestFinishFilesACardMovedBackMidWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b, in := interleavedPair(t)
	if _, err := b.CreateCard(ctx, board.CreateCardParams{ID: "c1", State: board.StateReady}); err != nil {
		t.Fatal(err)
	}
	st, err := a.Start(ctx, board.StartParams{Card: "c1", Marker: interleavedWorker, Lease: 30 * time.Second, Run: board.Run{ID: "r1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetState(ctx, board.MoveParams{Card: "c1", To: board.StateAwaitingInput, Actor: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	in.before(func() {
		if err := b.SetState(ctx, board.MoveParams{Card: "c1", To: board.StateInProgress, Actor: "uid:0"}); err != nil {
			t.Errorf("the operator's move back: %v", err)
		}
	})
	if _, err := a.Finish(ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1", Status: board.RunFailedResumable}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	c, err := b.GetCard(ctx, board.GetCardParams{ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Claimed() || c.State != board.StateReady {
		t.Errorf("card after Finish = %s claimed by %q, want free in ready (filed out of the running column)", c.State, c.Claim)
	}
	if r, err := b.GetRun(ctx, board.GetRunParams{ID: "r1"}); err != nil || r.Status != board.RunFailedResumable {
		t.Errorf("run after Finish = %+v, %v; want failed_resumable", r, err)
	}
}

// A Start that means to supersede the card's recorded run archives it,
// closed, before its CAS; when the CAS is refused (another worker claimed
// the card in between) the run stays embedded, unchanged. The closed copy
// must not become the run's state when a later write displaces the run as
// it is: the run then reads as the card held it, and as the event log
// last said, not cancelled by a Start that never happened.
func TestRefusedSupersedeDoesNotShadowTheRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b, in := interleavedPair(t)
	if _, err := b.CreateCard(ctx, board.CreateCardParams{ID: "c1", State: board.StateReady}); err != nil {
		t.Fatal(err)
	}
	st, err := b.Start(ctx, board.StartParams{Card: "c1", Marker: interleavedWorker, Lease: 30 * time.Second, Run: board.Run{ID: "r1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Finish(ctx, board.FinishParams{Card: "c1", Token: st.Token, RunID: "r1", Status: board.RunFailedResumable}); err != nil {
		t.Fatal(err)
	}
	var tokB board.ClaimToken
	in.before(func() {
		var err error
		c, err := b.Claim(ctx, board.ClaimParams{Card: "c1", Marker: "hostb-777", Lease: 30 * time.Second})
		if err != nil {
			t.Errorf("the other worker's Claim: %v", err)
		}
		tokB = c.Token()
	})
	if _, err := a.Start(ctx, board.StartParams{Card: "c1", Marker: "hostc-888", Lease: 30 * time.Second, Run: board.Run{ID: "r2"}}); !errors.Is(err, board.ErrClaimConflict) {
		t.Fatalf("Start racing a Claim = %v, want ErrClaimConflict", err)
	}
	if r, err := b.GetRun(ctx, board.GetRunParams{ID: "r1"}); err != nil || r.Status != board.RunFailedResumable {
		t.Fatalf("r1 after the refused Start = %+v, %v; want failed_resumable", r, err)
	}
	// The holder points the card elsewhere and starts a run: r1 is
	// displaced as it is.
	if err := b.SetLastRunOwned(ctx, board.SetLastRunOwnedParams{Card: "c1", Token: tokB, RunID: "r-elsewhere"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateRun(ctx, board.CreateRunParams{Token: tokB, Run: board.Run{ID: "r3", Card: "c1"}}); err != nil {
		t.Fatal(err)
	}
	r1, err := b.GetRun(ctx, board.GetRunParams{ID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Status != board.RunFailedResumable || r1.FailureCode == board.FailureRunSuperseded {
		t.Errorf("r1 after its displacement = %s/%s, want failed_resumable as the card held it (the supersede was refused)", r1.Status, r1.FailureCode)
	}
	evs, err := b.Events(ctx, board.EventsParams{After: 0, Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Data.RunID == "r1" && ev.Data.Status == string(board.RunCancelled) {
			t.Errorf("the log records r1 cancelled (%+v) though no write that cancelled it landed", ev)
		}
	}
}

// beforeMove arms fn for the next card CAS that moves card id (a
// findAndModify on it whose update sets its state).
func (in *interleaver) beforeMove(id string, fn func()) *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "findAndModify" {
			return
		}
		if v, err := e.Command.LookupErr("query", "_id"); err != nil || v.StringValue() != id {
			return
		}
		if _, err := e.Command.LookupErr("update", "$set", "state"); err != nil {
			return
		}
		if in.armed.CompareAndSwap(true, false) {
			fn()
		}
	}}
}

// movePair is interleavedPair with fn run just before the first store's
// next move of card id.
func movePair(t *testing.T, id string) (*mongostore.Store, *mongostore.Store, *interleaver) {
	t.Helper()
	in := &interleaver{}
	uri, db := mongotest.URI(t), mongotest.Database(t)
	a := openStore(t, mongostore.Options{URI: uri, Database: db, Monitor: in.beforeMove(id, func() { in.fn() })})
	b := openStore(t, mongostore.Options{URI: uri, Database: db})
	return a, b, in
}

// A Reopen and a promotion exclude each other (DESIGN.md#reopen-promotion).
// D waits on B and C. Each case runs the other operator's write in the
// window between one side's reads and its compare-and-set; whichever wins,
// the board never ends with D let go while a blocker of D is back in a
// working state.
func TestReopenAndPromotionExcludeEachOther(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T, a *mongostore.Store) {
		t.Helper()
		ctx := t.Context()
		for _, nc := range []board.CreateCardParams{
			{ID: "B", State: board.StateDone}, {ID: "C", State: board.StateReady},
			{ID: "D", DependsOn: []string{"B", "C"}},
		} {
			if _, err := a.CreateCard(ctx, nc); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(t *testing.T, s *mongostore.Store) (b, d board.Card) {
		t.Helper()
		var err error
		if b, err = s.GetCard(t.Context(), board.GetCardParams{ID: "B"}); err != nil {
			t.Fatal(err)
		}
		if d, err = s.GetCard(t.Context(), board.GetCardParams{ID: "D"}); err != nil {
			t.Fatal(err)
		}
		if d.State != board.StateWaitingDeps && b.State != board.StateDone {
			t.Errorf("D is in %s (promoted by %q) while its blocker B is back in %s: the reopen guard was defeated", d.State, d.PromotedBy, b.State)
		}
		return b, d
	}

	// The promotion, made by completing C, has read D and its blockers
	// (B done) when B is reopened: the promotion must not land.
	t.Run("ReopenInsidePromotion", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		a, other, in := movePair(t, "D")
		setup(t, a)
		in.before(func() {
			if err := other.Reopen(ctx, board.MoveParams{Card: "B", To: board.StateReady, Actor: "uid:0"}); err != nil {
				t.Errorf("the operator's Reopen of B: %v", err)
			}
		})
		if err := a.SetState(ctx, board.MoveParams{Card: "C", To: board.StateDone, Actor: "uid:0"}); err != nil {
			t.Fatal(err)
		}
		if in.armed.Load() {
			t.Fatal("setup: no promotion of D was attempted")
		}
		if b, d := check(t, a); b.State != board.StateReady || d.State != board.StateWaitingDeps {
			t.Errorf("B %s, D %s; want the Reopen to land (B ready) and D to keep waiting", b.State, d.State)
		}
	})

	// The Reopen of B has checked its dependents (D waiting) when C's
	// completion promotes D: the Reopen must not land.
	t.Run("PromotionInsideReopen", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		a, other, in := movePair(t, "B")
		setup(t, a)
		in.before(func() {
			if err := other.SetState(ctx, board.MoveParams{Card: "C", To: board.StateDone, Actor: "uid:0"}); err != nil {
				t.Errorf("completing C: %v", err)
			}
		})
		err := a.Reopen(ctx, board.MoveParams{Card: "B", To: board.StateReady, Actor: "uid:0"})
		if in.armed.Load() {
			t.Fatal("setup: the Reopen never tried to move B")
		}
		b, d := check(t, a)
		if d.State == board.StateWaitingDeps {
			t.Errorf("D still waiting after C completed with B done: %+v", d)
		}
		if !errors.Is(err, board.ErrTransitionRejected) || !strings.Contains(err.Error(), `"D"`) || b.State != board.StateDone {
			t.Errorf("Reopen racing the promotion = %v, B %s; want refused naming D, B left done", err, b.State)
		}
	})
}

// A Reopen that died between holding its blocker's dependents and moving
// the blocker leaves its pending token and its holds behind. They hold
// nothing up: the next promotion of a held dependent breaks them, and the
// next Reopen of the blocker replaces the token.
func TestAReopenThatDiedHoldsNothingUp(t *testing.T) {
	t.Parallel()
	f := openFleet(t, mongostore.Options{URI: mongotest.URI(t)})
	f.create("B", board.StateDone)
	f.create("C", board.StateReady)
	f.create("E", board.StateReady)
	f.create("G", board.StateReady)
	for _, nc := range []board.CreateCardParams{{ID: "D", DependsOn: []string{"B", "C"}}, {ID: "F", DependsOn: []string{"E", "G"}}} {
		if _, err := f.s.CreateCard(f.ctx, nc); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.s.SetState(f.ctx, board.MoveParams{Card: "E", To: board.StateDone, Actor: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	// What two dead Reopens left: of B (holding D), and of E (holding F).
	f.foreign("B", bson.D{{Key: "$set", Value: bson.D{{Key: "reopen_pending", Value: "dead01:B"}}}})
	f.foreign("D", bson.D{{Key: "$set", Value: bson.D{{Key: "reopen_holds", Value: bson.A{"dead01:B"}}, {Key: "reopen_gen", Value: int64(1)}}}})
	f.foreign("E", bson.D{{Key: "$set", Value: bson.D{{Key: "reopen_pending", Value: "dead02:E"}}}})
	f.foreign("F", bson.D{{Key: "$set", Value: bson.D{{Key: "reopen_holds", Value: bson.A{"dead02:E"}}, {Key: "reopen_gen", Value: int64(1)}}}})

	if err := f.s.SetState(f.ctx, board.MoveParams{Card: "C", To: board.StateDone, Actor: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	if d := f.get("D"); d.State != board.StateReady {
		t.Errorf("D after its last blocker completed = %s, want promoted to ready past the dead Reopen's hold", d.State)
	}
	if err := f.s.Reopen(f.ctx, board.MoveParams{Card: "E", To: board.StateReady, Actor: "uid:0"}); err != nil {
		t.Errorf("Reopen of E after a dead Reopen of it: %v", err)
	}
	if e, fc := f.get("E"), f.get("F"); e.State != board.StateReady || fc.State != board.StateWaitingDeps {
		t.Errorf("E %s, F %s; want E reopened and F waiting", e.State, fc.State)
	}
	// F still carries the dead Reopen's hold; the completion of both its
	// blockers breaks it and promotes F.
	for _, id := range []string{"G", "E"} {
		if err := f.s.SetState(f.ctx, board.MoveParams{Card: id, To: board.StateDone, Actor: "uid:0"}); err != nil {
			t.Fatal(err)
		}
	}
	if fc := f.get("F"); fc.State != board.StateReady {
		t.Errorf("F after E completed again = %s, want promoted to ready", fc.State)
	}
}

// A card created with a blocker that is complete, while a Reopen of that
// blocker is under way: the Reopen listed the blocker's dependents before
// the card existed, so it holds nothing of it. The new card waits, and its
// promotion breaks the Reopen before it lets the card go; the Reopen,
// deciding again, finds the card promoted and is refused
// (DESIGN.md#reopen-promotion).
func TestACardCreatedDuringAReopenIsNotPassedBy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, other, in := movePair(t, "B")
	if _, err := a.CreateCard(ctx, board.CreateCardParams{ID: "B", State: board.StateDone}); err != nil {
		t.Fatal(err)
	}
	in.before(func() {
		if _, err := other.CreateCard(ctx, board.CreateCardParams{ID: "D", DependsOn: []string{"B"}}); err != nil {
			t.Errorf("creating D: %v", err)
		}
	})
	err := a.Reopen(ctx, board.MoveParams{Card: "B", To: board.StateReady, Actor: "uid:0"})
	if in.armed.Load() {
		t.Fatal("setup: the Reopen never tried to move B")
	}
	b, err2 := a.GetCard(ctx, board.GetCardParams{ID: "B"})
	d, err3 := a.GetCard(ctx, board.GetCardParams{ID: "D"})
	if err2 != nil || err3 != nil {
		t.Fatal(err2, err3)
	}
	if d.State != board.StateWaitingDeps && b.State != board.StateDone {
		t.Errorf("D is in %s while its blocker B is back in %s: the reopen guard was defeated", d.State, b.State)
	}
	if !errors.Is(err, board.ErrTransitionRejected) || !strings.Contains(err.Error(), `"D"`) {
		t.Errorf("Reopen racing D's creation = %v (B %s, D %s); want refused naming D", err, b.State, d.State)
	}
}

// A caller that gives up right after a card with complete blockers was
// inserted does not leave it waiting for a promotion that nothing will
// make: the card exists, and its promotion runs to its end.
func TestACreateWhoseCallerGaveUpStillPromotes(t *testing.T) {
	t.Parallel()
	var armed atomic.Bool
	var cancel context.CancelFunc
	uri, db := mongotest.URI(t), mongotest.Database(t)
	s := openStore(t, mongostore.Options{URI: uri, Database: db, Monitor: &event.CommandMonitor{
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			if e.CommandName == "insert" && armed.CompareAndSwap(true, false) {
				cancel()
			}
		},
	}})
	if _, err := s.CreateCard(t.Context(), board.CreateCardParams{ID: "B", State: board.StateDone}); err != nil {
		t.Fatal(err)
	}
	ctx, c := context.WithCancel(t.Context())
	cancel = c
	armed.Store(true)
	_, err := s.CreateCard(ctx, board.CreateCardParams{ID: "D", DependsOn: []string{"B"}})
	if armed.Load() {
		t.Fatal("setup: no insert was seen")
	}
	d, gerr := s.GetCard(t.Context(), board.GetCardParams{ID: "D"})
	if gerr != nil {
		t.Fatalf("D after its creation's caller gave up (%v): %v", err, gerr)
	}
	if d.State == board.StateWaitingDeps {
		t.Errorf("D is left in waiting_deps with its only blocker done (CreateCard: %v)", err)
	}
}

// An operator moves a free card into waiting_deps between a claim's read
// and its compare-and-set. The state the claim judged is part of its CAS,
// so the claim reads the card again: by id it is refused as waiting on its
// blockers, and Claim next passes it over. Either way nothing is minted on
// it (DESIGN.md#lifecycle-refusals).
func TestAClaimDoesNotTakeACardMovedIntoWaitingDepsMidWrite(t *testing.T) {
	t.Parallel()
	for _, next := range []bool{false, true} {
		t.Run(map[bool]string{false: "ById", true: "Next"}[next], func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			a, b, in := interleavedPair(t)
			if _, err := b.CreateCard(ctx, board.CreateCardParams{ID: "blk", State: board.StateBacklog}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.CreateCard(ctx, board.CreateCardParams{ID: "d", State: board.StateReady, DependsOn: []string{"blk"}}); err != nil {
				t.Fatal(err)
			}
			in.before(func() {
				if err := b.SetState(ctx, board.MoveParams{Card: "d", To: board.StateWaitingDeps, Actor: "uid:0"}); err != nil {
					t.Errorf("the operator's move into waiting_deps: %v", err)
				}
			})
			var err error
			if next {
				_, err = a.ClaimNext(ctx, board.ClaimNextParams{Marker: interleavedWorker, Lease: 30 * time.Second})
				if !errors.Is(err, board.ErrNotFound) {
					t.Errorf("ClaimNext racing a move into waiting_deps = %v, want ErrNotFound (no other card)", err)
				}
			} else {
				_, err = a.Claim(ctx, board.ClaimParams{Card: "d", Marker: interleavedWorker, Lease: 30 * time.Second})
				if !errors.Is(err, board.ErrWaitingOnBlockers) {
					t.Errorf("Claim racing a move into waiting_deps = %v, want ErrWaitingOnBlockers", err)
				}
			}
			if in.armed.Load() {
				t.Fatal("setup: the claim never tried its write")
			}
			c, err := b.GetCard(ctx, board.GetCardParams{ID: "d"})
			if err != nil {
				t.Fatal(err)
			}
			if c.Claimed() || c.ClaimEpoch != 0 || c.State != board.StateWaitingDeps {
				t.Errorf("card after the race: %s, claimed by %q at epoch %d; want waiting_deps, never claimed", c.State, c.Claim, c.ClaimEpoch)
			}
		})
	}
}
