package mongostore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/board"
)

// The event log without a sequencer (DESIGN.md#event-log). MongoDB gives
// atomicity per document only, and FerretDB has no transactions, so a write
// cannot put its event into the events collection in the same atomic step.
// Instead the write sets the document's outbox to its events and stamps
// the document's ev_ts with $currentDate (a BSON timestamp the SERVER
// assigns while it applies the update), all in the same update. An event's
// sequence number is computed from that stamp and its position in the
// outbox (seqOf), so it is fixed the moment the write lands, with no
// counter and no max+1 that writers contend on:
//
//   - one card's events are ordered exactly: its writes are serialized by
//     their compare-and-set, and the server's timestamps only grow;
//   - an event is readable the moment its write is: Events reads the
//     pending outboxes (cards with an ev_ts) before the events collection;
//   - publishing (copying an outbox into the events collection, _id = the
//     sequence number) is idempotent, so it is done lazily: by the next
//     write of the same document, before it replaces the outbox (its CAS
//     on ev_ts proves nothing was added meanwhile), or by the background
//     compactor for documents nobody writes again.
//
// Readers stop at a horizon (Options.EventLag behind the server's clock):
// two writes to different documents may become visible in the opposite
// order of their stamps, and a reader that had passed the later one would
// never see the earlier. The lag bounds that window.

const (
	fieldOutbox = "outbox"
	// fieldEvTS is the server's stamp of the write whose events the outbox
	// holds; absent when the outbox is empty (or an older version wrote it).
	fieldEvTS = "ev_ts"
)

// serverStamp is the $currentDate value that has the server stamp a field
// with its own timestamp while it applies the update.
var serverStamp = bson.D{{Key: "$type", Value: "timestamp"}}

// outboxEntry is one pending (or, in the log, published) event.
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

// Sequence numbers. A stamp is a BSON timestamp: seconds, and an ordinal
// the server increments for every timestamp it hands out within them. The
// sequence number of the i-th event of a write stamped ts is
//
//	(ts.T - seqEpoch) << 32 | ts.I << seqIndexBits | i
//
// which orders events by stamp, then by position in their write, and is
// positive until 2088. The log of an older version numbered its events
// 1, 2, 3, …: every stamped number is above those, so a cursor taken
// before an upgrade resumes after it.
const (
	seqEpoch     = 1_600_000_000
	seqIndexBits = 5
	// maxWriteEvents is the most events one write may carry.
	maxWriteEvents = 1 << seqIndexBits
	maxStampOrd    = 1<<(32-seqIndexBits) - 1
)

// seqOf is the sequence number of the i-th event of a write stamped ts.
func seqOf(ts bson.Timestamp, i int) (int64, error) {
	if ts.T < seqEpoch || ts.I > maxStampOrd || i < 0 || i >= maxWriteEvents {
		return 0, fmt.Errorf("mongostore: event %d of a write stamped %d.%d has no sequence number", i, ts.T, ts.I)
	}
	return int64(ts.T-seqEpoch)<<32 | int64(ts.I)<<seqIndexBits | int64(i), nil
}

// stampAt is the smallest stamp of the second t falls in: every event of
// a write stamped at or after t's second has a sequence number at or above
// seqOf(stampAt(t), 0).
func stampAt(t time.Time) bson.Timestamp {
	sec := t.Unix()
	if sec < seqEpoch {
		sec = seqEpoch
	}
	return bson.Timestamp{T: uint32(sec)}
}

// eventHorizon is where readers stop: the smallest stamp of the second the
// server's clock less the event lag falls in (a lower bound of the
// server's time, so the horizon only errs early), and the first sequence
// number at it. With no lag it is the end of time.
func (s *Store) eventHorizon(ctx context.Context) (bson.Timestamp, int64, error) {
	if s.eventLag < 0 {
		return bson.Timestamp{T: math.MaxUint32, I: math.MaxUint32}, math.MaxInt64, nil
	}
	clk, err := s.readClock(ctx, horizonReuse)
	if err != nil {
		return bson.Timestamp{}, 0, err
	}
	// On a replica set the stamps follow the cluster time, which runs
	// ahead of the primary's wall clock when another member's clock does:
	// the horizon follows whichever is later.
	now := clk.now.Add(-clk.rtt)
	if clk.cluster.After(now) {
		now = clk.cluster
	}
	ts := stampAt(now.Add(-s.eventLag))
	seq, err := seqOf(ts, 0)
	return ts, seq, err
}

