package watchdog

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasekeeper/leasekeeper/board"
)

// Acting: the filing, the give-up and the release a decision asks for,
// each fenced on the recovery token (DESIGN.md#filing, DESIGN.md#never-stranded).

// act carries out cr.Decision with the recovery token. A failed filing
// keeps the recovery claim, so a later pass — which lists it once its
// lease ends — retries; a successful one releases it. No path here leaves
// the card free in a column nothing picks up (Strands): what would be a
// bare release there files the card back to the first pool state.
func (p *pass) act(ctx context.Context, cr *CardResult, c board.Card, tok board.ClaimToken, runID string) {
	r := p.r
	d := cr.Decision
	switch d.Action {
	case ActionKeep:
		// The hold: leave the lease as the transfer set it, so a pass after
		// it ends lists the card again and judges it under the spent-hold
		// rule (AfterTransfer).
		cr.Outcome = OutcomeTransferred
		return
	case ActionRelease:
		// The claimant stopped before launching (row 4) or a spent hold:
		// the card is simply eligible again — in the pool, where the
		// column it sits in is not one.
		if Strands(p.board, c.State) && !p.file(ctx, cr, c, tok, p.board.FirstPool(), board.ReasonWatchdog) {
			return
		}
	case ActionComplete, ActionFail, ActionGiveUp:
		if !p.file(ctx, cr, c, tok, d.Target, d.StateReason) {
			return
		}
		// The stamp goes on after the move (a state move clears gave_up),
		// and only on a card that sits in the filing's column: a card an
		// operator moved elsewhere, or one already in another sink, keeps
		// its own story. A give-up always leaves one (row 2's names the
		// gone run); a failure leaves one when the retry policy's attempts
		// are spent (DESIGN.md#retries).
		var stamp *board.GaveUp
		if d.Stamp != (board.GaveUp{}) {
			stamp = &d.Stamp
		} else if d.Action == ActionGiveUp {
			stamp = GiveUpStamp(c, runID, p.now)
		}
		if stamp != nil && (cr.FiledTo == d.Target || c.State == d.Target) {
			if err := r.cfg.Store.SetGaveUpOwned(ctx, board.SetGaveUpOwnedParams{Card: c.ID, Token: tok, GaveUp: stamp}); err != nil {
				cr.Outcome, cr.Err = OutcomeError, fmt.Errorf("stamp gave_up: %w", err)
				return
			}
		}
	case ActionRepark:
		// DESIGN.md#twin-repark: the twins diverge on purpose. Locally a
		// resumable run's repark is a release only — in_progress is a pool
		// state there and the local re-claim resumes the run the card
		// records, so returning it costs no attempt. On the fleet the
		// launcher cannot resume a recorded run, so the card goes back to
		// the first pool state (a fresh run, an attempt: the table files it
		// to the ceiling state instead once they are spent). A local board
		// whose running column is not a pool state is reparked like the
		// fleet, or the release would strand the card there. A retry
		// (DESIGN.md#retries) is a fresh attempt on either twin: the card
		// goes to the first pool state with its backoff stamped.
		if d.Retry || r.cfg.Fleet || Strands(p.board, c.State) {
			if !p.fileMove(ctx, cr, c, tok, p.board.FirstPool(), d.StateReason, d.Retry) {
				if !d.Retry || !errors.Is(cr.Err, board.ErrInvalidArgument) {
					return
				}
				// A store that cannot carry a retry's move (a plugin from
				// before the retry policy: the agent's guard refuses it,
				// nothing sent) would refuse it on every pass, the card
				// stranded under the recovery claim (DESIGN.md#never-stranded).
				// The failure is filed as it was before the policy: failed,
				// the run's own verdict, where a person reaches it.
				r.cfg.Logger.Warn("watchdog: the store cannot carry a retry; filing the failure as it was before the retry policy",
					"card", c.ID, "err", cr.Err)
				cr.Outcome, cr.Err = "", nil
				cr.Decision.Action, cr.Decision.Rule, cr.Decision.Retry = ActionFail, RuleRunFailed, false
				cr.Decision.Target, cr.Decision.StateReason = board.StateFailed, board.ReasonRunFailed
				cr.Decision.Reason += "; the store cannot carry a retry (a plugin from before the retry policy): filed failed as before it"
				if !p.file(ctx, cr, c, tok, board.StateFailed, board.ReasonRunFailed) {
					return
				}
			}
		}
	default:
		cr.Outcome, cr.Err = OutcomeError, fmt.Errorf("unknown action %q", d.Action)
		return
	}
	p.release(ctx, cr, c, tok)
}

