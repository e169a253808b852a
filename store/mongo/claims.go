package mongostore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/board"
)

// acquireChange grants a free card to marker: a CAS on the claim and the
// epoch exactly as read, a new epoch floored at the server clock, and the
// lease and claimed_at from the server clock (DESIGN.md#epoch-monotone).
// The claim carries the card's share key, which splits expired claims
// among the fleet's reapers (DESIGN.md#reaper-shares).
func acquireChange(c *cardState, clk serverClock, marker string, lease time.Duration) (*change, board.ClaimToken) {
	epoch := clk.epochAfter(c.ClaimEpoch)
	return &change{
		cond: bson.D{same(c.raw, "claim"), same(c.raw, "claim_epoch")},
		set: bson.D{
			{Key: "claim", Value: marker},
			{Key: "claim_epoch", Value: epoch},
			{Key: fieldShareKey, Value: board.ShareKey(c.ID)},
			{Key: "claimed_at", Value: clk.now},
			{Key: "claim_lease_until", Value: clk.leaseUntil(lease)},
			{Key: "updated_at", Value: clk.now},
		},
		events: []outboxEntry{newEvent(board.EventClaimed, c.ID, board.ReasonNone, marker, clk.now,
			board.EventData{Marker: marker, Epoch: epoch})},
	}, board.ClaimToken{Marker: marker, Epoch: epoch}
}

// Claim acquires a free card or refreshes the same marker's lease.
func (s *Store) Claim(ctx context.Context, r board.ClaimParams) (board.Card, error) {
	if err := r.Validate(); err != nil {
		return board.Card{}, err
	}
	c, _, err := s.mutate(ctx, r.Card, func(c *cardState, clk serverClock) (*change, error) {
		switch {
		case c.Claim == "":
			// A card waiting on its blockers is not taken by naming it
			// (DESIGN.md#lifecycle-refusals). The state it was judged in
			// is part of the CAS: a move into waiting_deps in between is
			// not missed. The board is read only to word a refusal.
			if c.State == board.StateWaitingDeps {
				if err := s.freshBoard(ctx).ClaimBlocked(c.Card, s.blocker(ctx)); err != nil {
					return nil, err
				}
			}
			// Nor one backing off (DESIGN.md#retries), by the server's
			// clock; retry_at as read is in the CAS.
			if err := board.RetryRefusal(c.Card, clk.now); err != nil {
				return nil, err
			}
			var ch *change
			ch, _ = acquireChange(c, clk, r.Marker, r.Lease)
			ch.cond = append(ch.cond, same(c.raw, "state"), same(c.raw, "retry_at"))
			return ch, nil
		case c.Claim == r.Marker && c.epochSet:
			// Idempotent re-claim: refresh the lease only, never backwards.
			// Same epoch, no event, no updated_at bump (DESIGN.md#epoch).
			return &change{
				cond: tokenCond(c.Token()),
				max:  bson.D{{Key: "claim_lease_until", Value: clk.leaseUntil(r.Lease)}},
			}, nil
		default:
			// Another marker — or this marker on a card whose epoch was
			// dropped, which no token can hold any more (DESIGN.md#lost-fence).
			return nil, c.conflict()
		}
	})
	if err != nil {
		return board.Card{}, err
	}
	return c.Card, nil
}

// blocker reads a card, for board.Board.ClaimBlocked to word its refusal
// with.
func (s *Store) blocker(ctx context.Context) func(id string) (board.Card, error) {
	return func(id string) (board.Card, error) { return s.GetCard(ctx, board.GetCardParams{ID: id}) }
}

