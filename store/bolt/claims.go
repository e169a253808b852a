package boltstore

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// holds reports whether tok is the card's current claim, exactly.
func holds(r *cardRecord, tok board.ClaimToken) bool {
	return r.Claim == tok.Marker && r.ClaimEpoch == tok.Epoch
}

func conflict(r *cardRecord) error { return board.Conflict(r.ID, r.Claim, r.ClaimEpoch) }

// acquire grants a free card to marker. The epoch is the stored epoch plus
// one: on this twin the fence is a plain counter, because nobody else
// writes the file and so nothing can drop the field (DESIGN.md#twin-epoch; the
// MongoDB twin floors it at the server clock instead).
func (s *Store) acquire(w *wtx, rec *cardRecord, marker string, lease time.Duration, actor string) (board.ClaimToken, error) {
	now := s.now()
	epoch := rec.ClaimEpoch + 1
	ev := board.Event{Type: board.EventClaimed, Actor: actor, Data: board.EventData{Marker: marker, Epoch: epoch}}
	err := w.updateCard(rec, now, ev, func() {
		rec.Claim = marker
		rec.ClaimEpoch = epoch
		rec.ClaimedAt = now
		rec.ClaimLeaseUntil = now.Add(lease)
	})
	if err != nil {
		return board.ClaimToken{}, err
	}
	return rec.Token(), nil
}

// Claim acquires a free card or refreshes the same marker's lease.
func (s *Store) Claim(ctx context.Context, r board.ClaimParams) (board.Card, error) {
	if err := r.Validate(); err != nil {
		return board.Card{}, err
	}
	var card board.Card
	err := s.write(ctx, func(w *wtx) error {
		rec, err := w.getCard(r.Card)
		if err != nil {
			return err
		}
		switch rec.Claim {
		case "":
			// A card waiting on its blockers is not taken by naming it
			// (DESIGN.md#lifecycle-refusals).
			if err := s.brd().ClaimBlocked(rec.Card, w.blocker); err != nil {
				return err
			}
			// A card backing off is not taken by naming it either
			// (DESIGN.md#retries).
			if err := board.RetryRefusal(rec.Card, s.now()); err != nil {
				return err
			}
			_, err = s.acquire(w, rec, r.Marker, r.Lease, r.Marker)
		case r.Marker:
			// Idempotent re-claim: refresh the lease only. Same epoch, no
			// event, no updated_at bump (DESIGN.md#epoch: the epoch is bumped on
			// fresh acquisitions, never on a same-marker re-claim).
			err = s.extendLease(w, rec, s.now().Add(r.Lease))
		default:
			return conflict(rec)
		}
		card = rec.Card
		return err
	})
	if err != nil {
		return board.Card{}, err
	}
	return card, nil
}

// blocker reads a card in the write, for board.Board.ClaimBlocked to word
// its refusal with.
func (w *wtx) blocker(id string) (board.Card, error) {
	rec, err := w.getCard(id)
	if err != nil {
		return board.Card{}, err
	}
	return rec.Card, nil
}

// extendLease pushes the lease to until, never backwards. No event. Only
// the claim record and the lease index change: the card document is not
// rewritten.
func (s *Store) extendLease(w *wtx, rec *cardRecord, until time.Time) error {
	if !until.After(rec.ClaimLeaseUntil) {
		return nil
	}
	if _, err := w.setLease(rec.ID, appendClaim(nil, familyOf(&rec.Card)), until, nil); err != nil {
		return err
	}
	rec.ClaimLeaseUntil = until
	return nil
}

// ClaimNext claims the oldest unclaimed card in any pool state. Each pool
// state's index is walked in creation order to its first free card (the
// index value says free or claimed, so claimed cards are skipped without
// being read), and the oldest of those candidates wins.
func (s *Store) ClaimNext(ctx context.Context, r board.ClaimNextParams) (board.Card, error) {
	if err := r.Validate(); err != nil {
		return board.Card{}, err
	}
	var card board.Card
	err := s.write(ctx, func(w *wtx) error {
		rec, err := s.pickNext(w, r.Labels, nil)
		if err != nil {
			return err
		}
		_, err = s.acquire(w, rec, r.Marker, r.Lease, r.Marker)
		card = rec.Card
		return err
	})
	if err != nil {
		return board.Card{}, err
	}
	return card, nil
}

