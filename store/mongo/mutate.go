package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/board"
)

// change is one single-document update: the conditions it was planned
// under (compare-and-set) and scoped field operators. There is no way to
// express a whole-document replace here, on purpose (DESIGN.md#twin-writes).
type change struct {
	cond     bson.D // extra filter conditions: what the plan relied on
	set      bson.D
	unset    []string
	max      bson.D
	min      bson.D
	addToSet bson.D
	events   []outboxEntry
}

func (c *change) update() bson.D {
	u := bson.D{}
	if len(c.set) > 0 {
		u = append(u, bson.E{Key: "$set", Value: c.set})
	}
	if len(c.unset) > 0 {
		d := bson.D{}
		for _, f := range c.unset {
			d = append(d, bson.E{Key: f, Value: ""})
		}
		u = append(u, bson.E{Key: "$unset", Value: d})
	}
	if len(c.max) > 0 {
		u = append(u, bson.E{Key: "$max", Value: c.max})
	}
	if len(c.min) > 0 {
		u = append(u, bson.E{Key: "$min", Value: c.min})
	}
	if len(c.addToSet) > 0 {
		u = append(u, bson.E{Key: "$addToSet", Value: c.addToSet})
	}
	return u
}

// withOutbox adds the outbox to an update of a document whose outbox as
// read was pending (already published by the caller): a change with
// events replaces the outbox with them and has the server stamp the
// document (DESIGN.md#event-log); a change without events clears a pending
// outbox, or leaves an empty one alone.
func (c *change) withOutbox(u bson.D, pending bool) bson.D {
	if len(c.events) > 0 {
		u = appendOp(u, "$set", bson.E{Key: fieldOutbox, Value: c.events})
		return appendOp(u, "$currentDate", bson.E{Key: fieldEvTS, Value: serverStamp})
	}
	if pending {
		u = appendOp(u, "$unset", bson.E{Key: fieldOutbox, Value: ""})
		u = appendOp(u, "$unset", bson.E{Key: fieldEvTS, Value: ""})
	}
	return u
}

// appendOp adds field e under operator op of update u.
func appendOp(u bson.D, op string, e bson.E) bson.D {
	for i := range u {
		if u[i].Key == op {
			u[i].Value = append(u[i].Value.(bson.D), e)
			return u
		}
	}
	return append(u, bson.E{Key: op, Value: bson.D{e}})
}

// plan decides the change to make to a card as read. A nil change (and nil
// error) means there is nothing to write.
type plan func(c *cardState, clk serverClock) (*change, error)

// mutate reads the card, plans a change and applies it as ONE conditional
// update, retrying from a fresh read when the conditions no longer hold
// (another writer got there first). It returns the card after the write
// (or as read, when nothing was written) and whether a write landed.
//
// The server's clock is taken before every attempt (a reading at most a
// second old, aged to now: DESIGN.md#twin-clock), so a retried write is
// stamped with the time it actually happens.
func (s *Store) mutate(ctx context.Context, id string, p plan) (*cardState, bool, error) {
	return s.mutateFrom(ctx, id, nil, p)
}

