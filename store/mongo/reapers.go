package mongostore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/board"
)

// The fleet's reapers share the expired claims (DESIGN.md#reaper-shares).
//
// Each reaper that lists with a board.ReaperShare writes its own document
// in the reapers collection, {_id: marker, since, until}, since being the
// server's time and until that plus one and a half of its intervals, and
// reads the whole collection: one small document per agent of the fleet.
// The live reapers,
// sorted by marker, are numbered 0..n-1, and reaper r lists the expired
// claims whose share key is r modulo n. Every claim carries its card's
// share key (a hash of the card id, written by the claim itself), so the
// split is even however the claims bunch in time, and needs no index or
// migration. A claim with no key (taken by an older release, or a foreign
// write dropped it), or one a foreign write made unplaceable, is listed to
// every reaper.
//
// The split is an economy, never a safety rule: two reapers that disagree
// on who is live list some claims twice (the transfer's compare-and-set
// lets one of them act) or leave some to the next pass.
const collReapers = "reapers"

// maxShareHold caps how long a record keeps its reaper live after a pass:
// a reaper that passes less often (a long reaper.interval) holds a share
// only for this long after each pass, and the others examine it the rest
// of the time, so no share waits for a slow reaper.
const maxShareHold = 90 * time.Second

// reaperForget is how long past its until a reaper's document stays: the
// next reaper that reads it afterwards deletes it, so agents that never
// come back (a pod's marker changes on every restart) do not pile up.
const reaperForget = time.Hour

// fieldShareKey is a claim's share key (board.ShareKey of its card).
const fieldShareKey = "claim_share_key"

type reaperDoc struct {
	ID    string
	Until time.Time
	// Since is the server's time the record was written at (zero in a
	// record that does not carry it: judged by its until alone).
	Since time.Time
}

// live reports whether the record names a live reaper at now: its until
// is still ahead, and it was not written further ahead of now than half
// its own interval — a record from later than that was written by a
// server clock that ran ahead and has been put right since, and its until
// says nothing about when its reaper last passed.
func (d reaperDoc) live(now time.Time) bool {
	if !d.Until.After(now) {
		return false
	}
	return d.Since.IsZero() || !d.Since.After(now.Add(d.Until.Sub(d.Since)/3))
}

// share is one reaper's share of a listing: the condition that selects
// it (nil: everything), how many live reapers share the listing, and this
// reaper's number among them.
type share struct {
	cond bson.D
	n, r int
}

// reaperShare records sh's reaper as live and returns its share; nil sh is
// a listing of everything, by no reaper.
func (s *Store) reaperShare(ctx context.Context, sh *board.ReaperShare) (share, error) {
	if sh == nil {
		return share{}, nil
	}
	clk, err := s.serverNow(ctx)
	if err != nil {
		return share{}, err
	}
	now := clk.now
	until := now.Add(min(sh.Interval+sh.Interval/2, maxShareHold))
	s.noteReaper(sh.Reaper)
	if _, err := s.reapers.UpdateOne(ctx, bson.D{{Key: "_id", Value: sh.Reaper}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "until", Value: until}, {Key: "since", Value: now}}}},
		options.UpdateOne().SetUpsert(true)); err != nil {
		return share{}, fmt.Errorf("mongostore: record reaper %s: %w", sh.Reaper, err)
	}
	cur, err := s.reapers.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return share{}, fmt.Errorf("mongostore: list reapers: %w", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return share{}, fmt.Errorf("mongostore: list reapers: %w", err)
	}
	live, gone := liveReapers(reaperDocs(raws), sh.Reaper, now)
	if len(gone) > 0 {
		// Best effort: a document left behind is only read, and the
		// next reaper to read it tries again.
		_, _ = s.reapers.DeleteMany(ctx, bson.D{
			{Key: "_id", Value: bson.D{{Key: "$in", Value: gone}}},
			{Key: "until", Value: bson.D{{Key: "$lt", Value: now.Add(-reaperForget)}}},
		})
	}
	n := len(live)
	if n == 1 {
		return share{n: 1}, nil
	}
	r := slices.Index(live, sh.Reaper)
	return share{n: n, r: r, cond: bson.D{{Key: "$and", Value: bson.A{bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: fieldShareKey, Value: bson.D{{Key: "$mod", Value: bson.A{int64(n), int64(r)}}}}},
		unknownShareKey,
	}}}}}}}, nil
}

// unknownShareKey matches a claim whose share key no share's $mod can
// place: missing or null (an older release took it, or a foreign write
// dropped it), or anything a foreign write left that is not a number in
// board.ShareKey's range — a string, a boolean, a negative number, whose
// remainder is never a share's. Such a claim is in every share: excluded
// from all of them, it would never be listed while more than one reaper
// is live.
var unknownShareKey = bson.D{{Key: fieldShareKey, Value: bson.D{{Key: "$not", Value: bson.D{
	{Key: "$gte", Value: int64(0)}, {Key: "$lt", Value: int64(1) << 32},
}}}}}

// reaperDocs decodes the reapers' records, passing over any document that
// is not one (no string _id, or an until that is not a date): a foreign
// write there must not fail every reaper's listing, and a document no
// reaper wrote is no live reaper.
func reaperDocs(raws []bson.Raw) []reaperDoc {
	docs := make([]reaperDoc, 0, len(raws))
	for _, raw := range raws {
		id, ok := raw.Lookup("_id").StringValueOK()
		if !ok {
			continue
		}
		ms, ok := raw.Lookup("until").DateTimeOK()
		if !ok {
			continue
		}
		d := reaperDoc{ID: id, Until: time.UnixMilli(ms).UTC()}
		if ms, ok := raw.Lookup("since").DateTimeOK(); ok {
			d.Since = time.UnixMilli(ms).UTC()
		}
		docs = append(docs, d)
	}
	return docs
}

// liveReapers splits the reapers' documents, sorted by marker, into the
// live ones at now (self always among them: it has just written its own)
// and the ones forgotten long enough to delete.
func liveReapers(docs []reaperDoc, self string, now time.Time) (live, gone []string) {
	for _, d := range docs {
		switch {
		case d.ID == self || d.live(now):
			live = append(live, d.ID)
		case now.Sub(d.Until) > reaperForget:
			gone = append(gone, d.ID)
		}
	}
	if !slices.Contains(live, self) {
		// Its write landed but the read did not see it (a lagging
		// secondary cannot serve this read; the primary can only have
		// lost it to a rollback): it is live all the same.
		live = append(live, self)
		slices.Sort(live)
	}
	return live, gone
}

// noteReaper remembers a reaper this store recorded, for Close to retire.
func (s *Store) noteReaper(marker string) {
	s.reapersMu.Lock()
	defer s.reapersMu.Unlock()
	if !slices.Contains(s.ownReapers, marker) {
		s.ownReapers = append(s.ownReapers, marker)
	}
}

// retireReapers deletes the reaper documents this store wrote, so the
// others take its share at their next pass instead of after its until.
func (s *Store) retireReapers(ctx context.Context) error {
	s.reapersMu.Lock()
	mine := slices.Clone(s.ownReapers)
	s.reapersMu.Unlock()
	if len(mine) == 0 {
		return nil
	}
	if _, err := s.reapers.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: mine}}}}); err != nil {
		return fmt.Errorf("mongostore: retire reapers %v: %w", mine, err)
	}
	return nil
}
