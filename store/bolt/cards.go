package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// CreateCard creates a card after validating everything it names.
func (s *Store) CreateCard(ctx context.Context, nc board.CreateCardParams) (board.Card, error) {
	nc, err := nc.Normalize()
	if err != nil {
		return board.Card{}, err
	}
	deps, labels := nc.DependsOn, nc.Labels
	if nc.State != "" {
		if _, err := s.brd().RequireTarget(nc.State); err != nil {
			return board.Card{}, fmt.Errorf("card %q: %w", nc.ID, err)
		}
	}

	var out board.Card
	err = s.write(ctx, func(w *wtx) error {
		if w.get(bucketCards, []byte(nc.ID)) != nil {
			return fmt.Errorf("card %q: %w", nc.ID, board.ErrAlreadyExists)
		}
		blockers := make([]string, len(deps))
		for i, d := range deps {
			b, err := w.getCard(d)
			if err != nil {
				return board.Invalid("card %q: unknown blocker %q", nc.ID, d)
			}
			blockers[i] = b.State
		}
		if err := s.checkCycle(w, nc.ID, deps); err != nil {
			return err
		}
		state := s.brd().InitialState(nc.State, s.brd().Complete(blockers))
		seq := w.nextCardSeq()
		now := s.now()
		rec := &cardRecord{Seq: seq, Card: board.Card{
			ID:        nc.ID,
			Title:     nc.Title,
			State:     state,
			Labels:    labels,
			DependsOn: deps,
			Retry:     nc.Retry,
			CreatedAt: now,
			UpdatedAt: now,
		}}
		// A deleted card's claim record is its id's epoch floor: the new
		// card counts on from it (DESIGN.md#epoch-monotone).
		if floor := w.get(bucketClaims, []byte(nc.ID)); floor != nil {
			f, err := decodeClaim(floor)
			if err != nil {
				return fmt.Errorf("card %q: %w", nc.ID, err)
			}
			rec.ClaimEpoch = f.Epoch
		}
		if err := w.putCard(nil, rec); err != nil {
			return err
		}
		w.emit(board.Event{
			Type: board.EventCardCreated, Card: nc.ID, Actor: nc.Actor, At: now,
			Data: board.EventData{To: state, Labels: labels},
		})
		out = rec.Card
		return nil
	})
	return out, err
}

// checkCycle walks the blockers' own blockers. A card that does not exist
// yet cannot be anyone's blocker (unknown blockers are refused), so only a
// self-dependency can close a loop today; the walk stays so a future verb
// that edits depends_on cannot slip a cycle past CreateCard unnoticed.
func (s *Store) checkCycle(w *wtx, id string, deps []string) error {
	seen := map[string]bool{}
	stack := slices.Clone(deps)
	for len(stack) > 0 {
		cur := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if cur == id {
			return board.Invalid("card %q: dependency cycle through %q", id, cur)
		}
		if seen[cur] {
			continue
		}
		seen[cur] = true
		c, err := w.getCard(cur)
		if err != nil {
			continue // reported as an unknown blocker by the caller
		}
		stack = append(stack, c.DependsOn...)
	}
	return nil
}

// GetCard reads one card.
func (s *Store) GetCard(ctx context.Context, p board.GetCardParams) (board.Card, error) {
	if err := ctx.Err(); err != nil {
		return board.Card{}, err
	}
	if err := board.ValidateCardID(p.ID); err != nil {
		return board.Card{}, err
	}
	var out board.Card
	err := s.view(func(rd *snap) error {
		r, err := readCard(rd, p.ID)
		if err != nil {
			return err
		}
		out = r.Card
		return nil
	})
	return out, err
}

// readCard reads a whole card: its document merged with its claim record.
func readCard(r *snap, id string) (*cardRecord, error) {
	key := []byte(id)
	v := r.get(bucketCards, key)
	if v == nil {
		return nil, board.NotFound("card", id)
	}
	return decodeCard(v, r.get(bucketClaims, key))
}