// ClaimNext claims the oldest unclaimed card in a pool state. Candidates
// are read in creation order and claimed one by one with the same CAS as
// Claim; a candidate taken by someone else in between is skipped.
func (s *Store) ClaimNext(ctx context.Context, r board.ClaimNextParams) (board.Card, error) {
	if err := r.Validate(); err != nil {
		return board.Card{}, err
	}
	for round := 0; round < maxAttempts; round++ {
		clk, err := s.serverNow(ctx)
		if err != nil {
			return board.Card{}, err
		}
		filter := routed(bson.D{
			{Key: "state", Value: bson.D{{Key: "$in", Value: s.freshBoard(ctx).PoolStates()}}},
			{Key: "claim", Value: bson.D{{Key: "$in", Value: bson.A{"", nil}}}},
			notBackingOff(clk),
		}, r.Labels)
		cands, err := s.findCards(ctx, filter, options.Find().SetSort(creationOrder).SetLimit(8))
		if err != nil {
			return board.Card{}, err
		}
		if len(cands) == 0 {
			return board.Card{}, fmt.Errorf("no unclaimed card in a pool state: %w", board.ErrNotFound)
		}
		for _, cand := range cands {
			c, wrote, err := s.mutate(ctx, cand.ID, func(c *cardState, clk serverClock) (*change, error) {
				if c.Claim != "" || !s.freshBoard(ctx).IsPool(c.State) || !c.CarriesLabels(r.Labels) || c.BackingOff(clk.now) {
					return nil, nil
				}
				var ch *change
				ch, _ = acquireChange(c, clk, r.Marker, r.Lease)
				// The pool state it was judged in is part of the CAS: a
				// card moved out of the pool in between (into waiting_deps,
				// or a sink) is read again and passed over. So are the
				// labels it was routed by (DESIGN.md#label-routing), and its
				// backoff (DESIGN.md#retries).
				ch.cond = append(ch.cond, same(c.raw, "state"), same(c.raw, "retry_at"))
				if len(r.Labels) > 0 {
					ch.cond = append(ch.cond, same(c.raw, "labels"))
				}
				return ch, nil
			})
			if err != nil {
				return board.Card{}, err
			}
			if wrote {
				return c.Card, nil
			}
		}
	}
	return board.Card{}, fmt.Errorf("mongostore: claim next: %w", ErrContention)
}

// routed narrows a listing of free pool cards to the cards carrying every
// label in labels (DESIGN.md#label-routing): the condition leads the filter,
// where the index that serves it leads with the labels.
func routed(filter bson.D, labels []string) bson.D {
	if len(labels) == 0 {
		return filter
	}
	var cond bson.E
	if len(labels) == 1 {
		cond = bson.E{Key: "labels", Value: labels[0]}
	} else {
		cond = bson.E{Key: "labels", Value: bson.D{{Key: "$all", Value: labels}}}
	}
	return append(bson.D{cond}, filter...)
}

// RenewClaims pushes each hold's lease to server-now + lease, never
// backwards, in ONE BulkWrite for the whole tick. A renewal emits no event
// and leaves updated_at alone: a heartbeat is not a change to the card.
//
// A bulk write reports counts, not which update matched, so the cards are
// read back afterwards. A hold whose card still carries its exact token
// was renewed: an epoch only goes up, so a card that holds the token now
// held it when the update ran. A hold lost in between is reported as a
// conflict, which is the truth by the time the caller sees it.
func (s *Store) RenewClaims(ctx context.Context, p board.RenewClaimsParams) ([]board.RenewResult, error) {
	if err := board.ValidateLease("", p.Lease); err != nil {
		return nil, err
	}
	out := make([]board.RenewResult, len(p.Holds))
	if len(p.Holds) == 0 {
		return out, ctx.Err()
	}
	clk, err := s.serverNow(ctx)
	if err != nil {
		return nil, err
	}
	until := clk.leaseUntil(p.Lease)
	var (
		models []mongo.WriteModel
		ids    []string
	)
	for i, h := range p.Holds {
		out[i].Card = h.Card
		if err := board.ValidateToken(h.Card, h.Token); err != nil {
			out[i].Err = err
			continue
		}
		models = append(models, mongo.NewUpdateOneModel().
			SetFilter(append(bson.D{{Key: "_id", Value: h.Card}}, tokenCond(h.Token)...)).
			SetUpdate(bson.D{{Key: "$max", Value: bson.D{{Key: "claim_lease_until", Value: until}}}}))
		ids = append(ids, h.Card)
	}
	if len(models) == 0 {
		return out, nil
	}
	for from := 0; from < len(models); from += RenewChunk {
		chunk := models[from:min(from+RenewChunk, len(models))]
		if _, err := s.cards.BulkWrite(ctx, chunk, options.BulkWrite().SetOrdered(false)); err != nil {
			return nil, writeErr("mongostore: renew claims", err)
		}
	}
	byID := make(map[string]*cardState, len(ids))
	for from := 0; from < len(ids); from += RenewChunk {
		if err := s.readBackRenewed(ctx, p.Holds, ids[from:min(from+RenewChunk, len(ids))], out, byID); err != nil {
			return nil, err
		}
	}
	for i, h := range p.Holds {
		if out[i].Err != nil {
			continue
		}
		c, ok := byID[h.Card]
		switch {
		case !ok:
			out[i].Err = board.NotFound("card", h.Card)
		case !c.holds(h.Token):
			out[i].Err = c.conflict()
		default:
			out[i].LeaseUntil = c.ClaimLeaseUntil
		}
	}
	return out, nil
}

