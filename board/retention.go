package board

import (
	"context"
	"fmt"
	"time"
)

// Retention is the store's half of history retention (DESIGN.md#retention):
// pruning the runs of finished cards and the events older than a cutoff,
// and an operator's deletion of one card. Its callers are the agent's
// background pruner and the lease service (the operator's prune and card
// delete); no other consumer takes it.
type Retention interface {
	// Prune deletes, in one bounded, idempotent step, the runs of finished
	// cards and the events (below p.KeepFrom) last written before p.Before;
	// with p.DryRun it only says what would go (DESIGN.md#retention).
	Prune(ctx context.Context, p PruneParams) (PruneResult, error)
	// DeleteCard deletes a card and its runs and records EventCardDeleted; a
	// claimed card is ErrClaimConflict, a blocker of another card
	// ErrTransitionRejected, an unknown one ErrNotFound; with p.DryRun
	// nothing is written (DESIGN.md#retention).
	DeleteCard(ctx context.Context, p DeleteCardParams) (DeleteCardResult, error)
}

// DefaultPruneLimit is a prune's bound per call when PruneParams.Limit is
// 0; MaxPruneLimit the most one call may ask for, so one call never holds
// a single-writer store long (DESIGN.md#group-commit).
const (
	DefaultPruneLimit = 500
	MaxPruneLimit     = 10000
)

// PruneParams asks Store.Prune for one bounded step of retention.
type PruneParams struct {
	// Before is the cutoff: only what was last written before it goes.
	Before time.Time `json:"before"`
	// Limit bounds the runs and, separately, the events of one call; 0 is
	// DefaultPruneLimit.
	Limit int `json:"limit,omitempty"`
	// KeepFrom, when positive, keeps every event whose Seq is at or above
	// it whatever its age: the agent passes the position its effects layer
	// has not read past yet.
	KeepFrom int64 `json:"keep_from,omitempty"`
	// DryRun reports what would go and writes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// Validate refuses a zero cutoff and a limit out of range.
func (p PruneParams) Validate() error {
	if p.Before.IsZero() {
		return Invalid("prune: a cutoff (before) is required")
	}
	if p.Limit < 0 || p.Limit > MaxPruneLimit {
		return Invalid("prune: limit %d out of range [0, %d]", p.Limit, MaxPruneLimit)
	}
	if p.KeepFrom < 0 {
		return Invalid("prune: negative keep_from %d", p.KeepFrom)
	}
	return nil
}

// EffectiveLimit is Limit, or DefaultPruneLimit when it is 0.
func (p PruneParams) EffectiveLimit() int {
	if p.Limit == 0 {
		return DefaultPruneLimit
	}
	return p.Limit
}

// PruneResult is what one Prune deleted (or, with DryRun, would delete).
type PruneResult struct {
	// Runs and Events are how many went.
	Runs   int `json:"runs"`
	Events int `json:"events"`
	// Cards are the cards whose runs went, in the order they were pruned.
	Cards []string `json:"cards"`
	// EventsThrough is the highest Seq pruned by this call; 0 when no
	// event went.
	EventsThrough int64 `json:"events_through,omitempty"`
	// More is true when the limit stopped the call with more to prune.
	More   bool `json:"more,omitempty"`
	DryRun bool `json:"dry_run,omitempty"`
}

// DeleteCardParams asks Store.DeleteCard to delete one card.
type DeleteCardParams struct {
	ID    string `json:"id"`
	Actor string `json:"actor,omitempty"`
	// DryRun reports what would go and writes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// Validate checks the id.
func (p DeleteCardParams) Validate() error { return ValidateCardID(p.ID) }

// DeleteCardResult is what DeleteCard deleted.
type DeleteCardResult struct {
	// Card is the card as it was deleted.
	Card Card `json:"card"`
	// Runs is how many of its runs went with it.
	Runs   int  `json:"runs"`
	DryRun bool `json:"dry_run,omitempty"`
}

// ErrEventsPruned is Events' answer to a reader positioned below what a
// Prune deleted: the events it had not read are gone, so reading on would
// be a silent gap. Its message names the oldest position a reader may
// resume from (DESIGN.md#retention).
var ErrEventsPruned = fmt.Errorf("events pruned: %w", ErrNotFound)

// EventsPrunedError is the concrete error behind ErrEventsPruned.
type EventsPrunedError struct {
	After   int64 // the reader's position
	Through int64 // the highest pruned Seq: resume after it
}

func (e *EventsPrunedError) Error() string {
	return fmt.Sprintf("events after %d were pruned through %d: the log was cut below this position; resume after %d (or from the head) and expect to have missed events", e.After, e.Through, e.Through)
}

// Is makes errors.Is(err, ErrEventsPruned) (and ErrNotFound) true.
func (e *EventsPrunedError) Is(target error) bool {
	return target == ErrEventsPruned || target == ErrNotFound
}

// CheckEventsPruned is Events' guard: a reader at 0 < after < through
// would skip pruned events unknowingly. A reader at 0 asks for whatever
// the log retains and is served.
func CheckEventsPruned(after, through int64) error {
	if after > 0 && after < through {
		return &EventsPrunedError{After: after, Through: through}
	}
	return nil
}

// Finished reports whether retention may prune the card's runs: the card
// is in a terminal state of b and nobody claims it.
func (b Board) Finished(c Card) bool { return b.IsTerminal(c.State) && !c.Claimed() }
