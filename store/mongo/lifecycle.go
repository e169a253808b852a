package mongostore

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/leasekeeper/leasekeeper/board"
)

// Start claims a card, starts (or resumes) its run and moves it into the
// running column as ONE compare-and-set on the card document: the claim,
// the embedded run, the run pointer and the state all as read, with every
// event (claimed, run_created or run_updated, last_run, state) in the
// card's outbox. A refusal writes nothing, so no epoch is minted.
//
// Before the CAS, a run the new one displaces is archived, and the card's
// recorded run is adopted when only the runs collection holds it: both
// are idempotent steps that change nothing a reader of the run sees.
func (s *Store) Start(ctx context.Context, r board.StartParams) (board.StartResult, error) {
	r, err := r.Normalize()
	if err != nil {
		return board.StartResult{}, err
	}
	// A retry of a Start that landed is answered from what it wrote.
	c, err := s.cardListingRun(ctx, r.Run.ID)
	if err != nil {
		return board.StartResult{}, err
	} else if c != nil && (r.Next || c.ID == r.Card) {
		if st, ok, err := s.answerStart(ctx, c.ID, r); err != nil || ok {
			return st, err
		}
	}
	// No card listed the run id just now, so none embeds it and the archive
	// holds no copy of it: the write's first attempt need not ask again
	// (the check is before the write either way; see doc.go).
	freshID := c == nil
	if !r.Next {
		st, _, err := s.startOn(ctx, r.Card, r, &freshID)
		return st, err
	}
	for round := 0; round < maxAttempts; round++ {
		clk, err := s.serverNow(ctx)
		if err != nil {
			return board.StartResult{}, err
		}
		filter := bson.D{
			{Key: "state", Value: bson.D{{Key: "$in", Value: s.freshBoard(ctx).PoolStates()}}},
			{Key: "claim", Value: bson.D{{Key: "$in", Value: bson.A{"", nil}}}},
			// Cards whose run is paused are passed over in the query, so
			// they cannot fill every page of candidates.
			{Key: fieldRun + ".status", Value: bson.D{{Key: "$nin", Value: bson.A{
				string(board.RunPausedOperator), string(board.RunPausedWaitingHuman)}}}},
			// So are cards backing off (DESIGN.md#retries).
			notBackingOff(clk),
		}
		filter = routed(filter, r.Labels)
		cands, err := s.findCards(ctx, filter, options.Find().SetSort(creationOrder).SetLimit(8))
		if err != nil {
			return board.StartResult{}, err
		}
		if len(cands) == 0 {
			return board.StartResult{}, fmt.Errorf("no unclaimed card in a pool state: %w", board.ErrNotFound)
		}
		for _, cand := range cands {
			st, wrote, err := s.startOn(ctx, cand.ID, r, &freshID)
			var ce *board.ClaimConflictError
			switch {
			case wrote:
				return st, nil
			case errors.Is(err, errNotPool), errors.Is(err, errParked), errors.Is(err, errUnrouted), errors.Is(err, errBackingOff), errors.As(err, &ce):
				continue // taken or moved in between: the next candidate
			case err != nil:
				return board.StartResult{}, err
			}
		}
	}
	return board.StartResult{}, fmt.Errorf("mongostore: start next: %w", ErrContention)
}

// answerStart answers a retry of Start r on card id when the first
// attempt landed (board.StartAnswered): the lease is refreshed as an
// idempotent re-claim's is (server-now + lease, never backwards, same
// epoch, no event), fenced on the claim and the run, and the state the
// first attempt wrote is returned. ok is false when it did not land.
func (s *Store) answerStart(ctx context.Context, id string, r board.StartParams) (st board.StartResult, ok bool, err error) {
	after, _, err := s.mutate(ctx, id, func(c *cardState, clk serverClock) (*change, error) {
		ok = false
		if c.run == nil || c.run.ID != r.Run.ID || !board.StartAnswered(c.Card, r, r.Run.ID, clk.now) ||
			c.run.Owner != c.Claim || c.run.Epoch != c.ClaimEpoch {
			return nil, nil
		}
		ok = true
		ch := &change{
			cond: append(bson.D{same(c.raw, fieldRun)}, tokenCond(c.Token())...),
			max:  bson.D{{Key: "claim_lease_until", Value: clk.leaseUntil(r.Lease)}},
		}
		return ch, nil
	})
	if err != nil || !ok {
		return board.StartResult{}, false, err
	}
	return board.StartResult{Card: after.Card, Token: after.Token(), Run: *after.run}, true, nil
}

