package lease

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/leasekeeper/leasekeeper/board"
)

// MaxRunsLimit bounds RunFilter.Limit, as one page of cards or events is
// bounded.
const MaxRunsLimit = 10000

// RunFilter selects the runs ListRuns returns. Every field is optional.
type RunFilter struct {
	// Card: only this card's runs (its Card.Runs). Empty: every card's.
	Card string
	// Status: only runs in this status.
	Status board.RunStatus
	// Limit: at most this many, the newest (0: no limit).
	Limit int
}

// ListRuns lists runs, newest first (by created_at, then id), never nil.
// The store has no listing of runs: it is composed of the reads it has —
// the cards (one, or all) and each run their Runs name (GetRun) — so a
// listing without Card reads every run of the board, one read each. A run
// a card names that is no longer stored (pruned) is left out.
func (s *Service) ListRuns(ctx context.Context, f RunFilter) ([]board.Run, error) {
	if f.Status != "" && !f.Status.Known() {
		return nil, board.Invalid("run status %q: want one of running, queued, paused_waiting_human, paused_operator, finished, failed, failed_resumable, cancelled", f.Status)
	}
	if f.Limit < 0 || f.Limit > MaxRunsLimit {
		return nil, board.Invalid("limit %d: want 0..%d", f.Limit, MaxRunsLimit)
	}
	var cards []board.Card
	if f.Card != "" {
		c, err := s.cfg.Store.GetCard(ctx, board.GetCardParams{ID: f.Card})
		if err != nil {
			return nil, err
		}
		cards = []board.Card{c}
	} else {
		var err error
		if cards, err = s.cfg.Store.ListCards(ctx, board.ListCardsParams{}); err != nil {
			return nil, err
		}
	}
	runs := []board.Run{}
	seen := map[string]bool{}
	for _, c := range cards {
		ids := c.Runs
		if c.LastRunID != "" && !slices.Contains(ids, c.LastRunID) {
			ids = append(slices.Clone(ids), c.LastRunID)
		}
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			r, err := s.cfg.Store.GetRun(ctx, board.GetRunParams{ID: id})
			if errors.Is(err, board.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if f.Status != "" && r.Status != f.Status {
				continue
			}
			runs = append(runs, r)
		}
	}
	slices.SortFunc(runs, func(a, b board.Run) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if f.Limit > 0 && len(runs) > f.Limit {
		runs = runs[:f.Limit]
	}
	return runs, nil
}
