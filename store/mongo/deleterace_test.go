package mongostore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// insertInterleaver runs fn once, armed, just before the next insert of a
// card is sent: CreateCard's upsert on the cards collection.
type insertInterleaver struct {
	armed atomic.Bool
	fn    func()
}

func (in *insertInterleaver) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "update" {
			return
		}
		if v, err := e.Command.LookupErr("update"); err != nil || v.StringValue() != "cards" {
			return
		}
		if in.armed.CompareAndSwap(true, false) {
			in.fn()
		}
	}}
}

// An operator deletes a card while another agent creates a card naming it
// among its blockers: the delete lands between the create's check that its
// blockers exist and its insert (DESIGN.md#retention: a card another card
// names among its blockers is refused; DESIGN.md#never-stranded). One of
// the two must lose: either the delete is refused, or the create is — never
// a dependent left waiting on a blocker that no longer exists, which no
// completion can ever promote.
func TestDeleteCardRacingACreateThatNamesIt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	in := &insertInterleaver{}
	uri, db := mongotest.URI(t), mongotest.Database(t)
	a := openStore(t, mongostore.Options{URI: uri, Database: db, Monitor: in.monitor()})
	b := openStore(t, mongostore.Options{URI: uri, Database: db})
	if _, err := b.CreateCard(ctx, board.CreateCardParams{ID: "blocker", Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	var delErr error
	in.armed.Store(false)
	in.fn = func() {
		_, delErr = b.DeleteCard(ctx, board.DeleteCardParams{ID: "blocker", Actor: "uid:0"})
	}
	in.armed.Store(true)
	_, createErr := a.CreateCard(ctx, board.CreateCardParams{ID: "dependent", DependsOn: []string{"blocker"}, Actor: "cli"})
	if in.armed.Load() {
		t.Fatal("the delete was never interleaved")
	}
	_, blockerErr := b.GetCard(ctx, board.GetCardParams{ID: "blocker"})
	dep, depErr := b.GetCard(ctx, board.GetCardParams{ID: "dependent"})
	t.Logf("delete: %v; create: %v; blocker: %v; dependent: %v %v", delErr, createErr, blockerErr, dep.State, depErr)
	if delErr == nil && createErr == nil {
		t.Errorf("both the delete of the blocker and the create of a card naming it succeeded")
	}
	if errors.Is(blockerErr, board.ErrNotFound) && depErr == nil {
		t.Errorf("card %q (state %s) is left naming blocker %q, which is gone", dep.ID, dep.State, "blocker")
	}
}

// deleteInterleaver runs fn once, armed, just before the next
// compare-and-set delete of a card (DeleteCard's findAndModify remove).
type deleteInterleaver struct {
	armed atomic.Bool
	fn    func()
}

func (in *deleteInterleaver) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "findAndModify" {
			return
		}
		if v, err := e.Command.LookupErr("findAndModify"); err != nil || v.StringValue() != "cards" {
			return
		}
		if rm, err := e.Command.LookupErr("remove"); err != nil || !rm.Boolean() {
			return
		}
		if in.armed.CompareAndSwap(true, false) {
			in.fn()
		}
	}}
}

// The other order: the delete has listed the card's dependents (none) and
// a whole create of a card naming it lands before the delete's
// compare-and-set. The delete must see the new dependent and be refused.
func TestDeleteCardSeesADependentCreatedAfterItsListing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	in := &deleteInterleaver{}
	uri, db := mongotest.URI(t), mongotest.Database(t)
	a := openStore(t, mongostore.Options{URI: uri, Database: db, Monitor: in.monitor()})
	b := openStore(t, mongostore.Options{URI: uri, Database: db})
	if _, err := b.CreateCard(ctx, board.CreateCardParams{ID: "blocker", Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	var createErr error
	in.fn = func() {
		_, createErr = b.CreateCard(ctx, board.CreateCardParams{ID: "dependent", DependsOn: []string{"blocker"}, Actor: "cli"})
	}
	in.armed.Store(true)
	_, delErr := a.DeleteCard(ctx, board.DeleteCardParams{ID: "blocker", Actor: "uid:0"})
	if in.armed.Load() {
		t.Fatal("the create was never interleaved")
	}
	_, blockerErr := b.GetCard(ctx, board.GetCardParams{ID: "blocker"})
	dep, depErr := b.GetCard(ctx, board.GetCardParams{ID: "dependent"})
	t.Logf("delete: %v; create: %v; blocker: %v; dependent: %v %v", delErr, createErr, blockerErr, dep.State, depErr)
	if createErr != nil {
		t.Fatalf("the create, with its blocker there all along, was refused: %v", createErr)
	}
	if !errors.Is(delErr, board.ErrTransitionRejected) {
		t.Errorf("DeleteCard of a card a new card names = %v, want ErrTransitionRejected", delErr)
	}
	if errors.Is(blockerErr, board.ErrNotFound) && depErr == nil {
		t.Errorf("card %q (state %s) is left naming blocker %q, which is gone", dep.ID, dep.State, "blocker")
	}
}