// RenewChunk bounds the holds one renewal command carries, and the cards
// one read-back asks for. A tick of more holds is several commands. The
// MongoDB-wire test server (FerretDB) hangs for every client on an update
// of 100 statements or more (DESIGN.md#twin-writes).
const RenewChunk = 64

// renewedProjection is the fields of a card a renewal's read-back reads.
var renewedProjection = bson.D{
	{Key: "state", Value: 1}, {Key: "claim", Value: 1}, {Key: "claim_epoch", Value: 1}, {Key: "claim_lease_until", Value: 1},
}

// readBackRenewed reads the cards ids after their renewal into byID; a
// corrupt card fails its own holds in out, not the tick.
func (s *Store) readBackRenewed(ctx context.Context, hs []board.Hold, ids []string, out []board.RenewResult, byID map[string]*cardState) error {
	// Only what the tick reads: the claim, its fence and lease (and the
	// state, which every card has).
	cur, err := s.cards.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(renewedProjection))
	if err != nil {
		return fmt.Errorf("mongostore: renew claims: read back: %w: %w", board.ErrOutcomeUnknown, err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		c, err := decodeCard(cur.Current)
		if err != nil {
			// A corrupt card fails its own hold, not the batch.
			var de *DocumentError
			if errors.As(err, &de) {
				for i, h := range hs {
					if h.Card == de.ID && out[i].Err == nil {
						out[i].Err = err
					}
				}
				continue
			}
			return err
		}
		byID[c.ID] = c
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("mongostore: renew claims: read back: %w: %w", board.ErrOutcomeUnknown, err)
	}
	return nil
}

// owned runs a fenced owner write: the token must be the card's current
// claim, fence included, and the write's filter carries the same condition
// so a claim lost between the read and the write refuses it. A stale token
// is refused even when the write would change nothing (DESIGN.md#fence).
func (s *Store) owned(ctx context.Context, card string, tok board.ClaimToken, p plan) (*cardState, bool, error) {
	return s.ownedFrom(ctx, card, nil, tok, p)
}

// ownedFrom is owned planning its first attempt on first, a read of the
// card the caller has just made (nil: read it).
func (s *Store) ownedFrom(ctx context.Context, card string, first *cardState, tok board.ClaimToken, p plan) (*cardState, bool, error) {
	if err := board.ValidateToken(card, tok); err != nil {
		return nil, false, err
	}
	return s.mutateFrom(ctx, card, first, func(c *cardState, clk serverClock) (*change, error) {
		if !c.holds(tok) {
			return nil, c.conflict()
		}
		ch, err := p(c, clk)
		if ch != nil {
			ch.cond = append(ch.cond, tokenCond(tok)...)
		}
		return ch, err
	})
}

// SetStateOwned is the holder's fenced move.
func (s *Store) SetStateOwned(ctx context.Context, m board.SetStateOwnedParams) (board.MoveResult, error) {
	if err := m.Validate(); err != nil {
		return board.MoveResult{}, err
	}
	if _, err := s.requireState(ctx, m.To, true); err != nil {
		return board.MoveResult{}, fmt.Errorf("card %q: %w", m.Card, err)
	}
	if m.From != "" {
		if _, err := s.requireState(ctx, m.From, false); err != nil {
			return board.MoveResult{}, fmt.Errorf("card %q: from: %w", m.Card, err)
		}
	}
	reason := m.StampedReason()
	retrying := false // the write is a retry's stamp alone, not a move
	c, moved, err := s.owned(ctx, m.Card, m.Token, func(c *cardState, clk serverClock) (*change, error) {
		retrying = false
		brd := s.freshBoard(ctx)
		if move, err := brd.DecideMove(m.Card, c.State, m.From, m.To); err != nil {
			return nil, err
		} else if !move {
			if m.Retry && c.State == m.To && (m.From == "" || m.From == c.State) {
				// A retry filed where the card already is (it was run
				// in the pool) backs off all the same: the stamp alone,
				// no state event, no move reported (DESIGN.md#retries).
				retrying = true
				return &change{
					cond: bson.D{same(c.raw, "state")},
					set:  bson.D{{Key: "retry_at", Value: clk.now.Add(brd.RetryFor(c.Card).Delay(max(c.Attempts, 1)))}},
				}, nil
			}
			return nil, nil
		}
		ch := moveChange(c, clk, m.To, reason, m.Token.Marker)
		if m.Retry {
			// DESIGN.md#retries: the backoff is stamped by the server's clock.
			ch.set = append(ch.set, bson.E{Key: "retry_at", Value: clk.now.Add(brd.RetryFor(c.Card).Delay(max(c.Attempts, 1)))})
		}
		return ch, nil
	})
	if err != nil {
		return board.MoveResult{}, err
	}
	moved = moved && !retrying
	return board.MoveResult{Changed: moved}, s.afterMove(ctx, c, moved, m.Token.Marker)
}

