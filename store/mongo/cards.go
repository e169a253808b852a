package mongostore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/board"
)

// fieldNever is a field no card has: CreateCard's upsert asks for it, so
// it never matches a stored card and always inserts (or collides on _id).
const fieldNever = "_leasekeeper_never_set"

// createPromotionTimeout bounds the promotion CreateCard makes of the card
// it inserted, which does not end with the caller's context.
const createPromotionTimeout = 30 * time.Second

// CreateCard creates a card after validating everything it names.
func (s *Store) CreateCard(ctx context.Context, nc board.CreateCardParams) (board.Card, error) {
	nc, err := nc.Normalize()
	if err != nil {
		return board.Card{}, err
	}
	deps, labels := nc.DependsOn, nc.Labels
	if nc.State != "" {
		if _, err := s.requireState(ctx, nc.State, true); err != nil {
			return board.Card{}, fmt.Errorf("card %q: %w", nc.ID, err)
		}
	}
	// Every blocker must exist. A card with blockers starts waiting for
	// them even when they are all complete, and is promoted after the
	// insert like any dependent (promote): moving it to the pool on a read
	// taken before the insert would let a Reopen of a blocker that lists
	// dependents before the card exists pass it by
	// (DESIGN.md#reopen-promotion).
	if _, _, err := s.blockers(ctx, nc.ID, deps); err != nil {
		return board.Card{}, err
	}
	state := nc.State
	if state == "" {
		state = s.freshBoard(ctx).InitialState("", len(deps) == 0)
	}
	clk, err := s.serverNow(ctx)
	if err != nil {
		return board.Card{}, err
	}
	ev := newEvent(board.EventCardCreated, nc.ID, board.ReasonNone, nc.Actor, clk.now, board.EventData{To: state, Labels: labels})
	doc := bson.D{
		{Key: "_id", Value: nc.ID},
		{Key: "title", Value: nc.Title},
		{Key: "state", Value: state},
		{Key: "labels", Value: labels},
		{Key: "depends_on", Value: deps},
		{Key: "runs", Value: []string{}},
		{Key: "awaiting_input", Value: false},
		{Key: "created_at", Value: clk.now},
		{Key: "updated_at", Value: clk.now},
		{Key: "claim", Value: ""},
		{Key: fieldOutbox, Value: []outboxEntry{ev}},
	}
	if nc.Retry != nil {
		doc = append(doc, bson.E{Key: "retry", Value: retryDoc(*nc.Retry)})
	}
	// An upsert whose filter no stored card can match (no card has the
	// field it asks for) inserts the card, or fails on the duplicate _id
	// when one exists: it is an insert that can use $currentDate. The
	// server stamps the created event's write (DESIGN.md#event-log) and the
	// creation order, created_seq, with its own timestamps: unique and
	// increasing, with no counter every creation contends on. (Cards an
	// older version created hold a number there; numbers sort before
	// timestamps, so they stay first.)
	_, err = s.cards.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: nc.ID}, {Key: fieldNever, Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{
			{Key: "$setOnInsert", Value: doc[1:]},
			{Key: "$currentDate", Value: bson.D{{Key: "created_seq", Value: serverStamp}, {Key: fieldEvTS, Value: serverStamp}}},
		},
		options.UpdateOne().SetUpsert(true))
	if err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return board.Card{}, fmt.Errorf("card %q: %w", nc.ID, board.ErrAlreadyExists)
		}
		return board.Card{}, writeErr(fmt.Sprintf("mongostore: create card %q", nc.ID), err)
	}

	if len(deps) > 0 {
		if err := s.claimBlockers(ctx, nc); err != nil {
			return board.Card{}, err
		}
	}

	if state == board.StateWaitingDeps && nc.State == "" && len(deps) > 0 {
		// Promote it now that it is there, if its blockers are complete
		// (a completion before the insert promoted nobody: this card was
		// not there yet). The card exists now whatever the caller does
		// next, so a caller that gives up must not leave it waiting on
		// blockers that are done: the promotion runs to its end on a
		// context of its own, bounded.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createPromotionTimeout)
		_, err := s.promote(pctx, nc.ID, deps[len(deps)-1], nc.Actor)
		cancel()
		if err != nil {
			return board.Card{}, err
		}
	}
	c, err := s.readCard(ctx, nc.ID)
	if err != nil {
		return board.Card{}, err
	}
	return c.Card, nil
}