// stampOfSeq is the stamp the sequence number seq was computed from.
func stampOfSeq(seq int64) bson.Timestamp {
	if seq < 1<<32 {
		return bson.Timestamp{T: seqEpoch} // a legacy number, or zero
	}
	return bson.Timestamp{T: uint32(seq>>32) + seqEpoch, I: uint32(seq&(1<<32-1)) >> seqIndexBits}
}

// pendingDoc is a document's outbox as read: its stamp and entries.
type pendingDoc struct {
	id      string
	ts      bson.Timestamp
	entries []outboxEntry
}

// stampOf reads a document's ev_ts; ok is false when it has none.
func stampOf(raw bson.Raw) (bson.Timestamp, bool) {
	t, i, ok := raw.Lookup(fieldEvTS).TimestampOK()
	return bson.Timestamp{T: t, I: i}, ok
}

// logDoc is the events-collection document of the i-th entry of a write
// stamped ts.
func logDoc(e outboxEntry, ts bson.Timestamp, i int) (bson.D, error) {
	seq, err := seqOf(ts, i)
	if err != nil {
		return nil, err
	}
	return bson.D{
		{Key: "_id", Value: seq}, {Key: "key", Value: e.Key}, {Key: "type", Value: e.Type}, {Key: "card", Value: e.Card},
		{Key: "reason", Value: e.Reason}, {Key: "actor", Value: e.Actor}, {Key: "at", Value: e.At}, {Key: "data", Value: e.Data},
	}, nil
}

// publish copies stamped outboxes into the events collection in one
// command. It is idempotent: an event already there (same _id, or the same
// key from an older version's relay) is left as it is.
func (s *Store) publish(ctx context.Context, docs ...pendingDoc) error {
	var out []any
	keys := map[int64]string{}
	for _, d := range docs {
		for i, e := range d.entries {
			ld, err := logDoc(e, d.ts, i)
			if err != nil {
				return err
			}
			out = append(out, ld)
			keys[ld[0].Value.(int64)] = e.Key // logDoc's first field is _id
		}
	}
	if len(out) == 0 {
		return nil
	}
	_, err := s.events.InsertMany(ctx, out, options.InsertMany().SetOrdered(false))
	if err == nil {
		return nil
	}
	if !onlyDuplicates(err) {
		return fmt.Errorf("mongostore: publish events: %w", err)
	}
	// A duplicate is the same event published before, or a collision: two
	// events given one sequence number, which a server whose stamps are
	// not unique would cause. A collision must not pass for a duplicate,
	// or one of the two events would silently be lost.
	return s.checkCollisions(ctx, keys)
}