// errNotPool: a Next candidate left the pool before it was started.
var errNotPool = errors.New("not in a pool state")

// errUnrouted: a Next candidate no longer carries every label the request
// routes by (DESIGN.md#label-routing); it is passed over.
var errUnrouted = errors.New("not carrying the labels asked for")

// errBackingOff: a Next candidate started backing off after a retryable
// failure since the listing (DESIGN.md#retries); it is passed over.
var errBackingOff = errors.New("backing off")

// errParked: a Next candidate's recorded run is paused
// (board.StartRunRefusal); it is passed over, as a held card is.
var errParked = errors.New("its run is paused")

// startOn plans and writes Start on one card. *freshID: no card listed the
// run id when Start looked, so the first attempt of the whole Start does
// not check again; every later one (another candidate, a CAS miss) does.
func (s *Store) startOn(ctx context.Context, id string, r board.StartParams, freshID *bool) (board.StartResult, bool, error) {
	first, err := s.adoptRecorded(ctx, id)
	if err != nil {
		return board.StartResult{}, false, err
	}
	brd := s.freshBoard(ctx)
	running := brd.Running()
	var (
		out   board.StartResult
		moved *archived
	)
	after, wrote, err := s.mutateFrom(ctx, id, first, func(c *cardState, clk serverClock) (*change, error) {
		out, moved = board.StartResult{}, nil
		// A Next candidate that left the pool since the listing (filed
		// to a sink, say) is passed over before StartRefusal judges it:
		// only a Start by id is refused a sink (DESIGN.md#start-next).
		if r.Next && !brd.IsPool(c.State) {
			return nil, errNotPool
		}
		if r.Next && !c.CarriesLabels(r.Labels) {
			return nil, errUnrouted
		}
		if err := brd.StartRefusal(c.Card); err != nil {
			return nil, err
		}
		// A card waiting on its blockers is not started by naming it
		// (DESIGN.md#lifecycle-refusals); its state is in the CAS below.
		if err := brd.ClaimBlocked(c.Card, s.blocker(ctx)); err != nil {
			return nil, err
		}
		// Nor one backing off (DESIGN.md#retries); Next passes it over.
		// Its retry_at as read is in the CAS below.
		if err := board.RetryRefusal(c.Card, clk.now); err != nil {
			if r.Next {
				return nil, errBackingOff
			}
			return nil, err
		}
		recorded := c.recordedRun()
		if err := board.StartRunRefusal(c.Card, recorded); err != nil {
			if r.Next {
				return nil, errParked
			}
			return nil, err
		}
		acq, tok := acquireChange(c, clk, r.Marker, r.Lease)
		var runCh *change
		// The fleet twin never resumes a recorded run (board.Store.Start):
		// every Start is a fresh run, so the watchdog's run ceiling, which
		// counts them, bounds a card's returns to the pool
		// (DESIGN.md#twin-repark). A recorded run without a verdict is
		// superseded.
		{
			taken := false
			if !*freshID {
				var err error
				if taken, err = s.runExists(ctx, r.Run.ID); err != nil {
					return nil, err
				}
			}
			*freshID = false
			if taken {
				return nil, fmt.Errorf("run %q: %w", r.Run.ID, board.ErrAlreadyExists)
			}
			var (
				closed *change
				err    error
			)
			if recorded != nil && board.Resumable(*recorded) {
				// The superseded run is archived already closed: the CAS
				// below displaces it from the card.
				old := board.Supersede(*recorded, clk.now)
				if err := s.archiveRun(ctx, old, c.runRev+1); err != nil {
					return nil, err
				}
				closed = &change{events: []outboxEntry{runEvent(board.EventRunUpdated, old, tok.Marker)}}
			} else if moved, err = s.displace(ctx, c, r.Run.ID); err != nil {
				return nil, err
			}
			run := r.Run
			run.Card, run.Owner, run.Epoch = c.ID, tok.Marker, tok.Epoch
			// Where a resumable Finish files the card back to
			// (board.Board.FinishFiling).
			run.StartedFrom = c.State
			run.CreatedAt, run.UpdatedAt = clk.now, clk.now
			runCh = merge(closed, setRun(c, run, board.EventRunCreated, tok.Marker))
			out.Run = run
		}
		var move *change
		if c.State != running {
			move = moveChange(c, clk, running, board.ReasonNone, tok.Marker)
		}
		out.Token = tok
		// The state as read is part of the CAS whether the card moves or
		// not: an operator's move in between (to a sink, say) was not
		// judged by StartRefusal.
		asRead := &change{cond: bson.D{same(c.raw, "state"), same(c.raw, "retry_at")}}
		if len(r.Labels) > 0 {
			// So are its labels when they routed the pick: an operator's
			// edit in between is not missed.
			asRead.cond = append(asRead.cond, same(c.raw, "labels"))
		}
		return merge(asRead, acq, runCh, pointAtChange(c, clk, out.Run.ID, tok), move), nil
	})
	if err != nil || !wrote {
		return board.StartResult{}, false, err
	}
	out.Card = after.Card
	if err := s.settle(ctx, moved); err != nil {
		return out, true, err
	}
	return out, true, nil
}

