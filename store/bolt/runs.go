package boltstore

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/board"
)

func validContinuation(c board.Continuation) bool {
	switch c {
	case board.ContinuationNone, board.ContinuationRedeliveryPending, board.ContinuationRetryArmed:
		return true
	}
	return false
}

// CreateRun records a run of an existing card and appends it to the card's
// run pointers. The id is the caller's (the worker names its run before it
// starts); an empty owner is the card's current claim holder, since a run's
// owner is the claim holder.
func (s *Store) CreateRun(ctx context.Context, r board.Run) (board.Run, error) {
	if err := board.ValidateName("run id", r.ID); err != nil {
		return board.Run{}, err
	}
	if err := validateCardID(r.Card); err != nil {
		return board.Run{}, fmt.Errorf("run %q: %w", r.ID, err)
	}
	if r.Status == "" {
		r.Status = board.RunRunning
	}
	if !r.Status.Known() {
		return board.Run{}, board.Invalid("run %q of card %q: unknown status %q", r.ID, r.Card, r.Status)
	}
	if r.Continuation == "" {
		r.Continuation = board.ContinuationNone
	}
	if !validContinuation(r.Continuation) {
		return board.Run{}, board.Invalid("run %q of card %q: unknown continuation %q", r.ID, r.Card, r.Continuation)
	}
	if r.Owner != "" {
		if err := board.ValidateMarker(r.Owner); err != nil {
			return board.Run{}, fmt.Errorf("run %q of card %q: owner: %w", r.ID, r.Card, err)
		}
	}
	for _, f := range []struct{ kind, v string }{{"failure code", r.FailureCode}, {"host", r.Host}} {
		if err := validateText(f.kind, f.v); err != nil {
			return board.Run{}, fmt.Errorf("run %q of card %q: %w", r.ID, r.Card, err)
		}
	}
	if r.PID < 0 || r.Epoch < 0 {
		return board.Run{}, board.Invalid("run %q of card %q: negative pid or epoch", r.ID, r.Card)
	}
	var out board.Run
	err := s.write(ctx, func(w *wtx) error {
		run := r
		if w.get(bucketRuns, []byte(run.ID)) != nil {
			return fmt.Errorf("run %q: %w", run.ID, board.ErrAlreadyExists)
		}
		rec, err := w.getCard(run.Card)
		if err != nil {
			return fmt.Errorf("run %q: %w", run.ID, err)
		}
		if run.Owner == "" {
			run.Owner, run.Epoch = rec.Claim, rec.ClaimEpoch
		}
		now := s.now()
		run.CreatedAt, run.UpdatedAt = now, now
		v, err := json.Marshal(run)
		if err != nil {
			return fmt.Errorf("encode run %q: %w", run.ID, err)
		}
		w.put(bucketRuns, []byte(run.ID), v)
		prev := *rec
		rec.Runs = append(append([]string{}, rec.Runs...), run.ID)
		rec.UpdatedAt = now
		if err := w.putCard(&prev, rec); err != nil {
			return err
		}
		w.emit(board.Event{
			Type: board.EventRunCreated, Card: run.Card, Actor: run.Owner, At: now,
			Data: board.EventData{RunID: run.ID, Status: string(run.Status)},
		})
		out = run
		return nil
	})
	return out, err
}

// UpdateRun changes a run. With IfStatus it is a CAS on the current status,
// so a late verdict from a living owner and the liveness oracle's
// PROCESS_ORPHANED promotion cannot overwrite each other; a miss is
// ErrTransitionRejected and writes nothing.
func (s *Store) UpdateRun(ctx context.Context, u board.RunUpdate) (board.Run, error) {
	if err := board.ValidateName("run id", u.ID); err != nil {
		return board.Run{}, err
	}
	if u.IfStatus != nil && !u.IfStatus.Known() {
		return board.Run{}, board.Invalid("run %q: unknown if-status %q", u.ID, *u.IfStatus)
	}
	if u.Status != nil && !u.Status.Known() {
		return board.Run{}, board.Invalid("run %q: unknown status %q", u.ID, *u.Status)
	}
	if u.Continuation != nil && !validContinuation(*u.Continuation) {
		return board.Run{}, board.Invalid("run %q: unknown continuation %q", u.ID, *u.Continuation)
	}
	if u.FailureCode != nil {
		if err := validateText("failure code", *u.FailureCode); err != nil {
			return board.Run{}, fmt.Errorf("run %q: %w", u.ID, err)
		}
	}
	if err := validateText("actor", u.Actor); err != nil {
		return board.Run{}, fmt.Errorf("run %q: %w", u.ID, err)
	}
	var out board.Run
	err := s.write(ctx, func(w *wtx) error {
		v := w.get(bucketRuns, []byte(u.ID))
		if v == nil {
			return board.NotFound("run", u.ID)
		}
		run, err := decodeRun(v)
		if err != nil {
			return err
		}
		if u.IfStatus != nil && run.Status != *u.IfStatus {
			return fmt.Errorf("run %q of card %q: status is %s, not %s: %w",
				u.ID, run.Card, run.Status, *u.IfStatus, board.ErrTransitionRejected)
		}
		next := *run
		if u.Status != nil {
			next.Status = *u.Status
		}
		if u.Continuation != nil {
			next.Continuation = *u.Continuation
		}
		if u.FailureCode != nil {
			next.FailureCode = *u.FailureCode
		}
		if u.Checkpoint != nil {
			next.Checkpoint = *u.Checkpoint
		}
		if next == *run {
			out = *run
			return nil
		}
		now := s.now()
		next.UpdatedAt = now
		nv, err := json.Marshal(next)
		if err != nil {
			return fmt.Errorf("encode run %q: %w", u.ID, err)
		}
		w.put(bucketRuns, []byte(u.ID), nv)
		w.emit(board.Event{
			Type: board.EventRunUpdated, Card: next.Card, Actor: u.Actor, At: now,
			Data: board.EventData{RunID: next.ID, Status: string(next.Status)},
		})
		out = next
		return nil
	})
	return out, err
}

// GetRun reads one run.
func (s *Store) GetRun(ctx context.Context, id string) (board.Run, error) {
	if err := ctx.Err(); err != nil {
		return board.Run{}, err
	}
	if err := board.ValidateName("run id", id); err != nil {
		return board.Run{}, err
	}
	var out board.Run
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRuns).Get([]byte(id))
		if v == nil {
			return board.NotFound("run", id)
		}
		r, err := decodeRun(v)
		if err != nil {
			return err
		}
		out = *r
		return nil
	})
	return out, err
}

// Events returns events after seq after, oldest first, at most limit (0: no
// limit).
func (s *Store) Events(ctx context.Context, after int64, limit int) ([]board.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if after < 0 {
		after = 0
	}
	if limit < 0 {
		return nil, board.Invalid("negative limit %d", limit)
	}
	var out []board.Event
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketEvents).Cursor()
		for k, v := c.Seek(seqKey(uint64(after) + 1)); k != nil; k, v = c.Next() {
			var ev board.Event
			if err := json.Unmarshal(v, &ev); err != nil {
				return fmt.Errorf("decode event %x: %w", k, err)
			}
			out = append(out, ev)
			if limit > 0 && len(out) >= limit {
				return nil
			}
		}
		return nil
	})
	return out, err
}