// file moves c to target under the recovery token, unless NeedsFiling says
// there is nothing to write. It reports whether the pass should go on to
// release; on an error it records it and the recovery claim is kept.
func (p *pass) file(ctx context.Context, cr *CardResult, c board.Card, tok board.ClaimToken, target string, reason board.Reason) bool {
	return p.fileMove(ctx, cr, c, tok, target, reason, false)
}

// fileMove is file, the move a retry when retry is set: the store stamps
// the card's backoff with it (DESIGN.md#retries).
func (p *pass) fileMove(ctx context.Context, cr *CardResult, c board.Card, tok board.ClaimToken, target string, reason board.Reason, retry bool) bool {
	r, b := p.r, p.board
	if !NeedsFiling(b, c, target) {
		if retry && target == c.State && !b.IsTerminal(c.State) {
			// A retry of a card run where it sat (in the first pool
			// state) moves nothing but backs off all the same: the store
			// stamps the backoff alone (DESIGN.md#retries).
			if _, err := r.cfg.Store.SetStateOwned(ctx, board.SetStateOwnedParams{
				Card: c.ID, Token: tok, To: target, From: c.State, Reason: reason, Retry: true,
			}); err != nil {
				cr.Outcome, cr.Err = OutcomeError, fmt.Errorf("stamp the retry's backoff in %s: %w", target, err)
				return false
			}
		}
		return true
	}
	// DESIGN.md#verdict-provenance: a launch-column target never carries a reason
	// that fires. Blank, the store stamps watchdog for a recovery marker;
	// a machine reason (a retry's) fires nothing and is kept.
	if b.IsLaunch(target) && !board.IsMachineReason(reason) {
		reason = board.ReasonNone
	}
	changed, err := r.cfg.Store.SetStateOwned(ctx, board.SetStateOwnedParams{
		Card: c.ID, Token: tok, To: target, From: c.State, Reason: reason, Retry: retry,
	})
	if err != nil {
		cr.Outcome, cr.Err = OutcomeError, fmt.Errorf("file %s → %s: %w", c.State, target, err)
		return false
	}
	if !changed.Changed {
		// The card left the state the transfer observed: an operator moved
		// it after the transfer. Their move wins and the claim is released
		// — unless the card now sits where a free card is stranded: then
		// the recovery claim stays, and the card is judged again, in its
		// new column, once that claim's lease ends.
		cur, err := r.cfg.Store.GetCard(ctx, board.GetCardParams{ID: c.ID})
		if err != nil || Strands(b, cur.State) {
			cr.Outcome = OutcomeTransferred
			cr.Decision.Reason += fmt.Sprintf("; the card was moved during the filing (to %q): held under the recovery claim rather than left free there", cur.State)
			cr.Err = err
			return false
		}
		r.cfg.Logger.Info("watchdog: card moved during filing, honouring the move",
			"card", c.ID, "observed", c.State, "now", cur.State, "target", target)
		return true
	}
	cr.FiledTo = target
	r.cfg.Logger.Info("watchdog: card filed", "card", c.ID, "from", c.State, "to", target,
		"reason", reason, "rule", cr.Decision.Rule)
	return true
}

// release drops the recovery claim. The outcome is filed when a filing
// preceded it, released otherwise.
func (p *pass) release(ctx context.Context, cr *CardResult, c board.Card, tok board.ClaimToken) {
	if err := p.r.cfg.Store.ReleaseOwned(ctx, board.OwnedParams{Card: c.ID, Token: tok}); err != nil {
		cr.Outcome, cr.Err = OutcomeError, fmt.Errorf("release: %w", err)
		return
	}
	if cr.FiledTo != "" {
		cr.Outcome = OutcomeFiled
	} else {
		cr.Outcome = OutcomeReleased
	}
}
