package mongostore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/board"
)

// The outbox (DESIGN.md#twin-writes). MongoDB gives atomicity
// per document only, and FerretDB has no transactions, so a write cannot put
// its event into the event log in the same atomic step. Instead the write
// pushes the event onto an outbox array of the document it changes, in the
// same update, and the event is then relayed:
//
//  1. the entry is appended to the event log unless an event with its key
//     is already there (the key is a random id minted with the entry, under
//     a unique index, so two relayers racing on one entry store it once);
//  2. the entry is popped from the head of the outbox, on the condition
//     that it still is the head.
//
// Entries are relayed in outbox order, one at a time, so one document's
// events keep their order in the log. A process that dies between the write
// and the relay leaves the entry in the outbox, and the next relay — after
// any write to that document, and before every Events read, which sweeps
// all outboxes — carries it over. Nothing is lost and nothing doubles.
//
// Sequence numbers. The log's _id is the sequence number, and a new event
// takes the highest stored _id plus one; losing the unique-_id race means
// retrying with the next. A counter document incremented first and
// written afterwards would let a reader page past a number that was
// allocated but not yet written, and never see that event: here a number
// is only ever taken after every lower number is visible, so Events(after)
// is gap-free and never skips.

const fieldOutbox = "outbox"

// outboxEntry is one pending (or, in the log, relayed) event.
type outboxEntry struct {
	Key    string    `bson:"id"`
	Type   string    `bson:"type"`
	Card   string    `bson:"card"`
	Reason string    `bson:"reason,omitempty"`
	Actor  string    `bson:"actor,omitempty"`
	At     time.Time `bson:"at"`
	Data   eventData `bson:"data"`
}

type eventData struct {
	From    string   `bson:"from,omitempty"`
	To      string   `bson:"to,omitempty"`
	Marker  string   `bson:"marker,omitempty"`
	Epoch   int64    `bson:"epoch,omitempty"`
	Labels  []string `bson:"labels,omitempty"`
	Added   []string `bson:"added,omitempty"`
	Removed []string `bson:"removed,omitempty"`
	RunID   string   `bson:"run_id,omitempty"`
	Status  string   `bson:"status,omitempty"`
	Value   bool     `bson:"value,omitempty"`
}

// newEvent builds an outbox entry. A machine reason blanks the actor, so an
// effect layer never attributes a machine write to a person.
func newEvent(typ board.EventType, card string, reason board.Reason, actor string, at time.Time, data board.EventData) outboxEntry {
	if board.IsMachineReason(reason) {
		actor = ""
	}
	var key [16]byte
	_, _ = rand.Read(key[:]) // crypto/rand.Read never fails on supported platforms
	return outboxEntry{
		Key: hex.EncodeToString(key[:]), Type: string(typ), Card: card, Reason: string(reason), Actor: actor, At: at,
		Data: eventData{
			From: data.From, To: data.To, Marker: data.Marker, Epoch: data.Epoch,
			Labels: data.Labels, Added: data.Added, Removed: data.Removed,
			RunID: data.RunID, Status: data.Status, Value: data.Value,
		},
	}
}

func (e outboxEntry) event(seq int64) board.Event {
	return board.Event{
		Seq: seq, Type: board.EventType(e.Type), Card: e.Card, Reason: board.Reason(e.Reason), Actor: e.Actor, At: e.At,
		Data: board.EventData{
			From: e.Data.From, To: e.Data.To, Marker: e.Data.Marker, Epoch: e.Data.Epoch,
			Labels: e.Data.Labels, Added: e.Data.Added, Removed: e.Data.Removed,
			RunID: e.Data.RunID, Status: e.Data.Status, Value: e.Data.Value,
		},
	}
}

// relay carries the outbox of one document into the event log.
func (s *Store) relay(ctx context.Context, coll *mongo.Collection, id string, entries []outboxEntry) error {
	for _, e := range entries {
		if err := s.appendEvent(ctx, e); err != nil {
			return err
		}
		// Pop the entry only if it still heads the outbox: another relayer
		// may have popped it already, and then the head is a later entry
		// that must not be dropped unrelayed.
		_, err := coll.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: id}, {Key: fieldOutbox + ".0.id", Value: e.Key}},
			bson.D{{Key: "$pop", Value: bson.D{{Key: fieldOutbox, Value: -1}}}})
		if err != nil {
			return fmt.Errorf("mongostore: relay %s %q: %w", coll.Name(), id, err)
		}
	}
	return nil
}