// fieldBlockedGen counts the cards created naming a card among their
// blockers: CreateCard bumps it on every blocker after its insert, and
// DeleteCard's compare-and-set requires it as read (DESIGN.md#retention).
const fieldBlockedGen = "blocked_gen"

// claimBlockers bumps, after nc's insert, the blocked_gen of every blocker
// nc names, so a DeleteCard of one that listed its dependents before the
// insert fails its compare-and-set and lists them again. A blocker that is
// gone already (deleted between the check before the insert and the insert)
// is found by the bump: the card just inserted is deleted again, with its
// card_deleted event, and the create is refused as naming an unknown
// blocker. Together no card is ever left naming a blocker that is gone
// (DESIGN.md#never-stranded).
func (s *Store) claimBlockers(ctx context.Context, nc board.CreateCardParams) error {
	deps := slices.Clone(nc.DependsOn)
	slices.Sort(deps)
	deps = slices.Compact(deps)
	// Bounded and to its end whatever the caller does: the card exists now.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createPromotionTimeout)
	defer cancel()
	res, err := s.cards.UpdateMany(bctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: deps}}}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: fieldBlockedGen, Value: int64(1)}}}})
	if err != nil {
		return writeErr(fmt.Sprintf("mongostore: create card %q: mark its blockers", nc.ID), err)
	}
	if int(res.MatchedCount) == len(deps) {
		return nil
	}
	if _, err := s.DeleteCard(bctx, board.DeleteCardParams{ID: nc.ID, Actor: nc.Actor}); err != nil && !errors.Is(err, board.ErrNotFound) {
		return fmt.Errorf("mongostore: create card %q: a blocker was deleted meanwhile, and the card could not be taken back: %w", nc.ID, err)
	}
	return board.Invalid("card %q: a blocker was deleted while the card was created", nc.ID)
}

// blockers reads id's blockers: whether all are in a completion state, and
// the tokens of the Reopens of them in flight (reopenOnce). A blocker that
// does not exist is ErrInvalidArgument.
func (s *Store) blockers(ctx context.Context, id string, deps []string) (complete bool, pending []string, err error) {
	if len(deps) == 0 {
		return true, nil, nil
	}
	cur, err := s.cards.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: deps}}}},
		options.Find().SetProjection(bson.D{{Key: "state", Value: 1}, {Key: fieldReopenPending, Value: 1}}))
	if err != nil {
		return false, nil, fmt.Errorf("mongostore: read blockers of %q: %w", id, err)
	}
	defer cur.Close(ctx)
	found := map[string]bool{}
	var states []string
	for cur.Next(ctx) {
		r := newReader(collCards, cur.Current)
		state, token := r.str("state"), r.str(fieldReopenPending)
		if r.err != nil {
			return false, nil, r.err
		}
		found[r.id] = true
		states = append(states, state)
		if token != "" {
			pending = append(pending, token)
		}
	}
	if err := cur.Err(); err != nil {
		return false, nil, fmt.Errorf("mongostore: read blockers of %q: %w", id, err)
	}
	for _, d := range deps {
		if !found[d] {
			return false, nil, board.Invalid("card %q: unknown blocker %q", id, d)
		}
	}
	return s.freshBoard(ctx).Complete(states), pending, nil
}

// GetCard reads one card.
func (s *Store) GetCard(ctx context.Context, p board.GetCardParams) (board.Card, error) {
	if err := board.ValidateCardID(p.ID); err != nil {
		return board.Card{}, err
	}
	c, err := s.readCard(ctx, p.ID)
	if err != nil {
		return board.Card{}, err
	}
	return c.Card, nil
}

