package boltstore

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/board"
)

// CreateRun records a run of an existing card and appends it to the card's
// run pointers. The id is the caller's (the worker names its run before it
// starts); an empty owner is the card's current claim holder, since a run's
// owner is the claim holder.
func (s *Store) CreateRun(ctx context.Context, r board.Run) (board.Run, error) {
	r, err := r.Normalize()
	if err != nil {
		return board.Run{}, err
	}
	var out board.Run
	err = s.write(ctx, func(w *wtx) error {
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
		ev := board.Event{Type: board.EventRunCreated, Actor: run.Owner, Data: board.EventData{RunID: run.ID, Status: string(run.Status)}}
		err = w.updateCard(rec, now, ev, func() { rec.Runs = append(append([]string{}, rec.Runs...), run.ID) })
		if err != nil {
			return err
		}
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
	if err := u.Validate(); err != nil {
		return board.Run{}, err
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
		next, changed, err := u.ApplyTo(*run)
		if err != nil {
			return err
		}
		if !changed {
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
	if err := board.ValidateLimit(limit); err != nil {
		return nil, err
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
