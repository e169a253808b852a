package mongostore

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekeeper/leasekeeper/board"
)

// CreateRun records a run of an existing card and appends it to the card's
// run pointers. An empty owner is the card's current claim holder.
//
// Twin divergence: the run document (with its run_created event in its own
// outbox) and the card's run pointer are two writes. A crash between them
// leaves a run the card does not point at yet; the run and its event are
// intact, and the pointer is also set by SetLastRunOwned.
func (s *Store) CreateRun(ctx context.Context, r board.Run) (board.Run, error) {
	r, err := r.Normalize()
	if err != nil {
		return board.Run{}, err
	}
	card, err := s.readCard(ctx, r.Card)
	if err != nil {
		return board.Run{}, fmt.Errorf("run %q: %w", r.ID, err)
	}
	if err := s.runs.FindOne(ctx, bson.D{{Key: "_id", Value: r.ID}}).Err(); err == nil {
		return board.Run{}, fmt.Errorf("run %q: %w", r.ID, board.ErrAlreadyExists)
	} else if !errors.Is(err, mongo.ErrNoDocuments) {
		return board.Run{}, fmt.Errorf("mongostore: read run %q: %w", r.ID, err)
	}
	if r.Owner == "" {
		r.Owner, r.Epoch = card.Claim, card.ClaimEpoch
	}
	clk, err := s.serverNow(ctx)
	if err != nil {
		return board.Run{}, err
	}
	r.CreatedAt, r.UpdatedAt = clk.now, clk.now
	ev := newEvent(board.EventRunCreated, r.Card, board.ReasonNone, r.Owner, clk.now,
		board.EventData{RunID: r.ID, Status: string(r.Status)})
	doc := bson.D{
		{Key: "_id", Value: r.ID},
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
		{Key: "created_at", Value: clk.now},
		{Key: "updated_at", Value: clk.now},
		{Key: fieldOutbox, Value: []outboxEntry{ev}},
	}
	if _, err := s.runs.InsertOne(ctx, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return board.Run{}, fmt.Errorf("run %q: %w", r.ID, board.ErrAlreadyExists)
		}
		return board.Run{}, writeErr(fmt.Sprintf("mongostore: create run %q", r.ID), err)
	}
	_ = s.relay(ctx, s.runs, r.ID, []outboxEntry{ev})
	// The run pointer is an ordinary write: $addToSet keeps the pointers
	// append-only and unique; the claim family is not touched.
	if _, err := s.cards.UpdateOne(ctx, bson.D{{Key: "_id", Value: r.Card}}, bson.D{
		{Key: "$addToSet", Value: bson.D{{Key: "runs", Value: r.ID}}},
		{Key: "$set", Value: bson.D{{Key: "updated_at", Value: clk.now}}},
	}); err != nil {
		return board.Run{}, writeErr(fmt.Sprintf("mongostore: record run %q on card %q", r.ID, r.Card), err)
	}
	return r, nil
}

func (s *Store) readRun(ctx context.Context, id string) (*runState, error) {
	raw, err := s.runs.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, board.NotFound("run", id)
	}
	if err != nil {
		return nil, fmt.Errorf("mongostore: read run %q: %w", id, err)
	}
	return decodeRun(raw)
}

// UpdateRun changes a run. With IfStatus it is a CAS on the current status,
// so a late verdict from a living owner and the liveness oracle's
// PROCESS_ORPHANED promotion cannot overwrite each other; a miss is
// ErrTransitionRejected and writes nothing.
func (s *Store) UpdateRun(ctx context.Context, u board.RunUpdate) (board.Run, error) {
	if err := u.Validate(); err != nil {
		return board.Run{}, err
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		clk, err := s.serverNow(ctx)
		if err != nil {
			return board.Run{}, err
		}
		cur, err := s.readRun(ctx, u.ID)
		if err != nil {
			return board.Run{}, err
		}
		next, changed, err := u.ApplyTo(cur.Run)
		if err != nil {
			return board.Run{}, err
		}
		if !changed {
			return cur.Run, nil
		}
		next.UpdatedAt = clk.now
		ev := newEvent(board.EventRunUpdated, next.Card, board.ReasonNone, u.Actor, clk.now,
			board.EventData{RunID: next.ID, Status: string(next.Status)})
		// CAS on every field the update computed from, so two concurrent
		// updates cannot both claim the same transition.
		filter := bson.D{{Key: "_id", Value: u.ID}}
		for _, f := range []string{"status", "continuation", "failure_code", "checkpoint"} {
			filter = append(filter, same(cur.raw, f))
		}
		raw, err := s.runs.FindOneAndUpdate(ctx, filter, bson.D{
			{Key: "$set", Value: bson.D{
				{Key: "status", Value: string(next.Status)},
				{Key: "continuation", Value: string(next.Continuation)},
				{Key: "failure_code", Value: next.FailureCode},
				{Key: "checkpoint", Value: next.Checkpoint},
				{Key: "updated_at", Value: clk.now},
			}},
			{Key: "$push", Value: bson.D{{Key: fieldOutbox, Value: bson.D{{Key: "$each", Value: []outboxEntry{ev}}}}}},
		}, options.FindOneAndUpdate().SetReturnDocument(options.After)).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue
		}
		if err != nil {
			return board.Run{}, writeErr(fmt.Sprintf("mongostore: update run %q", u.ID), err)
		}
		after, err := decodeRun(raw)
		if err != nil {
			return board.Run{}, err
		}
		_ = s.relay(ctx, s.runs, u.ID, after.outbox)
		return after.Run, nil
	}
	return board.Run{}, fmt.Errorf("mongostore: run %q: %w", u.ID, ErrContention)
}

// GetRun reads one run.
func (s *Store) GetRun(ctx context.Context, id string) (board.Run, error) {
	if err := board.ValidateName("run id", id); err != nil {
		return board.Run{}, err
	}
	r, err := s.readRun(ctx, id)
	if err != nil {
		return board.Run{}, err
	}
	return r.Run, nil
}