// ListCards lists cards in creation order.
func (s *Store) ListCards(ctx context.Context, f board.ListCardsParams) ([]board.Card, error) {
	if err := board.ValidateLimit(f.Limit); err != nil {
		return nil, err
	}
	filter := bson.D{}
	if f.State != "" {
		if _, err := s.requireState(ctx, f.State, false); err != nil {
			return nil, err
		}
		filter = append(filter, bson.E{Key: "state", Value: f.State})
	}
	switch {
	case len(f.ClaimHosts) > 0:
		// The boot sweep's population: this host's claims only, each
		// host an anchored pattern whose literal prefix is a range of
		// the claim index (DESIGN.md#boot-sweep). A filter document may
		// name the claim field once, so RecoveryOnly joins the patterns.
		filter = append(filter, hostsCond(f.ClaimHosts, f.RecoveryOnly))
	case f.RecoveryOnly:
		// Implies ClaimedOnly, and both conditions are on the claim field,
		// which a filter document may name only once.
		filter = append(filter, recoveryCond)
	case f.ClaimedOnly:
		filter = append(filter, claimedCond)
	}
	opts := options.Find().SetSort(creationOrder)
	if f.Limit > 0 {
		opts.SetLimit(int64(f.Limit))
	}
	return s.findCards(ctx, filter, opts)
}

// claimedCond selects claimed cards: a non-empty marker string.
var claimedCond = bson.E{Key: "claim", Value: bson.D{{Key: "$gt", Value: ""}}}

// recoveryCond selects cards held by a recovery claim, lease or no lease:
// the recovery sweep's population (DESIGN.md#recovery-sweep). It matches on the
// claim alone, so a recovery claim a foreign write stripped of its lease is
// found too. The pattern is anchored and case-sensitive, which MongoDB
// serves from the claim index as the range of markers that start with the
// prefix instead of a scan; FerretDB v1 evaluates the same $regex.
var recoveryCond = bson.E{Key: "claim", Value: bson.D{{Key: "$regex", Value: bson.Regex{Pattern: "^" + regexp.QuoteMeta(board.RecoveryPrefix)}}}}

// hostsCond selects cards claimed by a marker of one of hosts: a worker's
// "<host>-<pid>" or a recovery claim's "reaper:<host>-<pid>" (only the
// latter when recoveryOnly).
func hostsCond(hosts []string, recoveryOnly bool) bson.E {
	pats := make(bson.A, 0, 2*len(hosts))
	for _, h := range hosts {
		q := regexp.QuoteMeta(h) + "-[0-9]+$"
		pats = append(pats, bson.Regex{Pattern: "^" + regexp.QuoteMeta(board.RecoveryPrefix) + q})
		if !recoveryOnly {
			pats = append(pats, bson.Regex{Pattern: "^" + q})
		}
	}
	return bson.E{Key: "claim", Value: bson.D{{Key: "$in", Value: pats}}}
}

func (s *Store) findCards(ctx context.Context, filter bson.D, opts *options.FindOptionsBuilder) ([]board.Card, error) {
	cur, err := s.cards.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("mongostore: list cards: %w", err)
	}
	defer cur.Close(ctx)
	out := []board.Card{}
	for cur.Next(ctx) {
		c, err := decodeCard(cur.Current)
		if err != nil {
			return nil, err
		}
		out = append(out, c.Card)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("mongostore: list cards: %w", err)
	}
	return out, nil
}