// checkCollisions reads the logged events with the given sequence numbers
// and fails when one holds another event than the key it should.
func (s *Store) checkCollisions(ctx context.Context, keys map[int64]string) error {
	seqs := make([]int64, 0, len(keys))
	for seq := range keys {
		seqs = append(seqs, seq)
	}
	cur, err := s.events.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: seqs}}}},
		options.Find().SetProjection(bson.D{{Key: "key", Value: 1}}))
	if err != nil {
		return fmt.Errorf("mongostore: publish events: %w", err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		seq, err := eventSeq(cur.Current)
		if err != nil {
			return err
		}
		if got, ok := cur.Current.Lookup("key").StringValueOK(); ok && got != keys[seq] {
			return collision(seq, got, keys[seq])
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("mongostore: publish events: %w", err)
	}
	return nil
}

// collision is the error of two events, keys a and b, given one sequence
// number.
func collision(seq int64, a, b string) error {
	return fmt.Errorf("mongostore: events %s and %s were given one sequence number %d: %w", a, b, seq, ErrStampCollision)
}

// onlyDuplicates reports whether every failure of a bulk insert is a
// duplicate key: the event was published already.
func onlyDuplicates(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, we := range bwe.WriteErrors {
		if we.Code != 11000 {
			return false
		}
	}
	return true
}

// pendingFilter selects documents whose outbox holds events stamped in
// [from, to); pendingAfter those stamped in (last, to), the next page of a
// listing whose previous page ended at last.
func pendingFilter(from, to bson.Timestamp) bson.D {
	return bson.D{{Key: fieldEvTS, Value: bson.D{{Key: "$gte", Value: from}, {Key: "$lt", Value: to}}}}
}

func pendingAfter(last, to bson.Timestamp) bson.D {
	return bson.D{{Key: fieldEvTS, Value: bson.D{{Key: "$gt", Value: last}, {Key: "$lt", Value: to}}}}
}

// findPending reads up to limit documents of coll (0: no limit) with a
// stamped outbox matching filter, oldest stamp first. A document another
// program corrupted is skipped: it must not stop the log for everyone
// else, and reading that document reports the corruption, naming it.
//
// It also returns how many documents it scanned and the last one's stamp,
// usable or not, so a caller pages on from there: a page of unusable
// documents must neither end the listing early nor be read forever.
func (s *Store) findPending(ctx context.Context, coll *mongo.Collection, filter bson.D, limit int) (docs []pendingDoc, scanned int, last bson.Timestamp, err error) {
	opts := options.Find().SetSort(bson.D{{Key: fieldEvTS, Value: 1}}).
		SetProjection(bson.D{{Key: fieldOutbox, Value: 1}, {Key: fieldEvTS, Value: 1}})
	if limit > 0 {
		opts.SetLimit(int64(limit))
	}
	cur, err := coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, 0, last, fmt.Errorf("mongostore: find pending events: %w", err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		scanned++
		ts, ok := stampOf(cur.Current)
		if ok {
			last = ts
		}
		r := newReader(coll.Name(), cur.Current)
		entries := r.outbox()
		if r.err != nil || !ok {
			continue
		}
		docs = append(docs, pendingDoc{id: r.id, ts: ts, entries: entries})
	}
	if err := cur.Err(); err != nil {
		return nil, 0, last, fmt.Errorf("mongostore: find pending events: %w", err)
	}
	return docs, scanned, last, nil
}

// pendingEvents reads the pending events with sequence numbers above after
// and stamps below horizon, oldest first: all of them when limit is 0, and
// otherwise at least limit of them while more exist, with every pending
// event below the largest returned included. It pages past documents that
// hold none (an empty outbox, a corrupt one, or only events up to after).
func (s *Store) pendingEvents(ctx context.Context, after int64, horizon bson.Timestamp, limit int) ([]board.Event, map[int64]string, error) {
	var (
		out  []board.Event
		keys = map[int64]string{}
	)
	page := 0
	if limit > 0 {
		page = limit + 1
	}
	filter := pendingFilter(stampOfSeq(after), horizon)
	for {
		docs, scanned, last, err := s.findPending(ctx, s.cards, filter, page)
		if err != nil {
			return nil, nil, err
		}
		for _, d := range docs {
			for i, e := range d.entries {
				seq, err := seqOf(d.ts, i)
				if err != nil {
					return nil, nil, err
				}
				if seq > after {
					out = append(out, e.event(seq))
					keys[seq] = e.Key
				}
			}
		}
		if page == 0 || scanned < page || len(out) >= limit || last.T == 0 {
			return out, keys, nil
		}
		filter = pendingAfter(last, horizon)
	}
}

// Events returns events with Seq > after, oldest first, at most limit (0:
// no limit), up to the horizon: the server's clock less the event lag.
//
// It reads the pending outboxes first and the events collection second.
// Publishing inserts into the collection before it clears an outbox, so
// an event leaving the outboxes between the two reads is in the second.
func (s *Store) Events(ctx context.Context, p board.EventsParams) ([]board.Event, error) {
	after, limit := p.After, p.Limit
	if limit < 0 {
		return nil, board.Invalid("negative limit %d", limit)
	}
	if after < 0 {
		after = 0
	}
	horizon, limitSeq, err := s.eventHorizon(ctx)
	if err != nil {
		return nil, err
	}
	if after >= limitSeq-1 {
		return nil, nil
	}
	pending, pendingKeys, err := s.pendingEvents(ctx, after, horizon, limit)
	if err != nil {
		return nil, err
	}
	var out []board.Event
	seen := map[int64]string{} // sequence number → the key of its event
	// A page passes over prune markers (DESIGN.md#retention) and reads on
	// past them: however many lie side by side (agents that pruned side by
	// side each leave one), a page is still exactly limit while more
	// follow, since a short page tells a reader it reached the head.
	for from := after; ; {
		opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}})
		want := int64(0)
		if limit > 0 {
			want = int64(limit-len(out)) + prunedMarkerSlack
			opts.SetLimit(want)
		}
		cur, err := s.events.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: from}, {Key: "$lt", Value: limitSeq}}}}, opts)
		if err != nil {
			return nil, fmt.Errorf("mongostore: events: %w", err)
		}
		docs := int64(0)
		for cur.Next(ctx) {
			docs++
			seq, err := eventSeq(cur.Current)
			if err != nil {
				cur.Close(ctx)
				return nil, err
			}
			from = seq
			if typ, _ := cur.Current.Lookup("type").StringValueOK(); typ == eventsPrunedType {
				// Where a prune stopped: a reader positioned below it would
				// skip what was deleted (DESIGN.md#retention).
				if err := board.CheckEventsPruned(after, seq); err != nil {
					cur.Close(ctx)
					return nil, err
				}
				continue
			}
			r := &reader{raw: cur.Current, coll: collEvents, id: strconv.FormatInt(seq, 10)}
			e := readEvent(r)
			if r.err != nil {
				cur.Close(ctx)
				return nil, r.err
			}
			out = append(out, e.event(seq))
			// A logged event keeps its outbox entry's id under "key".
			seen[seq], _ = cur.Current.Lookup("key").StringValueOK()
		}
		err = cur.Err()
		cur.Close(ctx)
		if err != nil {
			return nil, fmt.Errorf("mongostore: events: %w", err)
		}
		if limit <= 0 || docs < want || len(out) >= limit {
			break
		}
	}
	// Merge in the pending events the collection does not hold yet.
	merged := false
	for _, e := range pending {
		if e.Seq >= limitSeq {
			continue
		}
		if key, ok := seen[e.Seq]; ok {
			if key != pendingKeys[e.Seq] {
				return nil, collision(e.Seq, key, pendingKeys[e.Seq])
			}
			continue
		}
		out = append(out, e)
		seen[e.Seq] = pendingKeys[e.Seq]
		merged = true
	}
	if merged {
		slices.SortFunc(out, func(a, b board.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// prunedMarkerSlack is how many prune markers a page of Events reads past
// and still fills its limit: a marker is left by each prune and removed by
// the next, so a few at most lie side by side.
const prunedMarkerSlack = 8

func eventSeq(raw bson.Raw) (int64, error) {
	v := raw.Lookup("_id")
	seq, ok := v.AsInt64OK()
	if !ok || seq <= 0 {
		return 0, &DocumentError{Collection: collEvents, ID: v.String(), Field: "_id", Problem: "is not a positive sequence number"}
	}
	return seq, nil
}

// fieldLegacyTS stamps a batch of an older version's outbox while it is
// published (stampLegacy).
const fieldLegacyTS = "ev_legacy_ts"

// stampLegacy publishes an outbox an older version left unstamped (it
// numbered events itself, then relayed and popped them one by one), in
// outbox order. A card's outbox of at most maxWriteEvents entries is
// stamped as one write's, and is then pending like any. A longer one, or an
// archived run's, is published in steps of maxWriteEvents entries: each
// step has the server stamp the document, publishes that many entries
// under the stamp and drops them. Entries that version had relayed already
// (their key is in the log: it died before popping them) are dropped
// without publishing, so a step cut short is finished by the next without
// showing anyone an event twice. Every update is conditioned on the outbox
// as read.
func (s *Store) stampLegacy(ctx context.Context, coll *mongo.Collection, id string) error {
	for range maxAttempts {
		raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}},
			options.FindOne().SetProjection(bson.D{{Key: fieldOutbox, Value: 1}, {Key: fieldEvTS, Value: 1}})).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("mongostore: read the outbox of %s %q: %w", coll.Name(), id, err)
		}
		if _, stamped := stampOf(raw); stamped {
			return nil // a write of this version's; not legacy
		}
		r := newReader(coll.Name(), raw)
		entries := r.outbox()
		if r.err != nil {
			return r.err
		}
		if len(entries) == 0 {
			return nil
		}
		asRead := append(bson.D{{Key: "_id", Value: id}, {Key: fieldEvTS, Value: bson.D{{Key: "$exists", Value: false}}}}, outboxAsRead(entries)...)
		keys := make([]string, 0, len(entries))
		for _, e := range entries {
			keys = append(keys, e.Key)
		}
		var relayed []string
		if err := s.events.Distinct(ctx, "key", bson.D{{Key: "key", Value: bson.D{{Key: "$in", Value: keys}}}}).Decode(&relayed); err != nil {
			return fmt.Errorf("mongostore: find relayed entries of %s %q: %w", coll.Name(), id, err)
		}
		if len(relayed) > 0 {
			if _, err := coll.UpdateOne(ctx, asRead, keepOnly(entries, relayed)); err != nil {
				return writeErr(fmt.Sprintf("mongostore: drop relayed entries of %s %q", coll.Name(), id), err)
			}
			continue
		}
		if coll == s.cards && len(entries) <= maxWriteEvents {
			// The usual case: stamped as one write's outbox, readable the
			// moment it is stamped, published like any pending outbox.
			_, err := coll.UpdateOne(ctx, asRead, bson.D{{Key: "$currentDate", Value: bson.D{{Key: fieldEvTS, Value: serverStamp}}}})
			if err != nil {
				return writeErr(fmt.Sprintf("mongostore: stamp the outbox of %s %q", coll.Name(), id), err)
			}
			continue
		}
		// Longer than one write's outbox, or on an archived run (whose
		// outboxes readers do not read): published in steps, each readable
		// once it is in the log. A step that stalls for longer than the event
		// lag between its stamp and its publish can pass a reader by
		// (DESIGN.md#event-log).
		batch := entries[:min(len(entries), maxWriteEvents)]
		after, err := coll.FindOneAndUpdate(ctx, asRead,
			bson.D{{Key: "$currentDate", Value: bson.D{{Key: fieldLegacyTS, Value: serverStamp}}}},
			options.FindOneAndUpdate().SetReturnDocument(options.After)).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue // changed meanwhile: read again
		}
		if err != nil {
			return writeErr(fmt.Sprintf("mongostore: stamp the outbox of %s %q", coll.Name(), id), err)
		}
		t, i, ok := after.Lookup(fieldLegacyTS).TimestampOK()
		if !ok {
			return fmt.Errorf("mongostore: %s %q: the server did not stamp its outbox", coll.Name(), id)
		}
		if err := s.publish(ctx, pendingDoc{id: id, ts: bson.Timestamp{T: t, I: i}, entries: batch}); err != nil {
			return err
		}
		pull := keepOnly(entries, keys[:len(batch)])
		pull = append(pull, bson.E{Key: "$unset", Value: bson.D{{Key: fieldLegacyTS, Value: ""}}})
		if _, err := coll.UpdateOne(ctx, asRead, pull); err != nil {
			return writeErr(fmt.Sprintf("mongostore: pull published entries of %s %q", coll.Name(), id), err)
		}
	}
	return fmt.Errorf("mongostore: publish the outbox of %s %q: %w", coll.Name(), id, ErrContention)
}

