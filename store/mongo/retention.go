package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/board"
)

// Retention on the fleet twin (DESIGN.md#retention).
//
// Runs: a finished card's current run is embedded in it (runs.go), so the
// listing is the sink cards that still embed a run older than the cutoff
// (index state_run_updated_id); each card's archived runs are deleted from
// the runs collection by id, then its embedded run is unset in one
// compare-and-set on the card as read (still in its sink, still free, the
// run as read). A card that changed since the listing is planned again and
// left alone when it is no longer finished; its archived runs may already
// be gone, and a claim that re-stamps one of them is the watchdog's row 2.
//
// Events: the cards' pending outboxes older than the cutoff are published
// first; then the oldest events below the cutoff's sequence number (whole
// seconds: a sequence number's resolution) are deleted by id, except the
// highest, which is turned into a marker in place (the same _id and key,
// type eventsPrunedType) before the others go. A reader from a
// position below a marker meets it and is refused (ErrEventsPruned); a
// reader from 0 passes over it. Every step is idempotent and conditioned
// on what it deletes still being an event, so agents pruning side by side
// delete, and count, each event once — except that an outbox one agent's
// publish read before another's prune deleted its events may publish them
// again: they are real events, read as such, and the next pass deletes
// them (and counts them again).

// eventsPrunedType is the type of a marker left in the events collection
// where a prune stopped; it is never an event.
const eventsPrunedType = "_events_pruned"

// runUpdateOrder is the prune listing's order: the oldest embedded run first.
var runUpdateOrder = bson.D{{Key: fieldRun + ".updated_at", Value: 1}, {Key: "_id", Value: 1}}

// Prune deletes at most p.Limit runs of finished cards and p.Limit events
// older than p.Before.
func (s *Store) Prune(ctx context.Context, p board.PruneParams) (board.PruneResult, error) {
	if err := p.Validate(); err != nil {
		return board.PruneResult{}, err
	}
	out := board.PruneResult{Cards: []string{}, DryRun: p.DryRun}
	if err := s.pruneRuns(ctx, p, &out); err != nil {
		return board.PruneResult{}, err
	}
	if err := s.pruneEvents(ctx, p, &out); err != nil {
		return board.PruneResult{}, err
	}
	return out, nil
}

func (s *Store) pruneRuns(ctx context.Context, p board.PruneParams, out *board.PruneResult) error {
	limit := p.EffectiveLimit()
	brd := s.freshBoard(ctx)
	var sinks []string
	for _, st := range brd.States {
		if st.Terminal {
			sinks = append(sinks, st.Name)
		}
	}
	filter := bson.D{
		{Key: "state", Value: bson.D{{Key: "$in", Value: sinks}}},
		{Key: fieldRun + ".updated_at", Value: bson.D{{Key: "$lt", Value: p.Before}}},
		{Key: "claim", Value: bson.D{{Key: "$in", Value: bson.A{"", nil}}}},
		{Key: "updated_at", Value: bson.D{{Key: "$lt", Value: p.Before}}},
	}
	cards, err := s.findCardStates(ctx, filter, options.Find().SetSort(runUpdateOrder).SetLimit(int64(limit)+1))
	if err != nil {
		return err
	}
	for _, c := range cards {
		if out.Runs >= limit {
			out.More = true
			return nil
		}
		n, err := s.pruneCardRuns(ctx, brd, c, p)
		if err != nil {
			return err
		}
		if n > 0 {
			out.Runs += n
			out.Cards = append(out.Cards, c.ID)
		}
	}
	return nil
}

// pruneCardRuns deletes the runs of one listed card older than the cutoff
// and returns how many went (would go, with p.DryRun).
func (s *Store) pruneCardRuns(ctx context.Context, brd board.Board, c *cardState, p board.PruneParams) (int, error) {
	old := func(c *cardState) bool {
		return brd.Finished(c.Card) && c.UpdatedAt.Before(p.Before) && c.run != nil && c.run.UpdatedAt.Before(p.Before)
	}
	if !old(c) {
		return 0, nil
	}
	archived := slices.DeleteFunc(slices.Clone(c.Runs), func(id string) bool { return id == c.run.ID })
	n := 0
	if len(archived) > 0 {
		filter := bson.D{
			{Key: "_id", Value: bson.D{{Key: "$in", Value: archived}}},
			{Key: "updated_at", Value: bson.D{{Key: "$lt", Value: p.Before}}},
		}
		if p.DryRun {
			cur, err := s.runs.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
			if err != nil {
				return 0, fmt.Errorf("mongostore: prune: list runs of %q: %w", c.ID, err)
			}
			var docs []bson.Raw
			if err := cur.All(ctx, &docs); err != nil {
				return 0, fmt.Errorf("mongostore: prune: list runs of %q: %w", c.ID, err)
			}
			n += len(docs)
		} else {
			res, err := s.runs.DeleteMany(ctx, filter)
			if err != nil {
				return 0, writeErr(fmt.Sprintf("mongostore: prune: delete runs of %q", c.ID), err)
			}
			n += int(res.DeletedCount)
		}
	}
	if p.DryRun {
		return n + 1, nil
	}
	_, landed, err := s.mutateFrom(ctx, c.ID, c, func(c *cardState, _ serverClock) (*change, error) {
		if !old(c) {
			return nil, nil // reopened, claimed or written since the listing
		}
		return &change{
			cond:  bson.D{same(c.raw, "state"), same(c.raw, "claim"), same(c.raw, fieldRun)},
			unset: []string{fieldRun},
		}, nil
	})
	if errors.Is(err, board.ErrNotFound) {
		return n, nil // deleted meanwhile
	}
	if err != nil {
		return n, err
	}
	if landed {
		n++
	}
	return n, nil
}

