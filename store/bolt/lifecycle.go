package boltstore

import (
	"context"
	"fmt"

	"github.com/leasekeeper/leasekeeper/board"
)

// Start claims a card, starts (or resumes) its run and moves it into the
// running column in one write: one transaction, one durable commit, with
// every event of the verbs it stands for (claimed, run_created or
// run_updated, last_run, state). A refusal writes nothing, so no epoch is
// minted.
func (s *Store) Start(ctx context.Context, r board.StartParams) (board.StartResult, error) {
	r, err := r.Normalize()
	if err != nil {
		return board.StartResult{}, err
	}
	brd := s.brd()
	running := brd.Running()
	var out board.StartResult
	err = s.write(ctx, func(w *wtx) error {
		out = board.StartResult{}
		// A retry of a Start that landed is answered from what it wrote,
		// whether it created the run it names or resumed a recorded one.
		if run, err := w.startedRun(r.Run.ID); err != nil {
			return err
		} else if run != nil && (r.Next || run.Card == r.Card) {
			prev, err := w.getCard(run.Card)
			if err != nil {
				return err
			}
			if board.StartAnswered(prev.Card, r, run.ID, s.now()) && run.Owner == prev.Claim && run.Epoch == prev.ClaimEpoch {
				// The lease is refreshed as an idempotent re-claim's is:
				// the caller counts it from this attempt.
				if err := s.extendLease(w, prev, s.now().Add(r.Lease)); err != nil {
					return err
				}
				out = board.StartResult{Card: prev.Card, Token: prev.Token(), Run: *run, Resumed: run.ID != r.Run.ID}
				return nil
			}
		}
		var rec *cardRecord
		if r.Next {
			// A card whose run is paused is passed over, as a held one is.
			rec, err = s.pickNext(w, r.Labels, func(c *cardRecord) (bool, error) {
				run, err := recordedRun(w, c)
				return board.StartRunRefusal(c.Card, run) != nil, err
			})
		} else {
			rec, err = w.getCard(r.Card)
		}
		if err != nil {
			return err
		}
		if err := brd.StartRefusal(rec.Card); err != nil {
			return err
		}
		// A card waiting on its blockers is not started by naming it
		// (DESIGN.md#lifecycle-refusals); Next never picks one.
		if err := brd.ClaimBlocked(rec.Card, w.blocker); err != nil {
			return err
		}
		// Nor one backing off (DESIGN.md#retries); Next passes it over.
		if err := board.RetryRefusal(rec.Card, s.now()); err != nil {
			return err
		}
		recorded, err := recordedRun(w, rec)
		if err != nil {
			return err
		}
		if err := board.StartRunRefusal(rec.Card, recorded); err != nil {
			return err
		}
		tok, err := s.acquire(w, rec, r.Marker, r.Lease, r.Marker)
		if err != nil {
			return err
		}
		now := s.now()
		// Where a resumable Finish files the card back to
		// (board.Board.FinishFiling).
		in := r.Run
		in.StartedFrom = rec.State
		switch {
		case recorded != nil && board.Resumable(*recorded) && !r.Fresh:
			run := board.Resume(*recorded, in, tok, now)
			if err := w.putRun(run, false, tok.Marker); err != nil {
				return err
			}
			if board.OrphanedResumable(*recorded) {
				// Resuming a run whose owner died with it is an attempt
				// (DESIGN.md#retries); pointAt writes the card.
				rec.Attempts++
			}
			if err := s.pointAt(w, rec, run.ID, tok, now); err != nil {
				return err
			}
			w.nameResume(run.ID, r.Run.ID)
			out.Run, out.Resumed = run, true
		default:
			if recorded != nil && board.Resumable(*recorded) {
				if err := w.putRun(board.Supersede(*recorded, now), false, tok.Marker); err != nil {
					return err
				}
			}
			run, err := s.createRun(w, rec, in, tok, now)
			if err != nil {
				return err
			}
			out.Run = run
		}
		if rec.State != running {
			if err := s.move(w, rec, running, board.ReasonNone, tok.Marker); err != nil {
				return err
			}
		}
		out.Card, out.Token = rec.Card, tok
		return nil
	})
	if err != nil {
		return board.StartResult{}, err
	}
	return out, nil
}

// recordedRun reads the card's recorded run; nil when it records none
// (or one that no longer exists).
func recordedRun(w *wtx, rec *cardRecord) (*board.Run, error) {
	if rec.LastRunID == "" {
		return nil, nil
	}
	return w.getRun(rec.LastRunID)
}

// Finish records the run's verdict, files the card by the board and
// releases the claim, in one write fenced on the token and on the run. The
// filing is the same move SetStateOwned makes, so a completion promotes
// dependents exactly as any completion does.
func (s *Store) Finish(ctx context.Context, r board.FinishParams) (board.FinishResult, error) {
	if err := r.Validate(); err != nil {
		return board.FinishResult{}, err
	}
	brd := s.brd()
	if err := brd.FinishCheck(r); err != nil {
		return board.FinishResult{}, err
	}
	var out board.FinishResult
	err := s.write(ctx, func(w *wtx) error {
		rec, err := w.getCard(r.Card)
		if err != nil {
			return err
		}
		if !holds(rec, r.Token) {
			return conflict(rec)
		}
		run, err := w.getRun(r.RunID)
		if err != nil {
			return err
		}
		if run == nil {
			return fmt.Errorf("card %q: %w", r.Card, board.NotFound("run", r.RunID))
		}
		if err := board.FinishFence(rec.Card, *run, r); err != nil {
			return err
		}
		now := s.now()
		next := *run
		next.Status, next.FailureCode, next.UpdatedAt = r.Status, r.FailureCode, now
		next.RetryableFailure = r.Retryable
		if r.Checkpoint != nil {
			next.Checkpoint = *r.Checkpoint
		}
		if err := w.putRun(next, false, r.Token.Marker); err != nil {
			return err
		}
		// This twin resumes a recorded run, so a return costs no attempt
		// (DESIGN.md#retries).
		route := brd.RouteRun(rec.Card, next, true)
		if to, reason := brd.FinishFiling(rec.State, run.StartedFrom, route); to != "" {
			m := board.SetStateOwnedParams{Token: r.Token, Reason: reason}
			var edit func()
			switch route.Kind {
			case board.RouteRetry:
				edit = func() { rec.RetryAt = now.Add(route.Delay) }
			case board.RouteSpent:
				edit = func() { rec.GaveUp = board.SpentStamp(next, route, now) }
			}
			if err := s.moveAnd(w, rec, to, m.StampedReason(), r.Token.Marker, edit); err != nil {
				return err
			}
		} else if route.Kind == board.RouteRetry {
			// A retry the filing does not move (the card was run where
			// it was claimed, outside the running column) backs off all
			// the same: its stamp rides on the release (DESIGN.md#retries).
			rec.RetryAt = now.Add(route.Delay)
		}
		if err := s.release(w, rec, r.Token.Marker); err != nil {
			return err
		}
		out = board.FinishResult{Card: rec.Card, Run: next}
		return nil
	})
	if err != nil {
		return board.FinishResult{}, err
	}
	return out, nil
}
