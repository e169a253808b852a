package socketapi_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

// Deleting a card and pruning are operator verbs: a peer whose uid is not
// an operator is refused by the kernel's word, and nothing is deleted
// (DESIGN.md#retention).
func TestRetentionRoutesAreForOperatorsOnly(t *testing.T) {
	t.Parallel()
	other := uint32(os.Getuid()) + 4242
	a := socketapitest.Start(t, socketapitest.Options{Operators: func() []uint32 { return []uint32{other} }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.Store.CreateCard(ctx, board.CreateCardParams{ID: "keep", State: board.StateDone, Actor: "cli"}); err != nil {
		t.Fatal(err)
	}
	c := &client.Client{Socket: a.Path}
	if _, err := c.DeleteCard(ctx, "keep", true); !errors.Is(err, apitype.ErrForbidden) {
		t.Errorf("card delete by a non-operator = %v, want forbidden", err)
	}
	if _, err := c.Prune(ctx, apitype.PruneRequest{OlderThanMS: 1}); !errors.Is(err, apitype.ErrForbidden) {
		t.Errorf("prune by a non-operator = %v, want forbidden", err)
	}
	if _, err := a.Store.GetCard(ctx, board.GetCardParams{ID: "keep"}); err != nil {
		t.Errorf("the card after refused deletes: %v", err)
	}
	if evs, err := a.Store.Events(ctx, board.EventsParams{After: 0, Limit: 10}); err != nil || len(evs) != 1 {
		t.Errorf("the log after a refused prune = %v, %v; want its one event", evs, err)
	}
}