// SetLastRunOwned records the card's current run and appends it to the
// run pointers (append-only).
func (s *Store) SetLastRunOwned(ctx context.Context, p board.SetLastRunOwnedParams) error {
	if err := board.ValidateName("run id", p.RunID); err != nil {
		return fmt.Errorf("card %q: %w", p.Card, err)
	}
	_, _, err := s.owned(ctx, p.Card, p.Token, func(c *cardState, clk serverClock) (*change, error) {
		ch := pointAtChange(c, clk, p.RunID, p.Token)
		if c.run != nil && c.run.ID == p.RunID {
			if err := board.PointFence(p.Card, *c.run, p.Token); err != nil {
				return nil, err
			}
			// The embedded run as read is what the fence judged.
			if ch != nil {
				ch.cond = append(ch.cond, same(c.raw, fieldRun))
			}
		} else if old, err := s.readArchivedRun(ctx, p.RunID); err == nil {
			// An archived run's owner and epoch no longer change.
			if err := board.PointFence(p.Card, old.Run, p.Token); err != nil {
				return nil, err
			}
		} else if !errors.Is(err, board.ErrNotFound) {
			return nil, err
		}
		// The same pointer stamped again under a new claim (a run that
		// has its verdict) is a change: the pointer now belongs to this
		// claim.
		return ch, nil
	})
	return err
}

// SetAwaitingInputOwned sets or clears the awaiting-input flag.
func (s *Store) SetAwaitingInputOwned(ctx context.Context, p board.SetAwaitingInputOwnedParams) error {
	_, _, err := s.owned(ctx, p.Card, p.Token, func(c *cardState, clk serverClock) (*change, error) {
		if c.AwaitingInput == p.Awaiting {
			return nil, nil
		}
		return &change{
			set: bson.D{{Key: "awaiting_input", Value: p.Awaiting}, {Key: "updated_at", Value: clk.now}},
			events: []outboxEntry{newEvent(board.EventAwaitingInput, p.Card, board.ReasonNone, p.Token.Marker, clk.now,
				board.EventData{Value: p.Awaiting})},
		}, nil
	})
	return err
}

// SetGaveUpOwned stamps (or, with nil, clears) the give-up record.
func (s *Store) SetGaveUpOwned(ctx context.Context, p board.SetGaveUpOwnedParams) error {
	if p.GaveUp != nil {
		if err := board.ValidateGaveUp(p.Card, *p.GaveUp); err != nil {
			return err
		}
		if p.GaveUp.State != "" {
			if _, err := s.requireState(ctx, p.GaveUp.State, false); err != nil {
				return fmt.Errorf("card %q: give-up state: %w", p.Card, err)
			}
		}
	}
	_, _, err := s.owned(ctx, p.Card, p.Token, func(c *cardState, clk serverClock) (*change, error) {
		if p.GaveUp == nil && c.GaveUp == nil {
			return nil, nil
		}
		ch := &change{set: bson.D{{Key: "updated_at", Value: clk.now}}}
		data := board.EventData{}
		if p.GaveUp == nil {
			ch.unset = []string{"gave_up"}
		} else {
			at := p.GaveUp.At
			if at.IsZero() {
				at = clk.now
			}
			st := *p.GaveUp
			st.At = at
			ch.set = append(ch.set, bson.E{Key: "gave_up", Value: gaveUpDoc(st)})
			data = board.EventData{RunID: p.GaveUp.RunID, To: p.GaveUp.State, Value: true}
		}
		ch.events = []outboxEntry{newEvent(board.EventGaveUp, p.Card, board.ReasonNone, p.Token.Marker, clk.now, data)}
		return ch, nil
	})
	return err
}