// ListCards lists cards in creation order from the narrowest index: the
// recovery index for RecoveryOnly, the claim index for ClaimedOnly, the
// state index for a state, else the creation index. No listing scans the
// cards bucket.
func (s *Store) ListCards(ctx context.Context, f board.ListCardsParams) ([]board.Card, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := board.ValidateLimit(f.Limit); err != nil {
		return nil, err
	}
	if f.State != "" {
		if _, err := s.brd().Require(f.State); err != nil {
			return nil, err
		}
	}
	var out []board.Card
	err := s.view(func(tx *snap) error {
		add := func(id string) (bool, error) {
			r, err := readCard(tx, id)
			if err != nil {
				return false, fmt.Errorf("index names card %q: %w", id, err)
			}
			if f.State != "" && r.State != f.State {
				return true, nil
			}
			// One host writes this file: its claims are all its own,
			// bar a marker that names another (DESIGN.md#boot-sweep).
			if !board.ClaimHostMatches(r.Claim, f.ClaimHosts) {
				return true, nil
			}
			out = append(out, r.Card)
			return f.Limit == 0 || len(out) < f.Limit, nil
		}
		switch {
		case f.RecoveryOnly:
			return tx.scan(bucketIdxRecovery, nil, func(k, _ []byte) (bool, error) {
				return add(idFromOrderKey(k))
			})
		case f.ClaimedOnly, len(f.ClaimHosts) > 0:
			return tx.scan(bucketIdxClaim, nil, func(k, _ []byte) (bool, error) {
				return add(idFromOrderKey(k))
			})
		case f.State != "":
			p := statePrefix(f.State)
			return tx.scan(bucketIdxState, p, func(k, _ []byte) (bool, error) {
				return add(idFromOrderKey(k[len(p):]))
			})
		default:
			return tx.scan(bucketIdxCreated, nil, func(k, _ []byte) (bool, error) {
				return add(idFromOrderKey(k))
			})
		}
	})
	return out, err
}

// CountCards counts the state index's entries: one per card, keyed by its
// state, valued by whether it is claimed. No card is read.
func (s *Store) CountCards(ctx context.Context) (board.CardCounts, error) {
	if err := ctx.Err(); err != nil {
		return board.CardCounts{}, err
	}
	out := board.CardCounts{States: map[string]int{}}
	err := s.view(func(tx *snap) error {
		return tx.scan(bucketIdxState, nil, func(k, v []byte) (bool, error) {
			i := bytes.IndexByte(k, sep)
			if i < 0 {
				return false, fmt.Errorf("boltstore: malformed state index key %q", k)
			}
			out.States[string(k[:i])]++
			if bytes.Equal(v, stateClaimed) {
				out.Claimed++
			}
			return true, nil
		})
	})
	return out, err
}

// Dependents lists the cards that name id as a blocker, in creation order.
func (s *Store) Dependents(ctx context.Context, p board.DependentsParams) ([]board.Card, error) {
	id := p.ID
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := board.ValidateCardID(id); err != nil {
		return nil, err
	}
	var recs []*cardRecord
	err := s.view(func(tx *snap) error {
		if _, err := readCard(tx, id); err != nil {
			return err
		}
		p := depPrefix(id)
		return tx.scan(bucketIdxDeps, p, func(k, _ []byte) (bool, error) {
			r, err := readCard(tx, string(k[len(p):]))
			if err != nil {
				return false, fmt.Errorf("dependency index of %q: %w", id, err)
			}
			recs = append(recs, r)
			return true, nil
		})
	})
	if err != nil {
		return nil, err
	}
	sortByCreation(recs)
	out := make([]board.Card, len(recs))
	for i, r := range recs {
		out[i] = r.Card
	}
	return out, nil
}

func sortByCreation(recs []*cardRecord) {
	slices.SortFunc(recs, func(a, b *cardRecord) int {
		return bytes.Compare(orderKey(a), orderKey(b))
	})
}

// dependents reads the dependents of id inside a write.
func (w *wtx) dependents(id string) ([]*cardRecord, error) {
	var out []*cardRecord
	p := depPrefix(id)
	err := w.scan(bucketIdxDeps, p, func(k, _ []byte) (bool, error) {
		r, err := w.getCard(string(k[len(p):]))
		if err != nil {
			return false, fmt.Errorf("dependency index of %q: %w", id, err)
		}
		out = append(out, r)
		return true, nil
	})
	sortByCreation(out)
	return out, err
}

// move is the one place a card changes state. It clears gave_up (a state
// move supersedes a give-up stamp), emits the state event and, when the
// target is a completion state, promotes the dependents this completes —
// all in the caller's write.
func (s *Store) move(w *wtx, rec *cardRecord, to string, reason board.Reason, actor string) error {
	return s.moveAnd(w, rec, to, reason, actor, nil)
}