// findCardStates runs a find on the cards and decodes each card.
func (s *Store) findCardStates(ctx context.Context, filter bson.D, opts *options.FindOptionsBuilder) ([]*cardState, error) {
	cur, err := s.cards.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("mongostore: list cards: %w", err)
	}
	defer cur.Close(ctx)
	var out []*cardState
	for cur.Next(ctx) {
		c, err := decodeCard(cur.Current)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("mongostore: list cards: %w", err)
	}
	return out, nil
}

func (s *Store) pruneEvents(ctx context.Context, p board.PruneParams, out *board.PruneResult) error {
	limit := p.EffectiveLimit()
	cut, err := seqOf(stampAt(p.Before), 0)
	if err != nil {
		return err
	}
	if p.KeepFrom > 0 && p.KeepFrom < cut {
		cut = p.KeepFrom
	}
	// Events still in their cards' outboxes are published first, so the
	// cutoff finds them in the log (publishing changes no event a reader
	// sees, so a dry run does it too).
	if _, err := s.compact(ctx, p.Before, false); err != nil {
		return err
	}
	cur, err := s.events.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$lt", Value: cut}}}},
		options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)+1).
			SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "type", Value: 1}}))
	if err != nil {
		return fmt.Errorf("mongostore: prune: list events: %w", err)
	}
	var docs []bson.Raw
	if err := cur.All(ctx, &docs); err != nil {
		return fmt.Errorf("mongostore: prune: list events: %w", err)
	}
	var real, markers []int64
	for _, d := range docs {
		seq, err := eventSeq(d)
		if err != nil {
			return err
		}
		if typ, _ := d.Lookup("type").StringValueOK(); typ == eventsPrunedType {
			markers = append(markers, seq)
			continue
		}
		if len(real) == limit {
			out.More = true
			break
		}
		real = append(real, seq)
	}
	if len(real) == 0 {
		return nil
	}
	top := real[len(real)-1]
	out.EventsThrough = top
	if p.DryRun {
		out.Events = len(real)
		return nil
	}
	// The marker first: from now on a reader below it is refused, before
	// anything below it is gone.
	res, err := s.events.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: top}, {Key: "type", Value: bson.D{{Key: "$ne", Value: eventsPrunedType}}}},
		// The marker keeps the event's key: a compactor publishing the
		// same outbox entry again finds it there, not a collision.
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "type", Value: eventsPrunedType},
		}}, {Key: "$unset", Value: bson.D{
			{Key: "card", Value: ""}, {Key: "reason", Value: ""}, {Key: "actor", Value: ""}, {Key: "data", Value: ""},
		}}})
	if err != nil {
		return writeErr("mongostore: prune: mark the events pruned", err)
	}
	out.Events += int(res.ModifiedCount)
	if below := real[:len(real)-1]; len(below) > 0 {
		res, err := s.events.DeleteMany(ctx, bson.D{
			{Key: "_id", Value: bson.D{{Key: "$in", Value: below}}},
			{Key: "type", Value: bson.D{{Key: "$ne", Value: eventsPrunedType}}},
		})
		if err != nil {
			return writeErr("mongostore: prune: delete events", err)
		}
		out.Events += int(res.DeletedCount)
	}
	// Markers below the new one are covered by it.
	var stale []int64
	for _, m := range markers {
		if m < top {
			stale = append(stale, m)
		}
	}
	if len(stale) > 0 {
		if _, err := s.events.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: stale}}}}); err != nil {
			return writeErr("mongostore: prune: delete old markers", err)
		}
	}
	return nil
}