// Finish records the run's verdict, files the card by the board and
// releases the claim as ONE compare-and-set on the card, fenced on the
// token and on the embedded run as read. The filing is the same move
// SetStateOwned makes; dependents a completion unblocks are promoted after
// it by the same code (see promoteDependents for that twin divergence).
func (s *Store) Finish(ctx context.Context, r board.FinishParams) (board.FinishResult, error) {
	if err := r.Validate(); err != nil {
		return board.FinishResult{}, err
	}
	brd := s.freshBoard(ctx)
	if err := brd.FinishCheck(r); err != nil {
		return board.FinishResult{}, err
	}
	first, err := s.adoptRecorded(ctx, r.Card)
	if err != nil {
		return board.FinishResult{}, err
	}
	var (
		out   board.FinishResult
		moved bool
	)
	after, _, err := s.ownedFrom(ctx, r.Card, first, r.Token, func(c *cardState, clk serverClock) (*change, error) {
		moved = false
		run := c.recordedRun()
		if run == nil || run.ID != r.RunID {
			if c.LastRunID == r.RunID {
				return nil, fmt.Errorf("card %q: %w", r.Card, board.NotFound("run", r.RunID))
			}
			return nil, board.FinishFence(c.Card, board.Run{ID: r.RunID}, r)
		}
		if err := board.FinishFence(c.Card, *run, r); err != nil {
			return nil, err
		}
		next := *run
		next.Status, next.FailureCode, next.UpdatedAt = r.Status, r.FailureCode, clk.now
		next.RetryableFailure = r.Retryable
		if r.Checkpoint != nil {
			next.Checkpoint = *r.Checkpoint
		}
		out.Run = next
		var move *change
		// This twin never resumes: a return to the pool is a fresh run, an
		// attempt (DESIGN.md#retries).
		route := brd.RouteRun(c.Card, next, false)
		if to, reason := brd.FinishFiling(c.State, run.StartedFrom, route); to != "" {
			m := board.SetStateOwnedParams{Token: r.Token, Reason: reason}
			move = moveChange(c, clk, to, m.StampedReason(), r.Token.Marker)
			switch route.Kind {
			case board.RouteRetry:
				move.set = append(move.set, bson.E{Key: "retry_at", Value: clk.now.Add(route.Delay)})
			case board.RouteSpent:
				move.unset = nil // the stamp replaces gave_up
				move.set = append(move.set, bson.E{Key: "gave_up", Value: gaveUpDoc(*board.SpentStamp(next, route, clk.now))})
			}
			moved = true
		} else if route.Kind == board.RouteRetry {
			// A retry the filing does not move (the card was run where
			// it was claimed, outside the running column) backs off all
			// the same: its stamp rides on the release (DESIGN.md#retries).
			move = &change{set: bson.D{{Key: "retry_at", Value: clk.now.Add(route.Delay)}}}
		}
		// The state as read is part of the CAS whether the filing moves
		// the card or not: the filing was decided on it.
		asRead := &change{cond: bson.D{same(c.raw, "state")}}
		return merge(asRead, setRun(c, next, board.EventRunUpdated, r.Token.Marker), move, releaseChange(c, clk, r.Token.Marker)), nil
	})
	if err != nil {
		return board.FinishResult{}, err
	}
	out.Card = after.Card
	if err := s.afterMove(ctx, after, moved, r.Token.Marker); err != nil {
		return out, err
	}
	return out, nil
}
