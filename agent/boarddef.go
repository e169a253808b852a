package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// BoardTTL bounds how stale the agent's copy of the board definition may
// be. The definition lives in the store (DESIGN.md#board-in-store), and on
// a shared store another agent's state sweep changes it under this one:
// the agent's components (the effects layer, the watchdog) follow such a
// change within BoardTTL of it, plus the time one read of the store takes.
// A change made through this agent (its board-administration verbs) is
// seen at once.
const BoardTTL = 2 * time.Second

// boardCache is the agent's one copy of the board definition: every
// component that decides by the board reads it here, under its own
// context. A read of a copy older than the TTL re-reads the store; at most
// one such read is in flight, and a caller waiting for it gives up when
// its context ends.
type boardCache struct {
	load func(ctx context.Context) (board.Board, error)
	ttl  time.Duration
	// now dates the copy (monotonic time.Now unless a test moves time).
	now func() time.Time

	// reading is a one-slot semaphore held by the caller re-reading the
	// store; a channel rather than a mutex so a waiter can leave.
	reading chan struct{}

	mu sync.Mutex
	b  board.Board
	at time.Time
	ok bool
	// writes counts the boards written through this agent (written): a
	// re-read that started before one must not replace what it wrote.
	writes uint64
}

func newBoardCache(load func(ctx context.Context) (board.Board, error), ttl time.Duration) *boardCache {
	return &boardCache{load: load, ttl: ttl, now: time.Now, reading: make(chan struct{}, 1)}
}

// Board returns the board definition, as read from the store less than
// the TTL ago. A copy that old is re-read under ctx: a failed re-read is
// an error (the store did not answer), and a caller that has to wait —
// for the store, or for another caller's re-read in flight — returns
// ctx's error as soon as ctx ends. The result must not be modified.
func (c *boardCache) Board(ctx context.Context) (board.Board, error) {
	if b, ok := c.fresh(); ok {
		return b, nil
	}
	select {
	case c.reading <- struct{}{}:
	case <-ctx.Done():
		return board.Board{}, ctx.Err()
	}
	defer func() { <-c.reading }()
	// The read this caller waited for may have refreshed the copy.
	if b, ok := c.fresh(); ok {
		return b, nil
	}
	c.mu.Lock()
	writes := c.writes
	c.mu.Unlock()
	b, err := c.load(ctx)
	if err != nil {
		return board.Board{}, fmt.Errorf("read the board definition: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writes != writes {
		// This agent wrote the board while the read was in flight: what
		// it wrote is at least as new as what the read found.
		return c.b, nil
	}
	c.set(b)
	return b, nil
}

func (c *boardCache) fresh() (board.Board, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b, c.ok && c.now().Sub(c.at) < c.ttl
}

// written records b, the stored board a write through this agent left
// (SetBoard, whether it changed it or found another), as the current
// definition. A nil cache ignores it.
func (c *boardCache) written(b board.Board) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	c.set(b)
}

func (c *boardCache) set(b board.Board) { c.b, c.at, c.ok = b.Clone(), c.now(), true }

// warnBoardDrift says so, at start, when the states this agent was
// configured with differ from the board definition stored in its store.
// The stored definition wins — it is what every agent sharing the store
// uses, and what `leasekeeper board state ...` changes (DESIGN.md#board-in-store) — but
// an agent must never diverge from its own configuration silently: the
// operator either meant the stored board (and should update the config)
// or pointed the agent at the wrong store.
func warnBoardDrift(log *slog.Logger, configured, stored board.Board) bool {
	diff := configured.DiffNamed(stored, "configured", "stored")
	if len(diff) == 0 {
		return false
	}
	log.Warn("the configured states differ from the board stored in the store; using the stored board (update the config's states to match, or check store.path / store.database)",
		"differences", strings.Join(diff, "; "), "configured", configured.String(), "stored", stored.String())
	return true
}