// outboxAsRead is the condition "the outbox holds what was read": the same
// first and last entry, and nothing after it. Writers only ever set a whole
// outbox together with a new stamp (which the stamp's own condition
// catches), push at its end, or pop and pull from it, and each of those
// changes one of the three.
func outboxAsRead(entries []outboxEntry) bson.D {
	n := len(entries)
	if n == 0 {
		return bson.D{{Key: fieldOutbox + ".0", Value: bson.D{{Key: "$exists", Value: false}}}}
	}
	return bson.D{
		{Key: fieldOutbox + ".0.id", Value: entries[0].Key},
		{Key: fmt.Sprintf("%s.%d.id", fieldOutbox, n-1), Value: entries[n-1].Key},
		{Key: fmt.Sprintf("%s.%d", fieldOutbox, n), Value: bson.D{{Key: "$exists", Value: false}}},
	}
}

// keepOnly is the update that leaves the outbox holding entries without
// the ones whose ids are dropped, in order (FerretDB v1's $pull matches
// whole values only, so the rest is set instead).
func keepOnly(entries []outboxEntry, dropped []string) bson.D {
	rest := []outboxEntry{}
	for _, e := range entries {
		if !slices.Contains(dropped, e.Key) {
			rest = append(rest, e)
		}
	}
	return bson.D{{Key: "$set", Value: bson.D{{Key: fieldOutbox, Value: rest}}}}
}

