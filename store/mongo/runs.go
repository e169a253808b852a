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

// Runs on this twin.
//
// MongoDB writes one document atomically and FerretDB has no transactions,
// so a run write cannot be fenced on the card's claim while the run lives
// in a document of its own. The card's current run is therefore EMBEDDED
// in the card document (fieldRun): every write of it — Start, Finish,
// CreateRun, UpdateRun, Release closing it — is one compare-and-set on the
// card that checks the claim and epoch and the run as read in the same
// update, with its events in the card's outbox.
//
// The runs collection keeps the runs that are no longer current (archive
// copies) and runs an older version wrote there. When a write makes
// another run current, the displaced run is first upserted into the
// collection (archiveRun: idempotent, and never over a newer copy: every
// embedded write bumps its rev), then the card is CASed on the embedded
// run as read, so a run that changed after its archive copy was taken
// makes the CAS retry. A run that is only in the collection is adopted
// into its card (the same two steps) before any write to it, so a run
// an older agent recorded is written fenced like any other. GetRun reads
// the embedded run first (index run_id), then the collection.
const fieldRun = "run"

// runDoc is the stored form of a run, embedded (with its id under "id") or
// archived (under "_id").
func runDoc(r board.Run, idKey string, rev int64) bson.D {
	return bson.D{
		{Key: idKey, Value: r.ID},
		{Key: "card", Value: r.Card},
		{Key: "status", Value: string(r.Status)},
		{Key: "continuation", Value: string(r.Continuation)},
		{Key: "failure_code", Value: r.FailureCode},
		{Key: "checkpoint", Value: r.Checkpoint},
		{Key: "owner", Value: r.Owner},
		{Key: "epoch", Value: r.Epoch},
		{Key: "host", Value: r.Host},
		{Key: "pid", Value: int64(r.PID)},
		{Key: "pid_start", Value: r.PIDStart},
		{Key: "pid_start_ticks", Value: r.PIDStartTicks},
		{Key: "boot_id", Value: r.BootID},
		{Key: "started_from", Value: r.StartedFrom},
		{Key: "retryable", Value: r.RetryableFailure},
		{Key: "created_at", Value: r.CreatedAt},
		{Key: "updated_at", Value: r.UpdatedAt},
		{Key: "rev", Value: rev},
	}
}

// runEvent is the outbox entry of a run write.
func runEvent(typ board.EventType, r board.Run, actor string) outboxEntry {
	return newEvent(typ, r.Card, board.ReasonNone, actor, r.UpdatedAt,
		board.EventData{RunID: r.ID, Status: string(r.Status)})
}

// setRun makes next the card's embedded run, conditioned on the embedded
// run as read (absent included), with its event.
func setRun(c *cardState, next board.Run, typ board.EventType, actor string) *change {
	return &change{
		cond:   bson.D{same(c.raw, fieldRun)},
		set:    bson.D{{Key: fieldRun, Value: runDoc(next, "id", c.runRev+1)}},
		events: []outboxEntry{runEvent(typ, next, actor)},
	}
}

// archiveRun upserts the archive copy of a run at revision rev. It never
// replaces a newer copy (a higher rev): that upsert matches nothing and
// its insert collides on _id, which is the answer "already archived".
func (s *Store) archiveRun(ctx context.Context, r board.Run, rev int64) error {
	doc := runDoc(r, "_id", rev)[1:]
	filter := bson.D{{Key: "_id", Value: r.ID}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "rev", Value: bson.D{{Key: "$lte", Value: rev}}}},
		bson.D{{Key: "rev", Value: bson.D{{Key: "$exists", Value: false}}}},
	}}}
	_, err := s.runs.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: doc}}, options.UpdateOne().SetUpsert(true))
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return writeErr(fmt.Sprintf("mongostore: archive run %q", r.ID), err)
	}
	return nil
}

// archived is the archive copy of a run a card write displaces, written
// before the write's CAS.
type archived struct {
	run board.Run
	rev int64
}