// moveAnd is move with edit applied to the card in the same update: the
// retry policy's stamps ride on the move that carries them
// (DESIGN.md#retries).
func (s *Store) moveAnd(w *wtx, rec *cardRecord, to string, reason board.Reason, actor string, edit func()) error {
	ev := board.Event{Type: board.EventState, Reason: reason, Actor: actor, Data: board.EventData{From: rec.State, To: to}}
	err := w.updateCard(rec, s.now(), ev, func() {
		rec.State = to
		rec.StateReason = reason
		rec.GaveUp = nil
		if edit != nil {
			edit()
		}
	})
	if err != nil {
		return err
	}
	if s.brd().Promotes(to, reason) {
		return s.promoteDependents(w, rec.ID, actor)
	}
	return nil
}

// updateCard is the one shape of a card write on this twin: edit changes
// rec, updated_at is stamped with now, the card document, its claim record
// and its index entries are rewritten against what they were, and ev is
// appended with the card and the time filled in — all in w, so the write
// and its event commit together. ev is built by the caller before edit
// runs, so it may describe the card as it was (a release names the claim
// it clears).
func (w *wtx) updateCard(rec *cardRecord, now time.Time, ev board.Event, edit func()) error {
	prev := *rec
	edit()
	rec.UpdatedAt = now
	if err := w.putCard(&prev, rec); err != nil {
		return err
	}
	ev.Card, ev.At = rec.ID, now
	w.emit(ev)
	return nil
}

