package boltstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/leasekeeper/leasekeeper/board"
)

// keyEventsPruned holds, in the meta bucket, the highest event seq a Prune
// deleted: Events refuses a reader positioned below it (DESIGN.md#retention).
var keyEventsPruned = []byte("events_pruned_through")

// prunedThrough reads the highest pruned event seq; 0 when none was.
func prunedThrough(get func(bucket, key []byte) []byte) int64 {
	v := get(bucketMeta, keyEventsPruned)
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

// pruneRun is one run a Prune's listing found.
type pruneRun struct{ card, run string }

// Prune lists what is older than p.Before in a read (the listing never
// holds the writer), then deletes at most p.Limit runs and p.Limit events
// in one write that checks each card again: a card reopened or claimed
// since the listing keeps its runs (DESIGN.md#retention).
func (s *Store) Prune(ctx context.Context, p board.PruneParams) (board.PruneResult, error) {
	if err := ctx.Err(); err != nil {
		return board.PruneResult{}, err
	}
	if err := p.Validate(); err != nil {
		return board.PruneResult{}, err
	}
	limit := p.EffectiveLimit()
	brd := s.brd()
	before := normTime(p.Before)
	var runs []pruneRun
	var seqs []int64
	out := board.PruneResult{Cards: []string{}, DryRun: p.DryRun}
	err := s.view(func(rd *snap) error {
		for _, st := range brd.States {
			if !st.Terminal {
				continue
			}
			prefix := statePrefix(st.Name)
			err := rd.scan(bucketIdxState, prefix, func(k, v []byte) (bool, error) {
				if len(runs) >= limit {
					out.More = true
					return false, nil
				}
				if slices.Equal(v, stateClaimed) {
					return true, nil
				}
				id := idFromOrderKey(k[len(prefix):])
				rec, err := readCard(rd, id)
				if err != nil {
					return false, err
				}
				if !brd.Finished(rec.Card) || !rec.UpdatedAt.Before(before) {
					return true, nil
				}
				for _, runID := range cardRuns(rec) {
					v := rd.get(bucketRuns, []byte(runID))
					if v == nil {
						continue
					}
					run, err := decodeRun(v)
					if err != nil {
						return false, err
					}
					if !run.UpdatedAt.Before(before) {
						continue
					}
					if len(runs) >= limit {
						out.More = true
						return false, nil
					}
					runs = append(runs, pruneRun{card: id, run: runID})
				}
				return true, nil
			})
			if err != nil {
				return err
			}
			if out.More {
				break
			}
		}
		return rd.iterate(bucketEvents, seqKey(1), func(k, v []byte) (bool, error) {
			seq := int64(binary.BigEndian.Uint64(k))
			if p.KeepFrom > 0 && seq >= p.KeepFrom {
				return false, nil
			}
			var ev board.Event
			if err := json.Unmarshal(v, &ev); err != nil {
				return false, fmt.Errorf("decode event %x: %w", k, err)
			}
			// The log is in commit order: the first event not older than
			// the cutoff ends the prunable prefix (a clock stepped back
			// may leave an older one behind it, which waits for the next
			// pass).
			if !ev.At.Before(before) {
				return false, nil
			}
			if len(seqs) >= limit {
				out.More = true
				return false, nil
			}
			seqs = append(seqs, seq)
			return true, nil
		})
	})
	if err != nil {
		return board.PruneResult{}, err
	}
	if p.DryRun {
		for _, r := range runs {
			if !slices.Contains(out.Cards, r.card) {
				out.Cards = append(out.Cards, r.card)
			}
		}
		out.Runs, out.Events = len(runs), len(seqs)
		if len(seqs) > 0 {
			out.EventsThrough = seqs[len(seqs)-1]
		}
		return out, nil
	}
	if len(runs) == 0 && len(seqs) == 0 {
		return out, nil
	}
	if s.pruneListed != nil {
		s.pruneListed()
	}
	more := out.More
	err = s.write(ctx, func(w *wtx) error {
		out = board.PruneResult{Cards: []string{}, More: more}
		checked := map[string]bool{}
		for _, r := range runs {
			ok, seen := checked[r.card]
			if !seen {
				rec, err := w.getCard(r.card)
				if err != nil && !errors.Is(err, board.ErrNotFound) {
					return err
				}
				ok = err == nil && brd.Finished(rec.Card) && rec.UpdatedAt.Before(before)
				checked[r.card] = ok
			}
			if !ok {
				continue
			}
			run, err := w.getRun(r.run)
			if err != nil {
				return err
			}
			if run == nil || !run.UpdatedAt.Before(before) {
				continue
			}
			w.deleteRun(r.run)
			out.Runs++
			if !slices.Contains(out.Cards, r.card) {
				out.Cards = append(out.Cards, r.card)
			}
		}
		for _, seq := range seqs {
			if w.get(bucketEvents, seqKey(uint64(seq))) == nil {
				continue
			}
			w.del(bucketEvents, seqKey(uint64(seq)))
			out.Events++
			out.EventsThrough = seq
		}
		if out.EventsThrough > prunedThrough(w.get) {
			w.put(bucketMeta, keyEventsPruned, binary.BigEndian.AppendUint64(nil, uint64(out.EventsThrough)))
		}
		return nil
	})
	if err != nil {
		return board.PruneResult{}, err
	}
	return out, nil
}

// cardRuns are the runs a card points at: its run list and its recorded
// run (a file from before the list may lack it there).
func cardRuns(rec *cardRecord) []string {
	ids := slices.Clone(rec.Runs)
	if rec.LastRunID != "" && !slices.Contains(ids, rec.LastRunID) {
		ids = append(ids, rec.LastRunID)
	}
	return ids
}

// deleteRun deletes a run and the name a resuming Start gave it.
func (w *wtx) deleteRun(id string) {
	w.del(bucketRuns, []byte(id))
	if alias := w.get(bucketRuns, resumedByKey(id)); len(alias) > 0 {
		w.del(bucketRuns, resumeKey(string(alias)))
		w.del(bucketRuns, resumedByKey(id))
	}
}

// DeleteCard deletes an unclaimed card that no card depends on, with its
// runs and its index entries, and records a card_deleted event, in one
// write. Its claim record stays behind, free, as the id's epoch floor: a
// card created again under the same id goes on counting from the deleted
// card's epoch, so no token is ever handed out twice (DESIGN.md#epoch-monotone).
func (s *Store) DeleteCard(ctx context.Context, p board.DeleteCardParams) (board.DeleteCardResult, error) {
	if err := p.Validate(); err != nil {
		return board.DeleteCardResult{}, err
	}
	var out board.DeleteCardResult
	fn := func(w *wtx) error {
		rec, err := w.getCard(p.ID)
		if err != nil {
			return err
		}
		if rec.Claimed() {
			return fmt.Errorf("delete card %q: release it first: %w", p.ID, conflict(rec))
		}
		deps, err := w.dependents(p.ID)
		if err != nil {
			return err
		}
		if len(deps) > 0 {
			ids := make([]string, len(deps))
			for i, d := range deps {
				ids[i] = d.ID
			}
			return fmt.Errorf("delete card %q: cards %q name it among their blockers; delete them first: %w", p.ID, ids, board.ErrTransitionRejected)
		}
		out = board.DeleteCardResult{Card: rec.Card, DryRun: p.DryRun}
		for _, id := range cardRuns(rec) {
			if w.get(bucketRuns, []byte(id)) != nil {
				out.Runs++
				if !p.DryRun {
					w.deleteRun(id)
				}
			}
		}
		if p.DryRun {
			return nil
		}
		for _, e := range indexEntries(rec) {
			w.del(e.bucket, e.key)
		}
		w.del(bucketCards, []byte(p.ID))
		w.setKey(bucketClaims, p.ID, appendClaim(nil, claimFamily{Epoch: rec.ClaimEpoch}))
		w.emit(board.Event{
			Type: board.EventCardDeleted, Card: p.ID, Actor: p.Actor, At: s.now(),
			Data: board.EventData{From: rec.State, Labels: rec.Labels},
		})
		return nil
	}
	if p.DryRun {
		err := s.view(func(rd *snap) error { return fn(newWtx(rd)) })
		return out, err
	}
	err := s.write(ctx, fn)
	return out, err
}