// displace archives the card's embedded run, if any, before a write that
// replaces it with another run. The copy is returned for settle.
func (s *Store) displace(ctx context.Context, c *cardState, runID string) (*archived, error) {
	if c.run == nil || c.run.ID == runID {
		return nil, nil
	}
	a := &archived{run: *c.run, rev: c.runRev}
	return a, s.archiveRun(ctx, a.run, a.rev)
}

// settle rewrites the archive copy of a run displaced as is, once the CAS
// that displaced it has landed, over a copy a refused write left one
// revision above it. The CAS checked that the card still embedded the run
// at a.rev, so a copy at a.rev+1 can only be the closed copy a Start or
// CreateRun archived before a CAS that was then refused (one that landed
// would have displaced the run first, and a run adopted again is embedded
// above any archived copy); left there, it would shadow the run's real
// state. A nil a is nothing to settle.
func (s *Store) settle(ctx context.Context, a *archived) error {
	if a == nil {
		return nil
	}
	doc := runDoc(a.run, "_id", a.rev)[1:]
	filter := bson.D{{Key: "_id", Value: a.run.ID}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "rev", Value: bson.D{{Key: "$lte", Value: a.rev + 1}}}},
		bson.D{{Key: "rev", Value: bson.D{{Key: "$exists", Value: false}}}},
	}}}
	_, err := s.runs.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: doc}}, options.UpdateOne().SetUpsert(true))
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return writeErr(fmt.Sprintf("mongostore: archive run %q", a.run.ID), err)
	}
	return nil
}

// readArchivedRun reads a run from the runs collection.
func (s *Store) readArchivedRun(ctx context.Context, id string) (*runState, error) {
	raw, err := s.runs.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, board.NotFound("run", id)
	}
	if err != nil {
		return nil, fmt.Errorf("mongostore: read run %q: %w", id, err)
	}
	return decodeRun(raw)
}