// mutateFrom is mutate planning its first attempt on first, a read of the
// card the caller has just made (nil: read it). Every later attempt reads
// afresh.
func (s *Store) mutateFrom(ctx context.Context, id string, first *cardState, p plan) (*cardState, bool, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		clk, err := s.serverNow(ctx)
		if err != nil {
			return nil, false, err
		}
		c := first
		first = nil
		if c == nil {
			if c, err = s.readCard(ctx, id); err != nil {
				return nil, false, err
			}
		}
		ch, err := p(c, clk)
		if err != nil || ch == nil {
			return c, false, err
		}
		if len(ch.events) > maxWriteEvents {
			return nil, false, fmt.Errorf("mongostore: card %q: one write of %d events (at most %d)", id, len(ch.events), maxWriteEvents)
		}
		// The events of the card's last write are published before this
		// write replaces them, and the write is conditioned on the stamp
		// it read, so nothing was added to the outbox meanwhile.
		pending := len(c.outbox) > 0
		if pending {
			ts, ok := stampOf(c.raw)
			if !ok {
				// An older version's outbox, never stamped: stamp it,
				// then plan again from a fresh read.
				if err := s.stampLegacy(ctx, s.cards, id); err != nil {
					return nil, false, err
				}
				continue
			}
			if err := s.publish(ctx, pendingDoc{id: id, ts: ts, entries: c.outbox}); err != nil {
				return nil, false, err
			}
		}
		filter := append(bson.D{{Key: "_id", Value: id}}, ch.cond...)
		// The outbox as read is part of the CAS too: an entry pushed
		// without a new stamp (an older version's write) must not be
		// replaced unpublished.
		filter = append(filter, same(c.raw, fieldEvTS))
		filter = append(filter, outboxAsRead(c.outbox)...)
		raw, err := s.cards.FindOneAndUpdate(ctx, filter, ch.withOutbox(ch.update(), pending),
			options.FindOneAndUpdate().SetReturnDocument(options.After)).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue // the card changed under the plan: plan again
		}
		if err != nil {
			return nil, false, writeErr(fmt.Sprintf("mongostore: write card %q", id), err)
		}
		after, err := decodeCard(raw)
		if err != nil {
			return nil, true, err
		}
		// The write and its events are durable now; the events are
		// published by the card's next write or by the compactor.
		after.outbox = nil
		return after, true, nil
	}
	return nil, false, fmt.Errorf("mongostore: card %q: %w", id, ErrContention)
}

func (s *Store) readCard(ctx context.Context, id string) (*cardState, error) {
	raw, err := s.cards.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, board.NotFound("card", id)
	}
	if err != nil {
		return nil, fmt.Errorf("mongostore: read card %q: %w", id, err)
	}
	return decodeCard(raw)
}

// same is the compare-and-set condition "field is still what was read":
// equal to the stored value, or still absent.
func same(raw bson.Raw, field string) bson.E {
	v, err := raw.LookupErr(field)
	if err != nil {
		return bson.E{Key: field, Value: bson.D{{Key: "$exists", Value: false}}}
	}
	return bson.E{Key: field, Value: v}
}

// tokenCond is the fence of every owner write (DESIGN.md#fence): the claim is
// exactly tok. The epoch must EXIST and equal tok.Epoch — a document that
// lost its epoch refuses even its live holder (DESIGN.md#lost-fence). Do not relax
// this to a plain equality: with the field gone, nothing else tells one
// generation of a marker from the next.
func tokenCond(tok board.ClaimToken) bson.D {
	return bson.D{
		{Key: "claim", Value: tok.Marker},
		{Key: "claim_epoch", Value: bson.D{{Key: "$exists", Value: true}, {Key: "$eq", Value: tok.Epoch}}},
	}
}

// merge combines changes planned on the same read of one card into one
// update: their conditions (one per field: they were all taken from the
// same read), their operators (a field set twice keeps the later value)
// and their events, in order. Nil changes are skipped.
func merge(chs ...*change) *change {
	out := &change{}
	for _, ch := range chs {
		if ch == nil {
			continue
		}
		for _, e := range ch.cond {
			if !slices.ContainsFunc(out.cond, func(o bson.E) bool { return o.Key == e.Key }) {
				out.cond = append(out.cond, e)
			}
		}
		out.set = mergeOps(out.set, ch.set)
		out.max = mergeOps(out.max, ch.max)
		out.min = mergeOps(out.min, ch.min)
		out.addToSet = mergeOps(out.addToSet, ch.addToSet)
		for _, f := range ch.unset {
			if !slices.Contains(out.unset, f) {
				out.unset = append(out.unset, f)
			}
		}
		out.events = append(out.events, ch.events...)
	}
	// A field both set and unset is set: the later verbs of a lifecycle
	// write only unset fields the earlier ones did not set.
	out.unset = slices.DeleteFunc(out.unset, func(f string) bool {
		return slices.ContainsFunc(out.set, func(e bson.E) bool { return e.Key == f })
	})
	return out
}

func mergeOps(into, more bson.D) bson.D {
	for _, e := range more {
		if i := slices.IndexFunc(into, func(o bson.E) bool { return o.Key == e.Key }); i >= 0 {
			into[i] = e
		} else {
			into = append(into, e)
		}
	}
	return into
}
