// Package boardadmin runs the board-administration operations
// (DESIGN.md#label-sweeps): renaming or deleting a state (a column), and
// renaming, merging or deleting a label, across every card of a board.
//
// The operations are generic walkers above the store, so both twins (and a
// store behind the plugin boundary) get exactly the same behaviour through
// board.Store. Each one walks a snapshot of the cards, and the snapshot ages
// for the whole walk, so no card is ever written from it blindly: every
// write is a compare-and-set on what the walker read (the labels for a label
// sweep, the source state for a state sweep). On a miss the walker takes the
// card as it is now, transforms that, and tries again, a bounded number of
// times. That is what keeps a one-shot label consumed mid-sweep consumed,
// and a concurrent AdjustLabels from being lost: the sweep's write can only
// land on the labels it actually transformed.
//
// Every write carries machine provenance (state_rename, state_delete,
// field_rename, field_delete), so it fires no effect: no launch hint, no
// dependent promotion, no one-shot consumption. A column rename therefore
// emits one event per card and launches nothing (DESIGN.md#machine-reasons).
// Claims are never touched.
package boardadmin

import (
	"context"
	"fmt"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// Store is what the walkers call: the reads of the cards and the board,
// the compare-and-set moves (SetStateFrom, Reopen) a state sweep files
// cards with, and the board administration verbs (board.BoardAdmin).
// Every board.Store is one.
type Store interface {
	board.CardReader
	board.CardWriter
	board.BoardAdmin
}

// Defaults of Config.
const (
	DefaultAttempts     = 5
	DefaultWriteTimeout = 10 * time.Second
	// stragglerPasses bounds how often a state sweep re-lists the retiring
	// state for cards that entered it during the walk (a writer whose board
	// definition was not refreshed yet).
	stragglerPasses = 3
)

// Config configures an Admin.
type Config struct {
	Store Store
	// Actor is who asked ("uid:N", "cli"). Machine-reason events blank it
	// (board.Event.Actor), but it still names the operator in errors.
	Actor string
	// Attempts bounds the compare-and-set attempts per card (default
	// DefaultAttempts). A card still contended after them is reported at
	// the end while the walk goes on.
	Attempts int
	// WriteTimeout is the time budget of each single write (default
	// DefaultWriteTimeout): one slow card cannot eat the whole walk's
	// deadline, and a hung store fails the walk at a named card.
	WriteTimeout time.Duration
	// BeforeWrite, when set, is called before every card write with the
	// card id and the attempt number (from 1). It is a test seam: a test
	// injects a concurrent write there to make the compare-and-set miss
	// deterministically, without sleeping.
	BeforeWrite func(card string, attempt int)
	// DryRun makes every operation decide and write nothing: not the board
	// definition, not a card. The checks that refuse an operation run as
	// they would (a refusal is the same error), and the report lists the
	// cards the operation would change, with DryRun set.
	DryRun bool
	// Progress, when set, is called after each card of the walk with the
	// cards handled so far and the size of the snapshot walked (a state
	// sweep reports its first pass; the few stragglers after it are not
	// counted).
	Progress func(done, total int)
}

// Admin runs board-administration operations against one store.
type Admin struct {
	cfg Config
}

// New validates cfg and fills in its defaults.
func New(cfg Config) (*Admin, error) {
	if cfg.Store == nil {
		return nil, board.Invalid("boardadmin: Store is nil")
	}
	if cfg.Attempts < 0 || cfg.WriteTimeout < 0 {
		return nil, board.Invalid("boardadmin: negative Attempts or WriteTimeout")
	}
	if cfg.Attempts == 0 {
		cfg.Attempts = DefaultAttempts
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	return &Admin{cfg: cfg}, nil
}

// Board reads the stored board definition.
func (a *Admin) Board(ctx context.Context) (board.Board, error) {
	return a.cfg.Store.LoadBoard(ctx)
}

// outcome is what happened to one card of a walk.
type outcome int

const (
	outChanged outcome = iota
	outUnchanged
	outGone
	outContended
)

// record adds one card's outcome to the report.
func record(rep *board.SweepReport, id string, o outcome) {
	switch o {
	case outChanged:
		rep.Changed = append(rep.Changed, id)
	case outUnchanged:
		rep.Unchanged++
	case outGone:
		rep.Gone = append(rep.Gone, id)
	case outContended:
		rep.Contended = append(rep.Contended, id)
	}
}

func newReport(op string) board.SweepReport {
	return board.SweepReport{Op: op, Changed: []string{}}
}

// progressed reports that done of total cards were handled.
func (a *Admin) progressed(done, total int) {
	if a.cfg.Progress != nil {
		a.cfg.Progress(done, total)
	}
}

// write runs one store write under its own time budget.
func (a *Admin) write(ctx context.Context, card string, attempt int, fn func(ctx context.Context) error) error {
	if a.cfg.BeforeWrite != nil {
		a.cfg.BeforeWrite(card, attempt)
	}
	wctx, cancel := context.WithTimeout(ctx, a.cfg.WriteTimeout)
	defer cancel()
	return fn(wctx)
}

// progress wraps err with the operation and how far the walk got.
func progress(op, card string, i, n int, err error) error {
	return fmt.Errorf("%s: card %q (%d of %d): %w", op, card, i+1, n, err)
}

// SetRetry sets the board's default retry policy (DESIGN.md#retries), a
// compare-and-set on the stored definition like every board change; the
// cards are not touched (each reads the policy when a run of it ends).
func (a *Admin) SetRetry(ctx context.Context, p board.RetryPolicy) (board.Board, error) {
	if err := p.Validate(); err != nil {
		return board.Board{}, err
	}
	return a.updateBoard(ctx, func(b board.Board) (board.Board, error) {
		b.Retry = p
		return b, nil
	})
}