// appendEvent stores e in the log once, under the next sequence number.
func (s *Store) appendEvent(ctx context.Context, e outboxEntry) error {
	for attempt := 0; ; attempt++ {
		if attempt >= maxAttempts {
			return fmt.Errorf("mongostore: append event %s: %w", e.Key, ErrContention)
		}
		err := s.events.FindOne(ctx, bson.D{{Key: "key", Value: e.Key}}).Err()
		if err == nil {
			return nil // relayed already
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return fmt.Errorf("mongostore: append event: %w", err)
		}
		last, err := s.lastSeq(ctx)
		if err != nil {
			return err
		}
		doc := bson.D{
			{Key: "_id", Value: last + 1}, {Key: "key", Value: e.Key}, {Key: "type", Value: e.Type}, {Key: "card", Value: e.Card},
			{Key: "reason", Value: e.Reason}, {Key: "actor", Value: e.Actor}, {Key: "at", Value: e.At}, {Key: "data", Value: e.Data},
		}
		_, err = s.events.InsertOne(ctx, doc)
		if err == nil {
			return nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return fmt.Errorf("mongostore: append event: %w", err)
		}
		// Either the number was taken (retry with the next) or another
		// relayer stored this very entry (the next lookup finds it).
	}
}

func (s *Store) lastSeq(ctx context.Context) (int64, error) {
	raw, err := s.events.FindOne(ctx, bson.D{}, options.FindOne().SetSort(bson.D{{Key: "_id", Value: -1}}).SetProjection(bson.D{{Key: "_id", Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("mongostore: last event: %w", err)
	}
	return eventSeq(raw)
}

func eventSeq(raw bson.Raw) (int64, error) {
	v := raw.Lookup("_id")
	seq, ok := v.AsInt64OK()
	if !ok || seq <= 0 {
		return 0, &DocumentError{Collection: collEvents, ID: v.String(), Field: "_id", Problem: "is not a positive sequence number"}
	}
	return seq, nil
}

// relayAll sweeps every outbox left behind (a relay cut short by a crash,
// a cancelled context, or a failure after the write).
func (s *Store) relayAll(ctx context.Context) error {
	for _, coll := range []*mongo.Collection{s.cards, s.runs} {
		cur, err := coll.Find(ctx, bson.D{{Key: fieldOutbox + ".id", Value: bson.D{{Key: "$gt", Value: ""}}}},
			options.Find().SetProjection(bson.D{{Key: fieldOutbox, Value: 1}}))
		if err != nil {
			return fmt.Errorf("mongostore: find pending events: %w", err)
		}
		type pending struct {
			id      string
			entries []outboxEntry
		}
		var todo []pending
		for cur.Next(ctx) {
			r := newReader(coll.Name(), cur.Current)
			entries := r.outbox()
			if r.err != nil {
				// A document another program corrupted cannot be relayed;
				// it must not stop the log for everyone else. Reading that
				// document reports the corruption, naming it.
				continue
			}
			todo = append(todo, pending{r.id, entries})
		}
		err = cur.Err()
		cur.Close(ctx)
		if err != nil {
			return fmt.Errorf("mongostore: find pending events: %w", err)
		}
		for _, p := range todo {
			if err := s.relay(ctx, coll, p.id, p.entries); err != nil {
				return err
			}
		}
	}
	return nil
}

// Events returns events with Seq > after, oldest first, at most limit (0:
// no limit). It relays every pending outbox first, so an event whose writer
// died before relaying it is not missing from the answer.
func (s *Store) Events(ctx context.Context, after int64, limit int) ([]board.Event, error) {
	if limit < 0 {
		return nil, board.Invalid("negative limit %d", limit)
	}
	if after < 0 {
		after = 0
	}
	if err := s.relayAll(ctx); err != nil {
		return nil, err
	}
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}})
	if limit > 0 {
		opts.SetLimit(int64(limit))
	}
	cur, err := s.events.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: after}}}}, opts)
	if err != nil {
		return nil, fmt.Errorf("mongostore: events: %w", err)
	}
	defer cur.Close(ctx)
	var out []board.Event
	for cur.Next(ctx) {
		seq, err := eventSeq(cur.Current)
		if err != nil {
			return nil, err
		}
		r := &reader{raw: cur.Current, coll: collEvents, id: strconv.FormatInt(seq, 10)}
		e := readEvent(r)
		if r.err != nil {
			return nil, r.err
		}
		out = append(out, e.event(seq))
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("mongostore: events: %w", err)
	}
	return out, nil
}