// pickNext reads the oldest unclaimed card in a pool state carrying every
// one of labels, in a write that has not changed the indexes yet. A free
// card skip reports true for is passed over (nil: none is).
//
// With no labels it walks each pool state's part of idx_state; with labels,
// the same part of the first label's queue in idx_label, so the cards
// without it are never read (DESIGN.md#label-routing). Further labels are
// checked on the cards that queue offers through their own queues' entries
// (same state, same order), so a card without one is passed over
// undecoded: the walk is inside the write, which every other write waits
// for.
func (s *Store) pickNext(w *wtx, labels []string, skip func(*cardRecord) (bool, error)) (*cardRecord, error) {
	var (
		best    []byte
		bestRec *cardRecord
		rest    []string
		key     []byte // scratch for the further labels' keys
		now     = s.now()
	)
	if len(labels) > 1 {
		rest = labels[1:]
	}
	for _, state := range s.brd().PoolStates() {
		bucket, p, sp := bucketIdxState, statePrefix(state), statePrefix(state)
		if len(labels) > 0 {
			bucket, p = bucketIdxLabel, labelStatePrefix(labels[0], state)
		}
		err := w.scan(bucket, p, func(k, v []byte) (bool, error) {
			if bytes.Equal(v, stateClaimed) {
				return true, nil
			}
			order := k[len(p):]
			if best != nil && bytes.Compare(order, best) >= 0 {
				return false, nil // this state's index is in creation order
			}
			for _, l := range rest {
				key = append(append(append(append(key[:0], l...), sep), sp...), order...)
				if w.get(bucketIdxLabel, key) == nil {
					return true, nil
				}
			}
			// The candidate is read: a card backing off after a retryable
			// failure is passed over until its retry_at (DESIGN.md#retries).
			rec, err := w.getCard(idFromOrderKey(order))
			if err != nil {
				return false, err
			}
			if rec.BackingOff(now) {
				return true, nil
			}
			if skip != nil {
				if skipped, err := skip(rec); err != nil || skipped {
					return err == nil, err
				}
			}
			best, bestRec = bytes.Clone(order), rec
			return false, nil
		})
		if err != nil {
			return nil, err
		}
	}
	if best == nil {
		if len(labels) > 0 {
			return nil, fmt.Errorf("no unclaimed card in a pool state carries the labels %q: %w", labels, board.ErrNotFound)
		}
		return nil, fmt.Errorf("no unclaimed card in a pool state: %w", board.ErrNotFound)
	}
	if bestRec != nil {
		return bestRec, nil
	}
	return w.getCard(idFromOrderKey(best))
}