// The compactor publishes the outboxes of documents nobody wrote again
// (a card's last write, a writer that died), so the pending set Events
// reads stays small. Every agent runs one; they race harmlessly (publish
// is idempotent, each clear is conditioned on the stamp it published).
const (
	// compactEvery is how often the compactor passes.
	compactEvery = 30 * time.Second
	// compactAge is how old a stamp must be before the compactor takes
	// it: younger outboxes are usually published by their card's next
	// write.
	compactAge = 10 * time.Second
	// legacyEvery is how often the compactor looks for outboxes an older
	// version left: only such a version writes them, and it is stopped
	// before this one starts, so the first pass finds them all; later
	// looks are a cheap safety net.
	legacyEvery = 10
	// compactPage is how many documents one step of a pass takes, and
	// compactPages how many steps a pass takes at most.
	compactPage  = 256
	compactPages = 16
)

// CompactEvents publishes and clears the cards' pending outboxes stamped
// before cutoff (at most compactPages pages of compactPage documents),
// after handling the outboxes an older version left (stampLegacy). It
// returns how many documents it published. Only cards hold stamped
// outboxes: an archived run's is published as it is stamped.
func (s *Store) CompactEvents(ctx context.Context, cutoff time.Time) (int, error) {
	return s.compact(ctx, cutoff, true)
}