// ExpireClaimOwned ends the lease at server-now so the watchdog may rule on
// the card without waiting out the TTL. $min never extends a lease that
// already ended. Like a renewal it is a lease change, not a card change: no
// event, no updated_at.
func (s *Store) ExpireClaimOwned(ctx context.Context, p board.OwnedParams) error {
	_, _, err := s.owned(ctx, p.Card, p.Token, func(c *cardState, clk serverClock) (*change, error) {
		if c.leaseSet && !c.ClaimLeaseUntil.After(clk.now) {
			return nil, nil
		}
		return &change{min: bson.D{{Key: "claim_lease_until", Value: clk.now}}}, nil
	})
	return err
}

// DisownClaimOwned marks the claim one its agent gave up on
// (board.Card.Disowned) and leaves the claim and its lease as they are. Like
// a renewal it is not a card change: no event, no updated_at.
func (s *Store) DisownClaimOwned(ctx context.Context, p board.OwnedParams) error {
	_, _, err := s.owned(ctx, p.Card, p.Token, func(c *cardState, _ serverClock) (*change, error) {
		if c.DisownedEpoch == c.ClaimEpoch {
			return nil, nil
		}
		return &change{set: bson.D{{Key: "disowned_epoch", Value: c.ClaimEpoch}}}, nil
	})
	return err
}

// releaseChange clears the claim and keeps the epoch: the fence only goes
// up, so the next acquisition continues from it (DESIGN.md#epoch-monotone).
func releaseChange(c *cardState, clk serverClock, actor string) *change {
	return &change{
		set:   bson.D{{Key: "claim", Value: ""}, {Key: "updated_at", Value: clk.now}},
		unset: []string{"claimed_at", "claim_lease_until", "recovered_epoch"},
		events: []outboxEntry{newEvent(board.EventReleased, c.ID, board.ReasonNone, actor, clk.now,
			board.EventData{Marker: c.Claim, Epoch: c.ClaimEpoch})},
	}
}

// ReleaseOwned is the holder's release. A free card is nil.
func (s *Store) ReleaseOwned(ctx context.Context, p board.OwnedParams) error {
	if err := board.ValidateToken(p.Card, p.Token); err != nil {
		return err
	}
	// The released claim's open run is closed in the same CAS, so it
	// must be embedded first.
	if _, err := s.adoptRecorded(ctx, p.Card); err != nil {
		return err
	}
	b := s.freshBoard(ctx)
	_, _, err := s.mutate(ctx, p.Card, func(c *cardState, clk serverClock) (*change, error) {
		if c.Claim == "" {
			return nil, nil
		}
		if !c.holds(p.Token) {
			return nil, c.conflict()
		}
		ch := s.handBack(b, c, clk, p.Token.Marker)
		ch.cond = append(ch.cond, tokenCond(p.Token)...)
		return ch, nil
	})
	return err
}

// handBack is the change of Release and ReleaseOwned on the card as read:
// the released claim's own open run closed (board.ReleasedRun), the card
// filed out of a column that would strand it (board.ReleaseFiling), the
// claim cleared. Its conditions are the embedded run and the state as
// read; the caller adds the claim's.
func (s *Store) handBack(b board.Board, c *cardState, clk serverClock, actor string) *change {
	var closed, move *change
	if run := c.recordedRun(); run != nil {
		if next, ok := board.ReleasedRun(c.Card, *run, clk.now); ok {
			closed = setRun(c, next, board.EventRunUpdated, actor)
		}
	}
	if to := b.ReleaseFiling(c.State); to != "" {
		move = moveChange(c, clk, to, board.ReasonNone, actor)
	}
	asRead := &change{cond: bson.D{same(c.raw, "state"), same(c.raw, fieldRun)}}
	return merge(asRead, closed, move, releaseChange(c, clk, actor))
}

