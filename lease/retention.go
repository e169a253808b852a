package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// Prune is an operator's prune now (DESIGN.md#retention): one bounded
// store Prune of what is older than olderThan (the agent's retention age
// when 0) by the store's clock, keeping the events the effects layer has
// not applied. It returns the cutoff with the result.
func (s *Service) Prune(ctx context.Context, actor string, olderThan time.Duration, limit int, dryRun bool) (time.Time, board.PruneResult, error) {
	if olderThan < 0 {
		return time.Time{}, board.PruneResult{}, board.Invalid("prune: negative age %s", olderThan)
	}
	if olderThan == 0 {
		olderThan = s.cfg.RetentionAge
	}
	if olderThan == 0 {
		return time.Time{}, board.PruneResult{}, board.Invalid("prune: name an age (--older-than): this agent's retention is off (retention.age: 0)")
	}
	now, err := s.cfg.Store.Now(ctx)
	if err != nil {
		return time.Time{}, board.PruneResult{}, err
	}
	p := board.PruneParams{Before: now.Add(-olderThan), Limit: limit, DryRun: dryRun}
	if s.cfg.KeepEventsFrom != nil {
		p.KeepFrom = s.cfg.KeepEventsFrom()
	}
	res, err := s.cfg.Store.Prune(ctx, p)
	if err != nil {
		return time.Time{}, board.PruneResult{}, err
	}
	if !dryRun {
		s.cfg.Logger.Info("pruned", "actor", actor, "before", p.Before, "runs", res.Runs, "events", res.Events, "cards", len(res.Cards), "more", res.More)
	}
	return p.Before, res, nil
}

// DeleteCard is an operator's card delete (DESIGN.md#retention). A claimed
// card is refused unless force, which first force-releases it exactly as
// ForceRelease does (the holder's later writes are refused by the fence,
// and the returned token names the claim to report lost); a card claimed
// again between that release and the delete is refused.
func (s *Service) DeleteCard(ctx context.Context, actor, id string, force bool) (board.DeleteCardResult, board.ClaimToken, error) {
	var released board.ClaimToken
	if force {
		tok, err := s.ForceRelease(ctx, actor, id)
		if err != nil {
			return board.DeleteCardResult{}, board.ClaimToken{}, err
		}
		released = tok
	}
	res, err := s.cfg.Store.DeleteCard(ctx, board.DeleteCardParams{ID: id, Actor: actor})
	if err != nil {
		if !force && errors.Is(err, board.ErrClaimConflict) {
			err = fmt.Errorf("%w (release it first, or delete with force)", err)
		}
		return board.DeleteCardResult{}, released, err
	}
	s.cfg.Logger.Info("card deleted", "card", id, "actor", actor, "runs", res.Runs, "released", released.Marker)
	return res, released, nil
}