// DeleteCard deletes an unclaimed card no card depends on, its runs, and
// records a card_deleted event (DESIGN.md#retention). The card's pending
// outbox is published first; the event is stamped by the server before the
// delete, which is a compare-and-set on the card as read, and published
// after it: an agent that dies between the two leaves the deletion without
// its event (the one step of this twin that is not one write).
func (s *Store) DeleteCard(ctx context.Context, p board.DeleteCardParams) (board.DeleteCardResult, error) {
	if err := p.Validate(); err != nil {
		return board.DeleteCardResult{}, err
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		c, err := s.readCard(ctx, p.ID)
		if err != nil {
			return board.DeleteCardResult{}, err
		}
		if c.Claimed() {
			return board.DeleteCardResult{}, fmt.Errorf("delete card %q: release it first: %w", p.ID, c.conflict())
		}
		deps, err := s.findCards(ctx, bson.D{{Key: "depends_on", Value: p.ID}}, options.Find().SetSort(creationOrder))
		if err != nil {
			return board.DeleteCardResult{}, err
		}
		if len(deps) > 0 {
			ids := make([]string, len(deps))
			for i, d := range deps {
				ids[i] = d.ID
			}
			return board.DeleteCardResult{}, fmt.Errorf("delete card %q: cards %q name it among their blockers; delete them first: %w", p.ID, ids, board.ErrTransitionRejected)
		}
		out := board.DeleteCardResult{Card: c.Card, DryRun: p.DryRun}
		archived := slices.Clone(c.Runs)
		if c.run != nil {
			out.Runs = 1
			archived = slices.DeleteFunc(archived, func(id string) bool { return id == c.run.ID })
		}
		if p.DryRun {
			if len(archived) > 0 {
				cur, err := s.runs.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: archived}}}},
					options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
				if err != nil {
					return board.DeleteCardResult{}, fmt.Errorf("mongostore: list runs of %q: %w", p.ID, err)
				}
				var docs []bson.Raw
				if err := cur.All(ctx, &docs); err != nil {
					return board.DeleteCardResult{}, fmt.Errorf("mongostore: list runs of %q: %w", p.ID, err)
				}
				out.Runs += len(docs)
			}
			return out, nil
		}
		if len(c.outbox) > 0 {
			ts, ok := stampOf(c.raw)
			if !ok {
				if err := s.stampLegacy(ctx, s.cards, p.ID); err != nil {
					return board.DeleteCardResult{}, err
				}
				continue
			}
			if err := s.publish(ctx, pendingDoc{id: p.ID, ts: ts, entries: c.outbox}); err != nil {
				return board.DeleteCardResult{}, err
			}
		}
		ts, err := s.stampNow(ctx)
		if err != nil {
			return board.DeleteCardResult{}, err
		}
		clk, err := s.serverNow(ctx)
		if err != nil {
			return board.DeleteCardResult{}, err
		}
		// A card created again under this id starts from no stored epoch,
		// so its first claim's epoch is the server's clock in milliseconds
		// (DESIGN.md#twin-epoch). That never repeats one of this card's
		// only once the clock has passed them all.
		if clk.now.UnixMilli() <= c.ClaimEpoch {
			return board.DeleteCardResult{}, fmt.Errorf("delete card %q: the server's clock (%s) has not yet passed the card's epoch %d, which a card created again under the id could then repeat; try again in a moment (DESIGN.md#epoch-monotone): %w",
				p.ID, clk.now.UTC().Format(time.RFC3339Nano), c.ClaimEpoch, board.ErrTransitionRejected)
		}
		filter := append(bson.D{{Key: "_id", Value: p.ID}, same(c.raw, "claim"), same(c.raw, "claim_epoch"), same(c.raw, "state"), same(c.raw, fieldEvTS), same(c.raw, fieldBlockedGen)}, outboxAsRead(c.outbox)...)
		err = s.cards.FindOneAndDelete(ctx, filter).Err()
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue // changed since the read: decide again
		}
		if err != nil {
			return board.DeleteCardResult{}, writeErr(fmt.Sprintf("mongostore: delete card %q", p.ID), err)
		}
		if len(archived) > 0 {
			res, err := s.runs.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: archived}}}})
			if err != nil {
				return board.DeleteCardResult{}, writeErr(fmt.Sprintf("mongostore: delete runs of %q", p.ID), err)
			}
			out.Runs += int(res.DeletedCount)
		}
		ev := newEvent(board.EventCardDeleted, p.ID, board.ReasonNone, p.Actor, clk.now,
			board.EventData{From: c.State, Labels: c.Labels})
		if err := s.publish(ctx, pendingDoc{id: p.ID, ts: ts, entries: []outboxEntry{ev}}); err != nil {
			return board.DeleteCardResult{}, err
		}
		return out, nil
	}
	return board.DeleteCardResult{}, fmt.Errorf("mongostore: delete card %q: %w", p.ID, ErrContention)
}

// stampNow has the server hand out one timestamp (unique and growing, as
// every write stamp), for an event that has no card document to ride on.
func (s *Store) stampNow(ctx context.Context) (bson.Timestamp, error) {
	raw, err := s.meta.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: "event_stamp"}},
		bson.D{{Key: "$currentDate", Value: bson.D{{Key: "ts", Value: serverStamp}}}},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Raw()
	if err != nil {
		return bson.Timestamp{}, writeErr("mongostore: stamp an event", err)
	}
	t, i, ok := raw.Lookup("ts").TimestampOK()
	if !ok {
		return bson.Timestamp{}, &DocumentError{Collection: collMeta, ID: "event_stamp", Field: "ts", Problem: "is not a timestamp"}
	}
	return bson.Timestamp{T: t, I: i}, nil
}