// compact is CompactEvents, looking for an older version's outboxes only
// when legacy is set.
func (s *Store) compact(ctx context.Context, cutoff time.Time, legacy bool) (int, error) {
	if legacy {
		if err := s.stampAllLegacy(ctx); err != nil {
			return 0, err
		}
	}
	cleared := 0
	to := stampAt(cutoff)
	filter := pendingFilter(bson.Timestamp{}, to)
	for range compactPages {
		docs, scanned, last, err := s.findPending(ctx, s.cards, filter, compactPage)
		if err != nil {
			return cleared, err
		}
		if len(docs) > 0 {
			if err := s.clearPublished(ctx, docs); err != nil {
				return cleared, err
			}
			cleared += len(docs)
		}
		if scanned < compactPage || last.T == 0 {
			break
		}
		// On past what this page scanned: a document it could not clear
		// (a corrupt one) is not read again in this pass.
		filter = pendingAfter(last, to)
	}
	return cleared, nil
}

// clearPublished publishes the cards' outboxes docs and clears each one
// still as read (same stamp, same entries), in bulk writes of at most
// RenewChunk.
func (s *Store) clearPublished(ctx context.Context, docs []pendingDoc) error {
	if err := s.publish(ctx, docs...); err != nil {
		return err
	}
	models := make([]mongo.WriteModel, 0, len(docs))
	for _, d := range docs {
		models = append(models, mongo.NewUpdateOneModel().
			SetFilter(append(bson.D{{Key: "_id", Value: d.id}, {Key: fieldEvTS, Value: d.ts}}, outboxAsRead(d.entries)...)).
			SetUpdate(bson.D{{Key: "$unset", Value: bson.D{{Key: fieldOutbox, Value: ""}, {Key: fieldEvTS, Value: ""}}}}))
	}
	for chunk := range slices.Chunk(models, RenewChunk) {
		if _, err := s.cards.BulkWrite(ctx, chunk, options.BulkWrite().SetOrdered(false)); err != nil {
			return fmt.Errorf("mongostore: clear published outboxes: %w", err)
		}
	}
	return nil
}

// stampAllLegacy stamps every unstamped outbox an older version left.
func (s *Store) stampAllLegacy(ctx context.Context) error {
	for _, coll := range []*mongo.Collection{s.cards, s.runs} {
		var list []string
		err := coll.Distinct(ctx, "_id", bson.D{
			{Key: fieldOutbox + ".id", Value: bson.D{{Key: "$gt", Value: ""}}},
			{Key: fieldEvTS, Value: bson.D{{Key: "$exists", Value: false}}},
		}).Decode(&list)
		if err != nil {
			return fmt.Errorf("mongostore: find unstamped outboxes: %w", err)
		}
		for _, id := range list {
			if err := s.stampLegacy(ctx, coll, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// compactor compacts every compactEvery until ctx ends, looking for an
// older version's outboxes on every legacyEvery-th pass.
func (s *Store) compactor(ctx context.Context) {
	defer close(s.compacted)
	t := time.NewTicker(compactEvery)
	defer t.Stop()
	for pass := 0; ; pass++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now, err := s.lowerNow(ctx, clockReuse)
		if err == nil {
			_, err = s.compact(ctx, now.Add(-compactAge), pass%legacyEvery == 0)
		}
		if err != nil && ctx.Err() == nil {
			slog.Warn("mongostore: event compaction failed; the next pass retries", "err", err)
		}
	}
}