// CountCards reads every card's state and claim, and only those: the
// listing of ListCards with no filter, projected to two fields, so the
// reply is a few bytes a card whatever the cards hold.
func (s *Store) CountCards(ctx context.Context) (board.CardCounts, error) {
	opts := options.Find().SetSort(creationOrder).SetProjection(bson.D{{Key: "_id", Value: 0}, {Key: "state", Value: 1}, {Key: "claim", Value: 1}})
	cur, err := s.cards.Find(ctx, bson.D{}, opts)
	if err != nil {
		return board.CardCounts{}, fmt.Errorf("mongostore: count cards: %w", err)
	}
	defer cur.Close(ctx)
	out := board.CardCounts{States: map[string]int{}}
	for cur.Next(ctx) {
		var c struct {
			State string `bson:"state"`
			Claim string `bson:"claim"`
		}
		if err := cur.Decode(&c); err != nil {
			return board.CardCounts{}, fmt.Errorf("mongostore: count cards: %w", err)
		}
		if c.State == "" {
			// As ListCards refuses it (decodeCard): a card with no state
			// is damage, not a state to count.
			return board.CardCounts{}, fmt.Errorf("mongostore: count cards: a card document has no state")
		}
		out.States[c.State]++
		if c.Claim != "" {
			out.Claimed++
		}
	}
	if err := cur.Err(); err != nil {
		return board.CardCounts{}, fmt.Errorf("mongostore: count cards: %w", err)
	}
	return out, nil
}

// Dependents lists the cards that name id as a blocker, in creation order.
func (s *Store) Dependents(ctx context.Context, p board.DependentsParams) ([]board.Card, error) {
	if err := board.ValidateCardID(p.ID); err != nil {
		return nil, err
	}
	if _, err := s.readCard(ctx, p.ID); err != nil {
		return nil, err
	}
	return s.findCards(ctx, bson.D{{Key: "depends_on", Value: p.ID}}, options.Find().SetSort(creationOrder))
}

// moveChange is the one shape of a state move: CAS on the source state,
// gave_up cleared (a move supersedes a give-up stamp), a state event.
func moveChange(c *cardState, clk serverClock, to string, reason board.Reason, actor string) *change {
	return &change{
		cond: bson.D{{Key: "state", Value: c.State}},
		set: bson.D{
			{Key: "state", Value: to},
			{Key: "state_reason", Value: string(reason)},
			{Key: "updated_at", Value: clk.now},
		},
		unset:  []string{"gave_up"},
		events: []outboxEntry{newEvent(board.EventState, c.ID, reason, actor, clk.now, board.EventData{From: c.State, To: to})},
	}
}

// afterMove promotes dependents when a move completed the card
// (board.Board.Promotes).
func (s *Store) afterMove(ctx context.Context, c *cardState, moved bool, actor string) error {
	if !moved || !s.freshBoard(ctx).Promotes(c.State, c.StateReason) {
		return nil
	}
	return s.promoteDependents(ctx, c.ID, actor)
}