// Release clears a claim held by exactly marker, whatever its epoch — even
// a card whose epoch was dropped: it is the operator's force-release and
// the sweeps' tool for claims nobody can use (DESIGN.md#sweeps), not a fenced
// owner write.
func (s *Store) Release(ctx context.Context, p board.ReleaseParams) error {
	if err := board.ValidateCardID(p.Card); err != nil {
		return err
	}
	if err := board.ValidateMarker(p.Marker); err != nil {
		return fmt.Errorf("card %q: %w", p.Card, err)
	}
	if err := board.ValidateText("actor", p.Actor); err != nil {
		return fmt.Errorf("card %q: %w", p.Card, err)
	}
	// The released claim's open run is closed in the same CAS, so it
	// must be embedded first.
	if _, err := s.adoptRecorded(ctx, p.Card); err != nil {
		return err
	}
	b := s.freshBoard(ctx)
	_, _, err := s.mutate(ctx, p.Card, func(c *cardState, clk serverClock) (*change, error) {
		if c.Claim == "" {
			return nil, nil
		}
		if c.Claim != p.Marker {
			return nil, c.conflict()
		}
		ch := s.handBack(b, c, clk, p.Actor)
		ch.cond = append(ch.cond, bson.E{Key: "claim", Value: p.Marker}, same(c.raw, "claim_epoch"))
		return ch, nil
	})
	return err
}

// ReleaseExpired releases an abandoned claim in ONE CAS on its whole
// precondition: the claim is still exactly Prev (Prev.Epoch 0 names a card
// whose epoch field is gone) and still expired at Cutoff — its lease ended
// by then, or it carries none.
func (s *Store) ReleaseExpired(ctx context.Context, r board.ReleaseExpiredParams) error {
	if err := r.Validate(); err != nil {
		return err
	}
	_, _, err := s.mutate(ctx, r.Card, func(c *cardState, clk serverClock) (*change, error) {
		var cond bson.D
		switch {
		case r.Prev.Epoch == 0 && !c.epochSet && c.Claim == r.Prev.Marker:
			cond = bson.D{{Key: "claim", Value: r.Prev.Marker}, noEpoch}
		case r.Prev.Epoch != 0 && c.holds(r.Prev):
			cond = tokenCond(r.Prev)
		default:
			return nil, c.conflict()
		}
		switch {
		case !c.leaseSet:
			cond = append(cond, bson.E{Key: "claim_lease_until", Value: nil})
		case !c.ClaimLeaseUntil.After(r.Cutoff):
			cond = append(cond, bson.E{Key: "claim_lease_until", Value: bson.D{{Key: "$lte", Value: r.Cutoff}}})
		default:
			return nil, c.conflict()
		}
		if r.State != "" {
			if c.State != r.State {
				return nil, board.MovedSince(r.Card, r.State, c.State)
			}
			cond = append(cond, bson.E{Key: "state", Value: r.State})
		}
		ch := releaseChange(c, clk, r.Actor)
		ch.cond = cond
		return ch, nil
	})
	return err
}

// noEpoch matches a card whose epoch field is gone: missing, or null (a
// foreign writer's $set to null reads as missing too, so both must be
// transferable by the token that names "no epoch").
var noEpoch = bson.E{Key: "claim_epoch", Value: nil}