// RenewClaims pushes each hold's lease to now+lease, never backwards, in one
// write for the whole batch. A renewal emits no event and leaves updated_at
// alone: a heartbeat is not a change to the card.
//
// This is the heartbeat's hot path (one call per tick renews every claim
// the agent holds), so it works on the claim records alone: per hold it
// reads one fixed-layout record, compares the token in place and writes
// the record back with the new lease, plus the lease index entry. No card
// document is decoded or encoded; a card document is read only to tell a
// missing card from a never-claimed one when a hold is refused.
func (s *Store) RenewClaims(ctx context.Context, p board.RenewClaimsParams) ([]board.RenewResult, error) {
	if err := board.ValidateLease("", p.Lease); err != nil {
		return nil, err
	}
	if len(p.Holds) == 0 {
		return []board.RenewResult{}, ctx.Err()
	}
	var out []board.RenewResult
	err := s.write(ctx, func(w *wtx) error {
		out = make([]board.RenewResult, len(p.Holds))
		until := s.now().Add(p.Lease)
		// One buffer holds every new record of the batch; it only grows
		// when a record is longer than the estimate (a long marker).
		buf := make([]byte, 0, len(p.Holds)*(claimHeaderLen+32))
		w.reserve(bucketClaims, len(p.Holds))
		w.reserve(bucketIdxLease, 2*len(p.Holds))
		for i, h := range p.Holds {
			out[i].Card = h.Card
			if err := board.ValidateToken(h.Card, h.Token); err != nil {
				out[i].Err = err
				continue
			}
			key := []byte(h.Card)
			rec := w.get(bucketClaims, key)
			if rec == nil {
				// Never claimed: epoch 0, nobody holds it.
				if w.get(bucketCards, key) == nil {
					out[i].Err = board.NotFound("card", h.Card)
				} else {
					out[i].Err = board.Conflict(h.Card, "", 0)
				}
				continue
			}
			if err := checkClaim(rec); err != nil {
				return fmt.Errorf("card %q: %w", h.Card, err)
			}
			if string(claimMarker(rec)) != h.Token.Marker || claimEpoch(rec) != h.Token.Epoch {
				out[i].Err = board.Conflict(h.Card, string(claimMarker(rec)), claimEpoch(rec))
				continue
			}
			cur, err := getTime(rec[claimOffLease:])
			if err != nil {
				return fmt.Errorf("card %q: %w", h.Card, err)
			}
			if !until.After(cur) {
				out[i].LeaseUntil = cur
				continue
			}
			if buf, err = w.setLease(h.Card, rec, until, buf); err != nil {
				return err
			}
			out[i].LeaseUntil = until
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// owned runs fn on the card only when tok is its current claim. A stale
// token is refused even when fn would change nothing (DESIGN.md#fence).
func (s *Store) owned(ctx context.Context, card string, tok board.ClaimToken, fn func(w *wtx, rec *cardRecord) error) error {
	if err := board.ValidateToken(card, tok); err != nil {
		return err
	}
	return s.write(ctx, func(w *wtx) error {
		rec, err := w.getCard(card)
		if err != nil {
			return err
		}
		if !holds(rec, tok) {
			return conflict(rec)
		}
		return fn(w, rec)
	})
}

// SetStateOwned is the holder's fenced move.
func (s *Store) SetStateOwned(ctx context.Context, m board.SetStateOwnedParams) (board.MoveResult, error) {
	if err := m.Validate(); err != nil {
		return board.MoveResult{}, err
	}
	if _, err := s.brd().RequireTarget(m.To); err != nil {
		return board.MoveResult{}, fmt.Errorf("card %q: %w", m.Card, err)
	}
	if m.From != "" {
		if _, err := s.brd().Require(m.From); err != nil {
			return board.MoveResult{}, fmt.Errorf("card %q: from: %w", m.Card, err)
		}
	}
	var changed bool
	err := s.owned(ctx, m.Card, m.Token, func(w *wtx, rec *cardRecord) error {
		changed = false
		move, err := s.brd().DecideMove(m.Card, rec.State, m.From, m.To)
		if err != nil {
			return err
		}
		if !move {
			if m.Retry && rec.State == m.To && (m.From == "" || m.From == rec.State) {
				// A retry filed where the card already is (it was run
				// in the pool) backs off all the same: the stamp alone,
				// no state event, no move reported (DESIGN.md#retries).
				prev := *rec
				rec.RetryAt = s.now().Add(s.brd().RetryFor(rec.Card).Delay(max(rec.Attempts, 1)))
				return w.putCard(&prev, rec)
			}
			return nil
		}
		var edit func()
		if m.Retry {
			// DESIGN.md#retries: the backoff is stamped by this store's clock.
			until := s.now().Add(s.brd().RetryFor(rec.Card).Delay(max(rec.Attempts, 1)))
			edit = func() { rec.RetryAt = until }
		}
		if err := s.moveAnd(w, rec, m.To, m.StampedReason(), m.Token.Marker, edit); err != nil {
			return err
		}
		changed = true
		return nil
	})
	return board.MoveResult{Changed: changed}, err
}

// SetLastRunOwned records the card's current run and appends it to the
// run pointers (append-only).
func (s *Store) SetLastRunOwned(ctx context.Context, p board.SetLastRunOwnedParams) error {
	if err := board.ValidateName("run id", p.RunID); err != nil {
		return fmt.Errorf("card %q: %w", p.Card, err)
	}
	return s.owned(ctx, p.Card, p.Token, func(w *wtx, rec *cardRecord) error {
		if run, err := w.getRun(p.RunID); err != nil {
			return err
		} else if run != nil {
			if err := board.PointFence(p.Card, *run, p.Token); err != nil {
				return err
			}
		}
		// The same pointer stamped again under a new claim (a run that
		// has its verdict) is a change: the pointer now belongs to this
		// claim.
		return s.pointAt(w, rec, p.RunID, p.Token, s.now())
	})
}

// SetAwaitingInputOwned sets or clears the awaiting-input flag.
func (s *Store) SetAwaitingInputOwned(ctx context.Context, p board.SetAwaitingInputOwnedParams) error {
	return s.owned(ctx, p.Card, p.Token, func(w *wtx, rec *cardRecord) error {
		if rec.AwaitingInput == p.Awaiting {
			return nil
		}
		ev := board.Event{Type: board.EventAwaitingInput, Actor: p.Token.Marker, Data: board.EventData{Value: p.Awaiting}}
		return w.updateCard(rec, s.now(), ev, func() { rec.AwaitingInput = p.Awaiting })
	})
}

// SetGaveUpOwned stamps (or, with nil, clears) the give-up record.
func (s *Store) SetGaveUpOwned(ctx context.Context, p board.SetGaveUpOwnedParams) error {
	if p.GaveUp != nil {
		if err := board.ValidateGaveUp(p.Card, *p.GaveUp); err != nil {
			return err
		}
		if p.GaveUp.State != "" {
			if _, err := s.brd().Require(p.GaveUp.State); err != nil {
				return fmt.Errorf("card %q: give-up state: %w", p.Card, err)
			}
		}
	}
	return s.owned(ctx, p.Card, p.Token, func(w *wtx, rec *cardRecord) error {
		if p.GaveUp == nil && rec.GaveUp == nil {
			return nil
		}
		now := s.now()
		var stamp *board.GaveUp
		ev := board.Event{Type: board.EventGaveUp, Actor: p.Token.Marker}
		if p.GaveUp != nil {
			st := *p.GaveUp
			if st.At.IsZero() {
				st.At = now
			}
			stamp = &st
			ev.Data = board.EventData{RunID: st.RunID, To: st.State, Value: true}
		}
		return w.updateCard(rec, now, ev, func() { rec.GaveUp = stamp })
	})
}

// ExpireClaimOwned ends the lease now so the watchdog may rule on the card
// without waiting out the TTL. It never extends a lease that already ended.
// Like a renewal, it is a lease change, not a card change: no event.
func (s *Store) ExpireClaimOwned(ctx context.Context, p board.OwnedParams) error {
	return s.owned(ctx, p.Card, p.Token, func(w *wtx, rec *cardRecord) error {
		now := s.now()
		if !rec.ClaimLeaseUntil.IsZero() && !rec.ClaimLeaseUntil.After(now) {
			return nil
		}
		_, err := w.setLease(rec.ID, appendClaim(nil, familyOf(&rec.Card)), now, nil)
		return err
	})
}

// DisownClaimOwned marks the claim one its agent gave up on
// (board.Card.Disowned) and leaves the claim and its lease as they are. Like
// a renewal it is not a card change: no event, and updated_at stays.
func (s *Store) DisownClaimOwned(ctx context.Context, p board.OwnedParams) error {
	return s.owned(ctx, p.Card, p.Token, func(w *wtx, rec *cardRecord) error {
		if rec.DisownedEpoch == rec.ClaimEpoch {
			return nil
		}
		prev := *rec
		rec.DisownedEpoch = rec.ClaimEpoch
		return w.putCard(&prev, rec)
	})
}

// release clears the claim and keeps the epoch: the fence only goes up, so
// the next acquisition continues from it (DESIGN.md#epoch-monotone).
func (s *Store) release(w *wtx, rec *cardRecord, actor string) error {
	ev := board.Event{Type: board.EventReleased, Actor: actor, Data: board.EventData{Marker: rec.Claim, Epoch: rec.ClaimEpoch}}
	return w.updateCard(rec, s.now(), ev, func() {
		rec.Claim = ""
		rec.ClaimedAt = time.Time{}
		rec.ClaimLeaseUntil = time.Time{}
		rec.RecoveredEpoch = 0
	})
}

// ReleaseOwned is the holder's release. A free card is nil.
func (s *Store) ReleaseOwned(ctx context.Context, p board.OwnedParams) error {
	if err := board.ValidateToken(p.Card, p.Token); err != nil {
		return err
	}
	return s.write(ctx, func(w *wtx) error {
		rec, err := w.getCard(p.Card)
		if err != nil {
			return err
		}
		if !rec.Claimed() {
			return nil
		}
		if !holds(rec, p.Token) {
			return conflict(rec)
		}
		return s.handBack(w, rec, p.Token.Marker)
	})
}

// handBack is the release of Release and ReleaseOwned, in the caller's
// write: the released claim's own open run closed (board.ReleasedRun), the
// card filed out of a column that would strand it (board.ReleaseFiling),
// the claim cleared.
func (s *Store) handBack(w *wtx, rec *cardRecord, actor string) error {
	if err := s.closeReleasedRun(w, rec, actor); err != nil {
		return err
	}
	if to := s.brd().ReleaseFiling(rec.State); to != "" {
		if err := s.move(w, rec, to, board.ReasonNone, actor); err != nil {
			return err
		}
	}
	return s.release(w, rec, actor)
}

// ReleaseExpired releases a claim that is still exactly r.Prev and still
// expired at r.Cutoff, in one write. Every claim on this twin carries a
// lease, so "expired" is the lease arm alone.
func (s *Store) ReleaseExpired(ctx context.Context, r board.ReleaseExpiredParams) error {
	if err := r.Validate(); err != nil {
		return err
	}
	return s.write(ctx, func(w *wtx) error {
		rec, err := w.getCard(r.Card)
		if err != nil {
			return err
		}
		if !holds(rec, r.Prev) || rec.ClaimLeaseUntil.After(r.Cutoff) {
			return conflict(rec)
		}
		if r.State != "" && rec.State != r.State {
			return board.MovedSince(r.Card, r.State, rec.State)
		}
		return s.release(w, rec, r.Actor)
	})
}

// Now is the store's clock: the injected clock every stamp of this file is
// taken from.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	return s.now(), ctx.Err()
}

// Release clears a claim held by exactly marker, whatever its epoch: the
// operator's force-release and the legacy / recovery sweeps.
func (s *Store) Release(ctx context.Context, p board.ReleaseParams) error {
	if err := board.ValidateCardID(p.Card); err != nil {
		return err
	}
	if err := board.ValidateMarker(p.Marker); err != nil {
		return fmt.Errorf("card %q: %w", p.Card, err)
	}
	if err := board.ValidateText("actor", p.Actor); err != nil {
		return fmt.Errorf("card %q: %w", p.Card, err)
	}
	return s.write(ctx, func(w *wtx) error {
		rec, err := w.getCard(p.Card)
		if err != nil {
			return err
		}
		if !rec.Claimed() {
			return nil
		}
		if rec.Claim != p.Marker {
			return conflict(rec)
		}
		return s.handBack(w, rec, p.Actor)
	})
}

// closeReleasedRun closes the released claim's own open run, the card's
// recorded run, as resumable (board.ReleasedRun), in the caller's write.
func (s *Store) closeReleasedRun(w *wtx, rec *cardRecord, actor string) error {
	if rec.LastRunID == "" {
		return nil
	}
	run, err := w.getRun(rec.LastRunID)
	if err != nil || run == nil {
		return err
	}
	next, ok := board.ReleasedRun(rec.Card, *run, s.now())
	if !ok {
		return nil
	}
	return w.putRun(next, false, actor)
}

// ListExpiredClaimCandidates walks the lease index from the oldest lease,
// or from just after the position q.After names, and stops at the first
// lease after the cutoff or at the limit, so the batch cap is applied in
// the query (DESIGN.md#paging). Legacy claims are not in the index. The position
// is the lease index key of the page's last card, hex-encoded; Next is
// empty when the walk reached the cutoff or the end of the index.
func (s *Store) ListExpiredClaimCandidates(ctx context.Context, q board.ListExpiredClaimCandidatesParams) (board.ListExpiredClaimCandidatesResult, error) {
	if err := ctx.Err(); err != nil {
		return board.ListExpiredClaimCandidatesResult{}, err
	}
	if err := q.Validate(); err != nil {
		return board.ListExpiredClaimCandidatesResult{}, err
	}
	after, err := hex.DecodeString(q.After)
	if err != nil || (len(after) > 0 && len(after) <= 8) {
		return board.ListExpiredClaimCandidatesResult{}, board.Invalid("listing position %q was not issued by this store", q.After)
	}
	end := timeKey(q.Cutoff)
	var (
		page board.ListExpiredClaimCandidatesResult
		last []byte
	)
	err = s.view(func(tx *snap) error {
		return tx.iterate(bucketIdxLease, after, func(k, _ []byte) (bool, error) {
			if len(after) > 0 && bytes.Equal(k, after) {
				return true, nil
			}
			if bytes.Compare(k[:8], end) > 0 {
				return false, nil
			}
			if q.Limit > 0 && len(page.Cards) == q.Limit {
				page.Next = hex.EncodeToString(last)
				return false, nil
			}
			r, err := readCard(tx, string(k[8:]))
			if err != nil {
				return false, fmt.Errorf("lease index: %w", err)
			}
			page.Cards = append(page.Cards, r.Card)
			last = bytes.Clone(k)
			return true, nil
		})
	})
	if err != nil {
		return board.ListExpiredClaimCandidatesResult{}, err
	}
	return page, nil
}

// ListUnleasedRunningClaims returns nothing on this twin, and that is
// deliberate: do not "fix" it. An un-leased claim exists only where a
// foreign writer can strip the lease from a card (an old binary's whole
// document replace on the MongoDB twin). This file is written only by its
// own agent, which always stamps a lease, and the boot sweep already probes
// the pid behind every same-host legacy claim (DESIGN.md#twin-unleased).
func (s *Store) ListUnleasedRunningClaims(ctx context.Context, p board.ListUnleasedRunningClaimsParams) ([]board.Card, error) {
	if err := board.ValidateLimit(p.Limit); err != nil {
		return nil, err
	}
	return nil, ctx.Err()
}

// ReclaimExpired transfers an expired claim to a recovery marker in ONE
// CAS: the claim must still be exactly Prev (marker and epoch) and its lease
// set and ended at or before Cutoff. A renewal, an operator or another
// reaper in between makes it a clean conflict (DESIGN.md#transfer-first).
func (s *Store) ReclaimExpired(ctx context.Context, r board.ReclaimExpiredParams) (board.Card, error) {
	if err := board.ValidateToken(r.Card, r.Prev); err != nil {
		return board.Card{}, err
	}
	if err := r.ValidateRecovery(); err != nil {
		return board.Card{}, err
	}
	if r.Cutoff.IsZero() {
		return board.Card{}, board.Invalid("card %q: zero cutoff", r.Card)
	}
	var card board.Card
	err := s.write(ctx, func(w *wtx) error {
		rec, err := w.getCard(r.Card)
		if err != nil {
			return err
		}
		if !holds(rec, r.Prev) || rec.ClaimLeaseUntil.IsZero() || rec.ClaimLeaseUntil.After(r.Cutoff) {
			return conflict(rec)
		}
		// The judged claim survives the transfer: a recovery claim taken
		// over from another one keeps the worker epoch it already names.
		if !board.IsRecoveryMarker(rec.Claim) {
			rec.RecoveredEpoch = rec.ClaimEpoch
		}
		_, err = s.acquire(w, rec, r.RecoveryMarker, r.Lease, r.RecoveryMarker)
		card = rec.Card
		return err
	})
	if err != nil {
		return board.Card{}, err
	}
	return card, nil
}

// Traits: one host's embedded file, written by this agent alone, on this
// host's clock, its events in the same transaction as their write.
func (s *Store) Traits() board.Traits { return board.Traits{} }