// promoteDependents moves each dependent waiting on its blockers to the
// first pool state once every blocker is complete, reason unblocked (not a
// machine reason: the cascade of closing a blocker keeps its triggers,
// DESIGN.md#machine-reasons).
//
// Twin divergence: each promotion is its own single-document write, after
// the blocker's. A crash in between leaves a dependent waiting although its
// blockers are done; the next completion of any of its blockers (a
// refiling into the completion state) promotes it then.
func (s *Store) promoteDependents(ctx context.Context, id, actor string) error {
	if !s.freshBoard(ctx).Has(board.StateWaitingDeps) {
		return nil
	}
	deps, err := s.findCards(ctx, bson.D{{Key: "depends_on", Value: id}, {Key: "state", Value: board.StateWaitingDeps}},
		options.Find().SetSort(creationOrder))
	if err != nil {
		return err
	}
	// One dependent that cannot be promoted now (contention with a Reopen,
	// a store error) does not hold back the others.
	var errs []error
	for _, d := range deps {
		if _, err := s.promote(ctx, d.ID, id, actor); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// promote moves a waiting dependent to the first pool state if every one
// of its blockers is complete. The blockers are read after the dependent,
// and the move is conditioned on the dependent's reopen holds and
// generation as read, so a Reopen of a blocker either lands before the
// read (and the blocker is not complete) or is broken
// (DESIGN.md#reopen-promotion). A blocker that is gone leaves the
// dependent waiting.
func (s *Store) promote(ctx context.Context, id, blocker, actor string) (bool, error) {
	pool := s.freshBoard(ctx).FirstPool()
	for range maxReopenAttempts {
		_, wrote, err := s.mutate(ctx, id, func(c *cardState, clk serverClock) (*change, error) {
			if c.State != board.StateWaitingDeps {
				return nil, nil
			}
			if len(c.reopenHolds) > 0 {
				return nil, &heldError{tokens: c.reopenHolds}
			}
			done, pending, err := s.blockers(ctx, c.ID, c.DependsOn)
			if errors.Is(err, board.ErrInvalidArgument) || (err == nil && !done) {
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			if len(pending) > 0 {
				// A Reopen of a blocker is under way and may not have
				// held this card (it did not exist yet when that Reopen
				// listed the blocker's dependents): break it first.
				return nil, &heldError{pending: pending}
			}
			ch := moveChange(c, clk, pool, board.ReasonUnblocked, actor)
			ch.cond = append(ch.cond, same(c.raw, fieldReopenHolds), same(c.raw, fieldReopenGen))
			ch.set = append(ch.set, bson.E{Key: "promoted_by", Value: blocker})
			return ch, nil
		})
		var held *heldError
		if !errors.As(err, &held) {
			return wrote, err
		}
		if err := s.breakReopens(ctx, id, held.tokens, held.pending); err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("mongostore: promote %q: %w", id, ErrContention)
}

// SetState is the operator's move. Terminal → working is refused; terminal
// → terminal is an ordinary refiling. Moving to the current state writes
// nothing.
func (s *Store) SetState(ctx context.Context, m board.MoveParams) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if _, err := s.requireState(ctx, m.To, true); err != nil {
		return fmt.Errorf("card %q: %w", m.Card, err)
	}
	c, moved, err := s.mutate(ctx, m.Card, func(c *cardState, clk serverClock) (*change, error) {
		// An operator move declares no source: m.From is SetStateFrom's.
		brd := s.freshBoard(ctx)
		if move, err := brd.DecideMove(m.Card, c.State, "", m.To); err != nil || !move {
			return nil, err
		}
		if brd.IsPool(m.To) {
			return freshAttempts(moveChange(c, clk, m.To, m.Reason, m.Actor)), nil
		}
		return moveChange(c, clk, m.To, m.Reason, m.Actor), nil
	})
	if err != nil {
		return err
	}
	return s.afterMove(ctx, c, moved, m.Actor)
}

// SetStateFrom is the automation move: a CAS on the declared source.
func (s *Store) SetStateFrom(ctx context.Context, m board.MoveParams) (board.MoveResult, error) {
	if err := m.Validate(); err != nil {
		return board.MoveResult{}, err
	}
	if _, err := s.requireState(ctx, m.To, true); err != nil {
		return board.MoveResult{}, fmt.Errorf("card %q: %w", m.Card, err)
	}
	if m.From == "" {
		return board.MoveResult{}, board.Invalid("card %q: SetStateFrom needs a declared source state", m.Card)
	}
	if _, err := s.requireState(ctx, m.From, false); err != nil {
		return board.MoveResult{}, fmt.Errorf("card %q: from: %w", m.Card, err)
	}
	c, moved, err := s.mutate(ctx, m.Card, func(c *cardState, clk serverClock) (*change, error) {
		if move, err := s.freshBoard(ctx).DecideMove(m.Card, c.State, m.From, m.To); err != nil || !move {
			return nil, err
		}
		return moveChange(c, clk, m.To, m.Reason, m.Actor), nil
	})
	if err != nil {
		return board.MoveResult{}, err
	}
	return board.MoveResult{Changed: moved}, s.afterMove(ctx, c, moved, m.Actor)
}

// Reopen is the only exit from a terminal state (DESIGN.md#reopen). It is
// refused while any card that names this one as a blocker is outside
// waiting_deps (board.Board.ReopenBlockedBy).
//
// Twin divergence: the check of the dependents and the move are separate
// writes here (no multi-document atomicity), made to exclude a racing
// promotion by holds on the dependents (reopenOnce,
// DESIGN.md#reopen-promotion).
func (s *Store) Reopen(ctx context.Context, m board.MoveParams) error {
	if err := m.Validate(); err != nil {
		return err
	}
	target, err := s.requireState(ctx, m.To, true)
	if err != nil {
		return fmt.Errorf("card %q: %w", m.Card, err)
	}
	if err := board.ReopenInto(m.Card, target); err != nil {
		return err
	}
	if m.From != "" {
		if _, err := s.requireState(ctx, m.From, false); err != nil {
			return fmt.Errorf("card %q: from: %w", m.Card, err)
		}
	}
	b := s.freshBoard(ctx)
	for range maxReopenAttempts {
		done, err := s.reopenOnce(ctx, m, b)
		if done || err != nil {
			return err
		}
	}
	return fmt.Errorf("mongostore: reopen %q: %w", m.Card, ErrContention)
}

// AdjustLabels applies a relative label change in one atomic step: a
// compare-and-set on the label array as read, retried on a miss, so no
// concurrent caller's change is lost (DESIGN.md#label-sweeps; FerretDB has no pipeline
// updates to do it inside the server). A no-op writes nothing.
func (s *Store) AdjustLabels(ctx context.Context, lc board.AdjustLabelsParams) (board.Card, error) {
	if err := lc.Validate(); err != nil {
		return board.Card{}, err
	}
	c, _, err := s.mutate(ctx, lc.Card, func(c *cardState, clk serverClock) (*change, error) {
		next, changed, err := board.ApplyLabelChange(c.Labels, lc.Add, lc.Remove)
		if err != nil {
			return nil, fmt.Errorf("card %q: %w", lc.Card, err)
		}
		if !changed {
			return nil, nil
		}
		return labelsChange(c, clk, next, board.ReasonNone, lc.Actor), nil
	})
	if err != nil {
		return board.Card{}, err
	}
	return c.Card, nil
}

// SetLabels replaces the label set. It is absolute by contract: a caller
// that states a consumed one-shot label re-arms it (DESIGN.md#label-sweeps).
func (s *Store) SetLabels(ctx context.Context, p board.SetLabelsParams) (board.Card, error) {
	next, err := board.NormalizeSetLabels(p.Card, p.Labels, p.Actor)
	if err != nil {
		return board.Card{}, err
	}
	c, _, err := s.mutate(ctx, p.Card, func(c *cardState, clk serverClock) (*change, error) {
		if slices.Equal(c.Labels, next) {
			return nil, nil
		}
		return labelsChange(c, clk, slices.Clone(next), board.ReasonNone, p.Actor), nil
	})
	if err != nil {
		return board.Card{}, err
	}
	return c.Card, nil
}

func labelsChange(c *cardState, clk serverClock, next []string, reason board.Reason, actor string) *change {
	added, removed := board.LabelDiff(c.Labels, next)
	return &change{
		cond: bson.D{same(c.raw, "labels")},
		set:  bson.D{{Key: "labels", Value: next}, {Key: "updated_at", Value: clk.now}},
		events: []outboxEntry{newEvent(board.EventLabels, c.ID, reason, actor, clk.now,
			board.EventData{Labels: next, Added: added, Removed: removed})},
	}
}

// retryDoc is a card's own retry policy as stored (DESIGN.md#retries).
func retryDoc(p board.RetryPolicy) bson.D {
	return bson.D{
		{Key: "max_attempts", Value: int64(p.MaxAttempts)},
		{Key: "backoff_ns", Value: int64(p.Backoff)},
		{Key: "backoff_max_ns", Value: int64(p.BackoffMax)},
	}
}

// freshAttempts is the change a person's move into a pool state, and a
// Reopen, carry: a fresh set of attempts and no backoff
// (DESIGN.md#retries).
func freshAttempts(ch *change) *change {
	ch.unset = append(ch.unset, "attempts", "retry_at")
	return ch
}