// ListExpiredClaimCandidates lists claims the watchdog may rule on, with
// the batch cap applied in the queries. Two arms:
//
//   - the lease arm: a lease that ended at or before cutoff, lease
//     ascending;
//   - the un-leased arm (this twin only, DESIGN.md#unleased-arm): a claim with no
//     lease at all whose card was last updated at or before
//     cutoff − UnleasedHorizon, oldest update first. A foreign whole-document
//     write strips the lease; its absence proves nothing about the holder,
//     hence the much longer horizon.
//
// Un-leased candidates come first (a missing lease sorts before every
// lease), but take at most half the batch while leased candidates wait, so
// neither arm can starve the other with cards the watchdog keeps.
//
// With q.Share both arms list only that reaper's share
// (DESIGN.md#reaper-shares).
func (s *Store) ListExpiredClaimCandidates(ctx context.Context, q board.ListExpiredClaimCandidatesParams) (board.ListExpiredClaimCandidatesResult, error) {
	if err := q.Validate(); err != nil {
		return board.ListExpiredClaimCandidatesResult{}, err
	}
	pos, err := decodePosition(q.After)
	if err != nil {
		return board.ListExpiredClaimCandidatesResult{}, err
	}
	// A share that cannot be worked out is no reason to list nothing: a
	// reaper whose record landed but whose read failed would hold a share
	// it never examines. It lists every share instead.
	sh, shareErr := s.reaperShare(ctx, q.Share)
	leasedOpts := options.Find().SetSort(leaseOrder)
	unleasedOpts := options.Find().SetSort(updateOrder)
	if q.Limit > 0 {
		leasedOpts.SetLimit(int64(q.Limit))
		unleasedOpts.SetLimit(int64(q.Limit))
	}
	leased, err := s.findCards(ctx, append(bson.D{
		claimedCond,
		{Key: "claim_lease_until", Value: bson.D{{Key: "$lte", Value: q.Cutoff}}},
	}, append(pos.Leased.after("claim_lease_until"), sh.cond...)...), leasedOpts)
	if err != nil {
		return board.ListExpiredClaimCandidatesResult{}, err
	}
	unleased, err := s.findCards(ctx, append(bson.D{
		claimedCond,
		{Key: "claim_lease_until", Value: nil},
		{Key: "updated_at", Value: bson.D{{Key: "$lte", Value: q.Cutoff.Add(-s.horizon)}}},
	}, append(pos.Unleased.after("updated_at"), sh.cond...)...), unleasedOpts)
	if err != nil {
		return board.ListExpiredClaimCandidatesResult{}, err
	}
	more := false
	if q.Limit > 0 {
		nU := min(len(unleased), max(q.Limit-len(leased), (q.Limit+1)/2))
		nL := min(len(leased), q.Limit-nU)
		// An arm has more beyond this page when it filled its query or
		// the split cut it short.
		more = len(leased) == q.Limit || len(unleased) == q.Limit || nL < len(leased) || nU < len(unleased)
		unleased, leased = unleased[:nU], leased[:nL]
	}
	page := board.ListExpiredClaimCandidatesResult{Cards: append(unleased, leased...), Reapers: sh.n, ShareIndex: sh.r}
	if shareErr != nil {
		page.ShareError = shareErr.Error()
	}
	if more {
		if n := len(leased); n > 0 {
			pos.Leased = &armPosition{At: leased[n-1].ClaimLeaseUntil, Card: leased[n-1].ID}
		}
		if n := len(unleased); n > 0 {
			pos.Unleased = &armPosition{At: unleased[n-1].UpdatedAt, Card: unleased[n-1].ID}
		}
		page.Next = pos.encode()
	}
	return page, nil
}

// position is where a paged expired listing resumes: the last card each
// arm returned, by the arm's own sort key.
type position struct {
	Leased   *armPosition `json:"l,omitempty"`
	Unleased *armPosition `json:"u,omitempty"`
}

type armPosition struct {
	At   time.Time `json:"t"`
	Card string    `json:"c"`
}

func decodePosition(v string) (position, error) {
	var p position
	if v == "" {
		return p, nil
	}
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return p, board.Invalid("listing position %q was not issued by this store", v)
	}
	return p, nil
}

func (p position) encode() string {
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("mongostore: encode a listing position: %v", err)) // plain struct of a time and a string
	}
	return string(b)
}

// after is the query condition "strictly after this position" on an arm
// sorted by (field, _id); none for an arm that has not returned anything.
func (a *armPosition) after(field string) bson.D {
	if a == nil {
		return nil
	}
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: field, Value: bson.D{{Key: "$gt", Value: a.At}}}},
		bson.D{{Key: field, Value: a.At}, {Key: "_id", Value: bson.D{{Key: "$gt", Value: a.Card}}}},
	}}}
}

// ListUnleasedRunningClaims lists claims with no lease whose card sits in
// the running column with a recorded run and was last updated at or before
// cutoff, oldest update first. The selection filter is IN the query and the
// cap is the query's limit: filtered afterwards, the conserved population
// (never written, hence always oldest) would fill every batch and starve
// the rest for ever (DESIGN.md#unleased-sweep).
func (s *Store) ListUnleasedRunningClaims(ctx context.Context, p board.ListUnleasedRunningClaimsParams) ([]board.Card, error) {
	if err := board.ValidateLimit(p.Limit); err != nil {
		return nil, err
	}
	opts := options.Find().SetSort(updateOrder)
	if p.Limit > 0 {
		opts.SetLimit(int64(p.Limit))
	}
	return s.findCards(ctx, bson.D{
		claimedCond,
		{Key: "claim_lease_until", Value: nil},
		{Key: "state", Value: s.freshBoard(ctx).Running()},
		{Key: "last_run_id", Value: bson.D{{Key: "$gt", Value: ""}}},
		{Key: "updated_at", Value: bson.D{{Key: "$lte", Value: p.Cutoff}}},
	}, opts)
}

