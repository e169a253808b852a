package boltstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// getRun reads a run through the overlay; nil when there is none.
func (w *wtx) getRun(id string) (*board.Run, error) {
	v := w.get(bucketRuns, []byte(id))
	if v == nil {
		return nil, nil
	}
	return decodeRun(v)
}

// The runs bucket also holds, under keys no run id can take (they start
// with sep, which board.ValidateName refuses), the name a Start that
// resumed a run asked for: resumeKey(start id) -> run id, and
// resumedByKey(run id) -> start id, so a run has at most one such name.
// A retry of that Start names the id it asked for, not the recorded run's,
// and must still be answered from what the Start wrote
// (DESIGN.md#resume).
func resumeKey(startID string) []byte  { return append([]byte{sep, 's', sep}, startID...) }
func resumedByKey(runID string) []byte { return append([]byte{sep, 'r', sep}, runID...) }

// startedRun reads the run a Start naming id wrote: the run of that id, or
// the recorded run a Start asking for id resumed. Nil when there is none.
func (w *wtx) startedRun(id string) (*board.Run, error) {
	if run, err := w.getRun(id); err != nil || run != nil {
		return run, err
	}
	if alias := w.get(bucketRuns, resumeKey(id)); len(alias) > 0 {
		return w.getRun(string(alias))
	}
	return nil, nil
}

// nameResume records that the Start asking for startID resumed run runID,
// replacing the name an earlier resume of the run left.
func (w *wtx) nameResume(runID, startID string) {
	if old := w.get(bucketRuns, resumedByKey(runID)); len(old) > 0 {
		w.del(bucketRuns, resumeKey(string(old)))
	}
	w.put(bucketRuns, resumeKey(startID), []byte(runID))
	w.put(bucketRuns, resumedByKey(runID), []byte(startID))
}

// putRun writes a run and its event (run_created when created, else
// run_updated) in the caller's write.
func (w *wtx) putRun(run board.Run, created bool, actor string) error {
	v, err := json.Marshal(run)
	if err != nil {
		return fmt.Errorf("encode run %q: %w", run.ID, err)
	}
	w.put(bucketRuns, []byte(run.ID), v)
	typ := board.EventRunUpdated
	if created {
		typ = board.EventRunCreated
	}
	w.emit(board.Event{
		Type: typ, Card: run.Card, Actor: actor, At: run.UpdatedAt,
		Data: board.EventData{RunID: run.ID, Status: string(run.Status)},
	})
	return nil
}

// createRun records a new run owned by tok on the claimed card rec and
// points the card at it (LastRunID, LastRunEpoch, Runs), in the caller's
// write. A duplicate run id is ErrAlreadyExists.
func (s *Store) createRun(w *wtx, rec *cardRecord, run board.Run, tok board.ClaimToken, now time.Time) (board.Run, error) {
	if w.get(bucketRuns, []byte(run.ID)) != nil {
		return board.Run{}, fmt.Errorf("run %q: %w", run.ID, board.ErrAlreadyExists)
	}
	run.Card, run.Owner, run.Epoch = rec.ID, tok.Marker, tok.Epoch
	run.CreatedAt, run.UpdatedAt = now, now
	if err := w.putRun(run, true, tok.Marker); err != nil {
		return board.Run{}, err
	}
	return run, s.pointAt(w, rec, run.ID, tok, now)
}

// pointAt stamps the card's run pointer under tok (last_run event),
// appending the run to Runs when it is new there.
func (s *Store) pointAt(w *wtx, rec *cardRecord, runID string, tok board.ClaimToken, now time.Time) error {
	known := slices.Contains(rec.Runs, runID)
	if rec.LastRunID == runID && known && rec.LastRunEpoch == tok.Epoch {
		return nil
	}
	ev := board.Event{Type: board.EventLastRun, Actor: tok.Marker, Data: board.EventData{RunID: runID}}
	return w.updateCard(rec, now, ev, func() {
		rec.LastRunID = runID
		rec.LastRunEpoch = tok.Epoch
		if !known {
			// A run new to the card is an attempt; a resumed one is not
			// (DESIGN.md#retries).
			rec.Runs = append(slices.Clone(rec.Runs), runID)
			rec.Attempts++
		}
	})
}

// CreateRun starts a run under r.Token and points the card at it, in one
// write fenced on the token.
func (s *Store) CreateRun(ctx context.Context, r board.CreateRunParams) (board.Run, error) {
	r, err := r.Normalize()
	if err != nil {
		return board.Run{}, err
	}
	var out board.Run
	err = s.write(ctx, func(w *wtx) error {
		rec, err := w.getCard(r.Run.Card)
		if err != nil {
			return fmt.Errorf("run %q: %w", r.Run.ID, err)
		}
		if !holds(rec, r.Token) {
			return conflict(rec)
		}
		now := s.now()
		// The run it displaces is closed in the same write when it is
		// still open: nothing would point at it any more.
		if cur, err := recordedRun(w, rec); err != nil {
			return err
		} else if cur != nil {
			if closed, ok := board.DisplacedRun(*cur, r.Run.ID, now); ok {
				if err := w.putRun(closed, false, r.Token.Marker); err != nil {
					return err
				}
			}
		}
		out, err = s.createRun(w, rec, r.Run, r.Token, now)
		return err
	})
	return out, err
}

// UpdateRun changes a run, fenced on u.Token (board.RunFence). With
// IfStatus it is a CAS on the current status, so a late verdict from a
// living owner and the liveness oracle's PROCESS_ORPHANED promotion cannot
// overwrite each other; a miss is ErrTransitionRejected and writes nothing.
func (s *Store) UpdateRun(ctx context.Context, u board.UpdateRunParams) (board.Run, error) {
	if err := u.Validate(); err != nil {
		return board.Run{}, err
	}
	var out board.Run
	err := s.write(ctx, func(w *wtx) error {
		run, err := w.getRun(u.ID)
		if err != nil {
			return err
		}
		if run == nil {
			return board.NotFound("run", u.ID)
		}
		rec, err := w.getCard(run.Card)
		if err != nil {
			return fmt.Errorf("run %q: %w", u.ID, err)
		}
		if err := board.RunFence(rec.Card, *run, u.Token); err != nil {
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
		next.UpdatedAt = s.now()
		out = next
		return w.putRun(next, false, u.Actor)
	})
	return out, err
}

// GetRun reads one run.
func (s *Store) GetRun(ctx context.Context, p board.GetRunParams) (board.Run, error) {
	if err := ctx.Err(); err != nil {
		return board.Run{}, err
	}
	if err := board.ValidateName("run id", p.ID); err != nil {
		return board.Run{}, err
	}
	var out board.Run
	err := s.view(func(tx *snap) error {
		v := tx.get(bucketRuns, []byte(p.ID))
		if v == nil {
			return board.NotFound("run", p.ID)
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
func (s *Store) Events(ctx context.Context, p board.EventsParams) ([]board.Event, error) {
	after, limit := p.After, p.Limit
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
	err := s.view(func(tx *snap) error {
		if err := board.CheckEventsPruned(after, prunedThrough(tx.get)); err != nil {
			return err
		}
		return tx.iterate(bucketEvents, seqKey(uint64(after)+1), func(k, v []byte) (bool, error) {
			var ev board.Event
			if err := json.Unmarshal(v, &ev); err != nil {
				return false, fmt.Errorf("decode event %x: %w", k, err)
			}
			out = append(out, ev)
			return limit <= 0 || len(out) < limit, nil
		})
	})
	return out, err
}