// promoteDependents moves each dependent waiting on its blockers to the
// first pool state once every blocker is complete, reason unblocked (not a
// machine reason: the cascade of closing a blocker keeps its triggers,
// DESIGN.md#machine-reasons). PromotedBy records the blocker whose completion
// did it, for the record: Reopen does not read it.
func (s *Store) promoteDependents(w *wtx, id, actor string) error {
	deps, err := w.dependents(id)
	if err != nil {
		return err
	}
	pool := s.brd().FirstPool()
	for _, d := range deps {
		if d.State != board.StateWaitingDeps {
			continue
		}
		// Stop at the first blocker that is not complete: the ones after
		// it are not read, so a missing one is not an error here.
		ready := true
		for _, b := range d.DependsOn {
			bc, err := w.getCard(b)
			if err != nil {
				return fmt.Errorf("card %q: blocker %q: %w", d.ID, b, err)
			}
			if !s.brd().IsCompletion(bc.State) {
				ready = false
				break
			}
		}
		if !ready {
			continue
		}
		ev := board.Event{
			Type: board.EventState, Reason: board.ReasonUnblocked, Actor: actor,
			Data: board.EventData{From: board.StateWaitingDeps, To: pool},
		}
		err := w.updateCard(d, s.now(), ev, func() {
			d.State = pool
			d.StateReason = board.ReasonUnblocked
			d.GaveUp = nil
			d.PromotedBy = id
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// SetState is the operator's move. Terminal → working is refused; terminal
// → terminal is an ordinary refiling. Moving to the current state is a
// no-op that writes nothing.
func (s *Store) SetState(ctx context.Context, m board.MoveParams) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if _, err := s.brd().RequireTarget(m.To); err != nil {
		return fmt.Errorf("card %q: %w", m.Card, err)
	}
	return s.write(ctx, func(w *wtx) error {
		rec, err := w.getCard(m.Card)
		if err != nil {
			return err
		}
		// An operator move declares no source: m.From is SetStateFrom's.
		move, err := s.brd().DecideMove(m.Card, rec.State, "", m.To)
		if err != nil || !move {
			return err
		}
		return s.moveAnd(w, rec, m.To, m.Reason, m.Actor, resetAttempts(s.brd(), rec, m.To))
	})
}

// SetStateFrom is the automation move: a CAS on the declared source.
func (s *Store) SetStateFrom(ctx context.Context, m board.MoveParams) (board.MoveResult, error) {
	if err := m.Validate(); err != nil {
		return board.MoveResult{}, err
	}
	if _, err := s.brd().RequireTarget(m.To); err != nil {
		return board.MoveResult{}, fmt.Errorf("card %q: %w", m.Card, err)
	}
	if m.From == "" {
		return board.MoveResult{}, board.Invalid("card %q: SetStateFrom needs a declared source state", m.Card)
	}
	if _, err := s.brd().Require(m.From); err != nil {
		return board.MoveResult{}, fmt.Errorf("card %q: from: %w", m.Card, err)
	}
	var changed bool
	err := s.write(ctx, func(w *wtx) error {
		changed = false
		rec, err := w.getCard(m.Card)
		if err != nil {
			return err
		}
		move, err := s.brd().DecideMove(m.Card, rec.State, m.From, m.To)
		if err != nil || !move {
			return err
		}
		if err := s.move(w, rec, m.To, m.Reason, m.Actor); err != nil {
			return err
		}
		changed = true
		return nil
	})
	return board.MoveResult{Changed: changed}, err
}

// Reopen is the only exit from a terminal state (DESIGN.md#reopen). It is
// refused while any card that names this one as a blocker is outside
// waiting_deps (board.Board.ReopenBlockedBy); the check and the move are
// one transaction.
func (s *Store) Reopen(ctx context.Context, m board.MoveParams) error {
	if err := m.Validate(); err != nil {
		return err
	}
	target, err := s.brd().RequireTarget(m.To)
	if err != nil {
		return fmt.Errorf("card %q: %w", m.Card, err)
	}
	if err := board.ReopenInto(m.Card, target); err != nil {
		return err
	}
	if m.From != "" {
		if _, err := s.brd().Require(m.From); err != nil {
			return fmt.Errorf("card %q: from: %w", m.Card, err)
		}
	}
	return s.write(ctx, func(w *wtx) error {
		rec, err := w.getCard(m.Card)
		if err != nil {
			return err
		}
		if err := s.brd().CheckReopen(m.Card, rec.State, m.From); err != nil {
			return err
		}
		deps, err := w.dependents(m.Card)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := s.brd().ReopenBlockedBy(m.Card, d.Card); err != nil {
				return err
			}
		}
		// A reopened card starts a fresh set of attempts (DESIGN.md#retries).
		return s.moveAnd(w, rec, m.To, m.Reason, m.Actor, func() { rec.Attempts, rec.RetryAt = 0, time.Time{} })
	})
}

// AdjustLabels applies a relative label change in one step; a no-op writes
// nothing (DESIGN.md#label-sweeps: the incremental path that cannot re-arm anything).
func (s *Store) AdjustLabels(ctx context.Context, c board.AdjustLabelsParams) (board.Card, error) {
	if err := c.Validate(); err != nil {
		return board.Card{}, err
	}
	var out board.Card
	err := s.write(ctx, func(w *wtx) error {
		rec, err := w.getCard(c.Card)
		if err != nil {
			return err
		}
		next, changed, err := board.ApplyLabelChange(rec.Labels, c.Add, c.Remove)
		if err != nil {
			return fmt.Errorf("card %q: %w", c.Card, err)
		}
		if !changed {
			out = rec.Card
			return nil
		}
		return s.writeLabels(w, rec, next, board.ReasonNone, c.Actor, &out)
	})
	return out, err
}

// SetLabels replaces the label set. It is absolute by contract: a caller
// that states a consumed one-shot label re-arms it (DESIGN.md#label-sweeps).
func (s *Store) SetLabels(ctx context.Context, p board.SetLabelsParams) (board.Card, error) {
	next, err := board.NormalizeSetLabels(p.Card, p.Labels, p.Actor)
	if err != nil {
		return board.Card{}, err
	}
	var out board.Card
	err = s.write(ctx, func(w *wtx) error {
		rec, err := w.getCard(p.Card)
		if err != nil {
			return err
		}
		if slices.Equal(rec.Labels, next) {
			out = rec.Card
			return nil
		}
		return s.writeLabels(w, rec, slices.Clone(next), board.ReasonNone, p.Actor, &out)
	})
	return out, err
}

func (s *Store) writeLabels(w *wtx, rec *cardRecord, next []string, reason board.Reason, actor string, out *board.Card) error {
	added, removed := board.LabelDiff(rec.Labels, next)
	ev := board.Event{
		Type: board.EventLabels, Reason: reason, Actor: actor,
		Data: board.EventData{Labels: next, Added: added, Removed: removed},
	}
	if err := w.updateCard(rec, s.now(), ev, func() { rec.Labels = next }); err != nil {
		return err
	}
	*out = rec.Card
	return nil
}

// resetAttempts is the edit of a person's move of rec into state to: into
// a pool state it gives the card a fresh set of attempts and ends its
// backoff (DESIGN.md#retries); nil otherwise.
func resetAttempts(b board.Board, rec *cardRecord, to string) func() {
	if !b.IsPool(to) {
		return nil
	}
	return func() { rec.Attempts, rec.RetryAt = 0, time.Time{} }
}