// ReclaimExpired transfers an expired claim to a recovery marker in ONE
// CAS: the claim must still be exactly Prev and still expired — a renewal,
// an operator or another agent's reaper in between makes it a clean
// conflict (DESIGN.md#transfer-first).
//
// On this twin "expired" has the un-leased arm too: a claim with no lease
// whose card has not been updated for UnleasedHorizon before Cutoff. Such a
// claim may also have lost its epoch; Prev.Epoch 0 then names "no epoch
// field" (the card reads as epoch 0), which is the only way to transfer a
// card that refuses every fenced write. The new epoch is floored at the
// server clock, so the fence stays monotone across the loss.
func (s *Store) ReclaimExpired(ctx context.Context, r board.ReclaimExpiredParams) (board.Card, error) {
	if err := board.ValidateCardID(r.Card); err != nil {
		return board.Card{}, err
	}
	if err := board.ValidateMarker(r.Prev.Marker); err != nil || r.Prev.Epoch < 0 {
		return board.Card{}, board.Invalid("card %q: bad previous claim token %+v", r.Card, r.Prev)
	}
	// The previous token may carry no epoch on this twin (see above), so
	// only the recovery side is checked the common way.
	if err := r.ValidateRecovery(); err != nil {
		return board.Card{}, err
	}
	// A zero cutoff is not refused as invalid: nothing expired at or
	// before it, so the CAS refuses with a conflict, which is what a
	// caller that read a free card (no lease) and passes its lease needs.
	c, _, err := s.mutate(ctx, r.Card, func(c *cardState, clk serverClock) (*change, error) {
		cond := bson.D{{Key: "claim", Value: r.Prev.Marker}}
		if r.Prev.Epoch == 0 {
			if c.epochSet || c.Claim != r.Prev.Marker {
				return nil, c.conflict()
			}
			cond = append(cond, noEpoch)
		} else {
			if !c.holds(r.Prev) {
				return nil, c.conflict()
			}
			cond = tokenCond(r.Prev)
		}
		switch {
		case c.leaseSet && !c.ClaimLeaseUntil.After(r.Cutoff):
			cond = append(cond, bson.E{Key: "claim_lease_until", Value: bson.D{{Key: "$lte", Value: r.Cutoff}}})
		case !c.leaseSet && !c.UpdatedAt.After(r.Cutoff.Add(-s.horizon)):
			cond = append(cond, bson.E{Key: "claim_lease_until", Value: nil}, same(c.raw, "updated_at"))
		default:
			return nil, c.conflict()
		}
		ch, _ := acquireChange(c, clk, r.RecoveryMarker, r.Lease)
		ch.cond = cond
		// The judged claim survives the transfer: a recovery claim taken
		// over from another one keeps the worker epoch it already names.
		if !board.IsRecoveryMarker(c.Claim) {
			ch.set = append(ch.set, bson.E{Key: "recovered_epoch", Value: c.ClaimEpoch})
		}
		return ch, nil
	})
	if err != nil {
		return board.Card{}, err
	}
	return c.Card, nil
}

// notBackingOff is the condition of a pick on the pool (ClaimNext, Start
// next) that passes over a card backing off after a retryable failure
// until its retry_at, by the server's clock (DESIGN.md#retries): no
// retry_at, one not after now, or one beyond now plus board.MaxBackoff. It is checked on the cards the queue's
// index selects, so the pick stays served by that index
// (DESIGN.md#fleet-indexes).
func notBackingOff(clk serverClock) bson.E {
	// A retry_at beyond any backoff a policy stamps was stamped by a clock
	// since stepped back: not backing off (board.Card.BackingOff).
	return bson.E{Key: "retry_at", Value: bson.D{{Key: "$not", Value: bson.D{
		{Key: "$gt", Value: clk.now}, {Key: "$lte", Value: clk.now.Add(board.MaxBackoff)}}}}}
}

// gaveUpDoc is a give-up stamp as stored.
func gaveUpDoc(g board.GaveUp) bson.D {
	return bson.D{
		{Key: "run_id", Value: g.RunID},
		{Key: "state", Value: g.State},
		{Key: "attempts", Value: int64(g.Attempts)},
		{Key: "reason", Value: g.Reason},
		{Key: "at", Value: g.At},
	}
}
