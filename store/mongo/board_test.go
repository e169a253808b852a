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
	if got := loadBoard(t, first); !got.Equal(seeded) {
		t.Fatalf("board of the first agent = %s, want the default it seeded %s", got, seeded)
	}

	custom := seeded.Clone()
	custom.States = append(custom.States, board.State{Name: "parked"})
	second := openStore(t, mongostore.Options{URI: uri, Database: db, Board: custom})
	if got := loadBoard(t, second); !got.Equal(seeded) {
		t.Errorf("board of an agent configured differently = %s, want the stored %s", got, seeded)
	}

	renamed := seeded.Clone()
	renamed.States[1].Name = "queued"
	if set, err := first.SetBoard(t.Context(), board.SetBoardParams{Expect: seeded, Next: renamed}); err != nil || !set.Changed {
		t.Fatalf("SetBoard = %v, %v", set.Changed, err)
	}
	// The other agent meets a name its cached board does not know and
	// re-reads the definition at once.
	if _, err := second.CreateCard(t.Context(), board.CreateCardParams{ID: "c1", State: "queued"}); err != nil {
		t.Errorf("CreateCard in a state another agent added: %v", err)
	}
	if got := loadBoard(t, second); !got.Equal(renamed) {
		t.Errorf("board of the other agent after the change = %s, want %s", got, renamed)
	}
	if _, err := second.CreateCard(t.Context(), board.CreateCardParams{ID: "c2", State: board.StateReady}); !errors.Is(err, board.ErrInvalidArgument) {
		t.Errorf("CreateCard in a state the stored board dropped: got %v, want ErrInvalidArgument", err)
	}

	third := openStore(t, mongostore.Options{URI: uri, Database: db})
	if got := loadBoard(t, third); !got.Equal(renamed) {
		t.Errorf("board of an agent started after the change = %s, want %s", got, renamed)
	}
}

// TestWritesFollowAnotherAgentsBoardChange: the definition a store's
// writes decide by is re-read, under the write's context, once it is
// older than its bound; a store that never reads the board itself still
// follows another agent's state sweep. Here the other agent renames the
// pool state and files a card there: the reader's ClaimNext must take it,
// which it can only do once it knows the new name is a pool state. The
// wait polls, bounded, because it waits on wall-clock staleness, not on
// anything in this process.
func TestWritesFollowAnotherAgentsBoardChange(t *testing.T) {
	t.Parallel()
	uri, db := mongotest.URI(t), mongotest.Database(t)
	admin := openStore(t, mongostore.Options{URI: uri, Database: db})
	reader := openStore(t, mongostore.Options{URI: uri, Database: db})
	seeded := loadBoard(t, admin)
	next := seeded.Clone()
	pool := next.FirstPool()
	for i := range next.States {
		if next.States[i].Name == pool {
			next.States[i].Name = "queued"
		}
	}
	if set, err := admin.SetBoard(t.Context(), board.SetBoardParams{Expect: seeded, Next: next}); err != nil || !set.Changed {
		t.Fatalf("SetBoard = %v, %v", set.Changed, err)
	}
	if _, err := admin.CreateCard(t.Context(), board.CreateCardParams{ID: "c1", State: "queued"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := reader.ClaimNext(t.Context(), board.ClaimNextParams{Marker: "host-4242", Lease: time.Minute})
		if err == nil && c.ID == "c1" {
			return
		}
		if !errors.Is(err, board.ErrNotFound) {
			t.Fatalf("ClaimNext = %+v, %v", c, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other agent's ClaimNext still finds no card in the renamed pool state after 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func loadBoard(t *testing.T, s *mongostore.Store) board.Board {
	t.Helper()
	b, err := s.LoadBoard(t.Context())
	if err != nil {
		t.Fatalf("LoadBoard: %v", err)
	}
	return b
}
