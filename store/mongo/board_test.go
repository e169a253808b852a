package mongostore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	mongostore "github.com/leasekeeper/leasekeeper/store/mongo"
)

// TestStoredBoardIsSharedByTheFleet: the first store to open a database
// seeds the board; a second agent configured differently gets the stored
// one; a change made through one agent reaches the other, which then
// validates against it (DESIGN.md#board-in-store: one board for the fleet).
func TestStoredBoardIsSharedByTheFleet(t *testing.T) {
	t.Parallel()
	uri, db := mongotest.URI(t), mongotest.Database(t)
	first := openStore(t, mongostore.Options{URI: uri, Database: db})
	seeded := board.DefaultBoard(false)
	if got := first.Board(); !got.Equal(seeded) {
		t.Fatalf("board of the first agent = %s, want the default it seeded %s", got, seeded)
	}

	custom := seeded.Clone()
	custom.States = append(custom.States, board.State{Name: "parked"})
	second := openStore(t, mongostore.Options{URI: uri, Database: db, Board: custom})
	if got := second.Board(); !got.Equal(seeded) {
		t.Errorf("board of an agent configured differently = %s, want the stored %s", got, seeded)
	}

	renamed := seeded.Clone()
	renamed.States[1].Name = "queued"
	if _, changed, err := first.SetBoard(t.Context(), seeded, renamed); err != nil || !changed {
		t.Fatalf("SetBoard = %v, %v", changed, err)
	}
	// The other agent meets a name its cached board does not know and
	// re-reads the definition at once.
	if _, err := second.CreateCard(t.Context(), board.NewCard{ID: "c1", State: "queued"}); err != nil {
		t.Errorf("CreateCard in a state another agent added: %v", err)
	}
	if got := second.Board(); !got.Equal(renamed) {
		t.Errorf("board of the other agent after the change = %s, want %s", got, renamed)
	}
	if _, err := second.CreateCard(t.Context(), board.NewCard{ID: "c2", State: board.StateReady}); !errors.Is(err, board.ErrInvalidArgument) {
		t.Errorf("CreateCard in a state the stored board dropped: got %v, want ErrInvalidArgument", err)
	}

	third := openStore(t, mongostore.Options{URI: uri, Database: db})
	if got := third.Board(); !got.Equal(renamed) {
		t.Errorf("board of an agent started after the change = %s, want %s", got, renamed)
	}
}

// TestBoardFollowsAnotherAgentsChange: Board() has no context, so a stale
// cache is re-read in the background; an agent that only reads (its
// effects layer deciding launch states) still follows another agent's
// state sweep within seconds. The wait polls, bounded, because it waits on
// the server and on wall-clock staleness, not on anything in this process.
func TestBoardFollowsAnotherAgentsChange(t *testing.T) {
	t.Parallel()
	uri, db := mongotest.URI(t), mongotest.Database(t)
	admin := openStore(t, mongostore.Options{URI: uri, Database: db})
	reader := openStore(t, mongostore.Options{URI: uri, Database: db})
	seeded := admin.Board()
	next := seeded.Clone()
	next.States[1].Name = "queued"
	if _, changed, err := admin.SetBoard(t.Context(), seeded, next); err != nil || !changed {
		t.Fatalf("SetBoard = %v, %v", changed, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for !reader.Board().Equal(next) {
		if time.Now().After(deadline) {
			t.Fatalf("Board() of the other agent is still %s, want %s", reader.Board(), next)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