// cardOfRun reads the card whose embedded run is id; nil when none is.
func (s *Store) cardOfRun(ctx context.Context, id string) (*cardState, error) {
	raw, err := s.cards.FindOne(ctx, bson.D{{Key: fieldRun + ".id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mongostore: read the card of run %q: %w", id, err)
	}
	return decodeCard(raw)
}

// cardListingRun reads a card whose runs list the run id (every run a card
// ever pointed at, embedded or archived since); nil when none does.
func (s *Store) cardListingRun(ctx context.Context, id string) (*cardState, error) {
	raw, err := s.cards.FindOne(ctx, bson.D{{Key: "runs", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mongostore: read the card listing run %q: %w", id, err)
	}
	return decodeCard(raw)
}

// runExists reports whether a run id is taken, embedded or archived.
func (s *Store) runExists(ctx context.Context, id string) (bool, error) {
	c, err := s.cardOfRun(ctx, id)
	if err != nil || c != nil {
		return c != nil, err
	}
	return s.runArchived(ctx, id)
}

// runArchived reports whether the runs collection holds the run id.
func (s *Store) runArchived(ctx context.Context, id string) (bool, error) {
	_, err := s.readArchivedRun(ctx, id)
	if errors.Is(err, board.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// adopt makes the archived run id the embedded run of its card, archiving
// the run it displaces first. A run already embedded is left alone.
func (s *Store) adopt(ctx context.Context, id string) error {
	run, err := s.readArchivedRun(ctx, id)
	if err != nil {
		return err
	}
	rev := run.rev
	var moved *archived
	_, wrote, err := s.mutate(ctx, run.Card, func(c *cardState, clk serverClock) (*change, error) {
		moved = nil
		if c.run != nil && c.run.ID == id {
			return nil, nil
		}
		var err error
		if moved, err = s.displace(ctx, c, id); err != nil {
			return nil, err
		}
		// The card lists every run it embeds: Start's one question for a
		// taken run id asks the cards' runs (cardListingRun).
		return &change{
			cond:     bson.D{same(c.raw, fieldRun)},
			set:      bson.D{{Key: fieldRun, Value: runDoc(run.Run, "id", max(rev, c.runRev)+1)}},
			addToSet: bson.D{{Key: "runs", Value: id}},
		}, nil
	})
	if err != nil || !wrote {
		return err
	}
	return s.settle(ctx, moved)
}

// adoptRecorded adopts the card's recorded run when it is only in the
// runs collection (recorded by an older version, or displaced since), so
// a write that decides on it finds it embedded. Nothing to adopt is nil.
//
// It returns the card as it read it when there was nothing to adopt, so
// the write that follows can plan on that read instead of asking again
// (its compare-and-set makes an earlier read as good as a later one), and
// nil when it adopted (or tried to).
func (s *Store) adoptRecorded(ctx context.Context, card string) (*cardState, error) {
	c, err := s.readCard(ctx, card)
	if err != nil {
		return nil, err
	}
	if c.LastRunID == "" || (c.run != nil && c.run.ID == c.LastRunID) {
		return c, nil
	}
	if err := s.adopt(ctx, c.LastRunID); err != nil && !errors.Is(err, board.ErrNotFound) {
		return nil, err
	}
	return nil, nil
}

// recordedRun is the card's recorded run when it is embedded, nil when
// the card records none (or one that no longer exists).
func (c *cardState) recordedRun() *board.Run {
	if c.LastRunID == "" || c.run == nil || c.run.ID != c.LastRunID {
		return nil
	}
	return c.run
}

// pointAtChange stamps the card's run pointer under tok (last_run event).
func pointAtChange(c *cardState, clk serverClock, runID string, tok board.ClaimToken) *change {
	known := slices.Contains(c.Runs, runID)
	if c.LastRunID == runID && known && c.LastRunEpoch == tok.Epoch {
		return nil
	}
	set := bson.D{{Key: "last_run_id", Value: runID}, {Key: "last_run_epoch", Value: tok.Epoch},
		{Key: "updated_at", Value: clk.now}}
	if !known {
		// A run new to the card is an attempt (DESIGN.md#retries). The
		// write carries events, so it is conditioned on the outbox stamp
		// read with c.Attempts: no other write counted in between.
		set = append(set, bson.E{Key: "attempts", Value: int64(c.Attempts + 1)})
	}
	return &change{
		set:      set,
		addToSet: bson.D{{Key: "runs", Value: runID}},
		events: []outboxEntry{newEvent(board.EventLastRun, c.ID, board.ReasonNone, tok.Marker, clk.now,
			board.EventData{RunID: runID})},
	}
}

// CreateRun starts a run under r.Token and points the card at it: one CAS
// on the card, fenced on the token, that embeds the run.
func (s *Store) CreateRun(ctx context.Context, r board.CreateRunParams) (board.Run, error) {
	r, err := r.Normalize()
	if err != nil {
		return board.Run{}, err
	}
	if taken, err := s.runExists(ctx, r.Run.ID); err != nil {
		return board.Run{}, err
	} else if taken {
		return board.Run{}, fmt.Errorf("run %q: %w", r.Run.ID, board.ErrAlreadyExists)
	}
	// The run it displaces is closed in the same CAS when it is still
	// open, so the card's recorded run must be embedded first.
	if _, err := s.adoptRecorded(ctx, r.Run.Card); err != nil {
		return board.Run{}, fmt.Errorf("run %q: %w", r.Run.ID, err)
	}
	var (
		out   board.Run
		moved *archived
	)
	_, wrote, err := s.owned(ctx, r.Run.Card, r.Token, func(c *cardState, clk serverClock) (*change, error) {
		moved = nil
		var closed *change
		if cur := c.recordedRun(); cur != nil {
			if next, ok := board.DisplacedRun(*cur, r.Run.ID, clk.now); ok {
				// Archived already closed: the CAS below displaces it
				// from the card (as Start's supersede).
				if err := s.archiveRun(ctx, next, c.runRev+1); err != nil {
					return nil, err
				}
				closed = &change{events: []outboxEntry{runEvent(board.EventRunUpdated, next, r.Token.Marker)}}
			}
		}
		if closed == nil {
			var err error
			if moved, err = s.displace(ctx, c, r.Run.ID); err != nil {
				return nil, err
			}
		}
		run := r.Run
		run.CreatedAt, run.UpdatedAt = clk.now, clk.now
		out = run
		return merge(closed, setRun(c, run, board.EventRunCreated, r.Token.Marker), pointAtChange(c, clk, run.ID, r.Token)), nil
	})
	if err != nil {
		return board.Run{}, fmt.Errorf("run %q: %w", r.Run.ID, err)
	}
	if wrote {
		if err := s.settle(ctx, moved); err != nil {
			return out, err
		}
	}
	return out, nil
}

// UpdateRun changes a run, fenced on u.Token (board.RunFence): one CAS on
// its card that checks the claim and the run as read. With IfStatus it is
// a CAS on the current status as well; a miss is ErrTransitionRejected and
// writes nothing.
func (s *Store) UpdateRun(ctx context.Context, u board.UpdateRunParams) (board.Run, error) {
	if err := u.Validate(); err != nil {
		return board.Run{}, err
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		c, err := s.cardOfRun(ctx, u.ID)
		if err != nil {
			return board.Run{}, err
		}
		if c == nil {
			// Not embedded: adopt it into its card first (a run only in
			// the collection is written fenced like any other) — unless
			// the fence refuses the write anyway, which must write nothing.
			old, err := s.readArchivedRun(ctx, u.ID)
			if err != nil {
				return board.Run{}, err
			}
			card, err := s.readCard(ctx, old.Card)
			if err != nil {
				return board.Run{}, fmt.Errorf("run %q: %w", u.ID, err)
			}
			if err := board.RunFence(card.Card, old.Run, u.Token); err != nil {
				return board.Run{}, err
			}
			if err := s.adopt(ctx, u.ID); err != nil {
				return board.Run{}, err
			}
			continue
		}
		var out board.Run
		after, _, err := s.mutate(ctx, c.ID, func(c *cardState, clk serverClock) (*change, error) {
			if c.run == nil || c.run.ID != u.ID {
				return nil, errRunMoved
			}
			if err := board.RunFence(c.Card, *c.run, u.Token); err != nil {
				return nil, err
			}
			next, changed, err := u.ApplyTo(*c.run)
			if err != nil || !changed {
				out = *c.run
				return nil, err
			}
			next.UpdatedAt = clk.now
			out = next
			ch := setRun(c, next, board.EventRunUpdated, u.Actor)
			ch.cond = append(ch.cond, tokenCond(u.Token)...)
			return ch, nil
		})
		if errors.Is(err, errRunMoved) {
			continue
		}
		if err != nil {
			return board.Run{}, err
		}
		_ = after
		return out, nil
	}
	return board.Run{}, fmt.Errorf("mongostore: run %q: %w", u.ID, ErrContention)
}

// errRunMoved: the run was displaced from the card between two reads.
var errRunMoved = errors.New("run moved")

// GetRun reads one run: the embedded one first, then the collection.
func (s *Store) GetRun(ctx context.Context, p board.GetRunParams) (board.Run, error) {
	if err := board.ValidateName("run id", p.ID); err != nil {
		return board.Run{}, err
	}
	c, err := s.cardOfRun(ctx, p.ID)
	if err != nil {
		return board.Run{}, err
	}
	if c != nil && c.run != nil && c.run.ID == p.ID {
		return *c.run, nil
	}
	r, err := s.readArchivedRun(ctx, p.ID)
	if err != nil {
		return board.Run{}, err
	}
	return r.Run, nil
}
