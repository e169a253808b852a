package watchdog

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasekeeper/leasekeeper/board"
)

// The repair sweeps the gate does not stop: abandoned recovery claims and
// the fleet's un-leased claims (DESIGN.md#sweeps).

// sweepRecovery is the gate-off repair of abandoned recovery claims
// (DESIGN.md#recovery-sweep). A recovery claim is abandoned when its lease has ended
// (or was stripped by a foreign write): nobody renews a recovery claim, so
// its holder — a reaper that died or was switched off — is done with it.
// Releasing it is a pure return to the card's pre-watchdog state:
// release-only, in one CAS on the whole precondition (this marker, this
// epoch, still expired), so an owner that re-took the card to retry a
// filing keeps it. Where that release would leave the card free in a
// column nothing picks up (Strands), the sweep is the only reconciler
// there is: it carries out a settled disposition of the claim's run or
// keeps the card (modeRepair). With the gate on this sweep does not run:
// recovery claims are decided like any expired claim.
//
// The population is every recovery claim, from an index by marker
// (RecoveryOnly), so the sweep reads O(recovery claims) whatever else the
// store holds and also finds the ones a foreign write stripped of their
// lease on the fleet.
func (p *pass) sweepRecovery(ctx context.Context) ([]SweepResult, error) {
	// ClaimedOnly is implied by RecoveryOnly; it is named as well so that
	// a plugin built before RecoveryOnly existed, which drops the field,
	// still lists claimed cards only instead of the whole board.
	cands, err := p.r.cfg.Store.ListCards(ctx, board.ListCardsParams{ClaimedOnly: true, RecoveryOnly: true})
	if err != nil {
		return nil, fmt.Errorf("recovery sweep: list recovery claims: %w", err)
	}
	var abandoned []board.Card
	for _, c := range cands {
		// The marker check stays although the store selected by it: a
		// store that lists more than it was asked (that older plugin)
		// must not make the sweep release a worker's claim.
		if !board.IsRecoveryMarker(c.Claim) || (!c.LeaseExpired(p.now) && !c.ClaimLeaseUntil.IsZero()) {
			continue
		}
		abandoned = append(abandoned, c)
	}
	out := make([]SweepResult, len(abandoned))
	// Cards are independent: side by side, their writes share commits.
	p.r.each(context.WithoutCancel(ctx), len(abandoned), func(i int) {
		c := abandoned[i]
		out[i] = SweepResult{Sweep: SweepRecovery, Card: c.ID, Marker: c.Claim}
		if Strands(p.board, c.State) {
			p.reconcile(ctx, &out[i], c)
			return
		}
		p.releaseExpired(ctx, &out[i], c)
	})
	return out, nil
}

// sweepUnleased (fleet only, gate off) repairs ordinary claims a
// mixed-fleet write stripped of lease and fence — their holder can neither
// renew, write nor release them (DESIGN.md#unleased-sweep). The query selects only
// running-column cards with a recorded run, and the sweep acts only on a
// settled disposition (complete, fail, repark), which it carries out
// itself after a transfer: released bare, the card would sit free in the
// running column, which is not a pool state on the fleet, and nothing else
// here would ever file it. Everything else stays conserved: a kept claim
// (pause brake, operator cancel, armed continuation) is load-bearing, and
// a pruned pointer is a decision the gate stops. The run is read plainly —
// promoting it would be a decision.
func (p *pass) sweepUnleased(ctx context.Context) ([]SweepResult, error) {
	cards, err := p.r.cfg.Store.ListUnleasedRunningClaims(ctx, board.ListUnleasedRunningClaimsParams{Cutoff: p.now.Add(-p.r.cfg.UnleasedHorizon), Limit: p.r.cfg.Batch})
	if err != nil {
		return nil, fmt.Errorf("unleased sweep: %w", err)
	}
	var out []SweepResult
	for _, c := range cards {
		if board.IsRecoveryMarker(c.Claim) {
			continue // the recovery sweep's population
		}
		sr := SweepResult{Sweep: SweepUnleased, Card: c.ID, Marker: c.Claim}
		p.reconcile(ctx, &sr, c)
		out = append(out, sr)
	}
	return out, nil
}

// reconcile is a repair sweep's decision-free filing: reapOne in
// modeRepair, reported as a sweep result.
func (p *pass) reconcile(ctx context.Context, sr *SweepResult, c board.Card) {
	m := modeRepair
	if p.dryRun {
		m = modePreview
	}
	cr := p.reapOne(ctx, c, m)
	if p.dryRun && cr.Decision.Action != ActionKeep {
		cr.Decision = p.repairable(cr.Decision)
	}
	sr.Decision, sr.Outcome, sr.FiledTo, sr.Err, sr.Error = &cr.Decision, cr.Outcome, cr.FiledTo, cr.Err, cr.Error
}

// releaseExpired is the recovery sweep's release-only verb: one CAS on the
// claim as listed and still expired at the pass's time.
func (p *pass) releaseExpired(ctx context.Context, sr *SweepResult, c board.Card) {
	if p.dryRun {
		sr.Outcome = OutcomeDecided
		return
	}
	// The state is in the precondition: the release is safe only because
	// the card's column is one a free card may sit in (not Strands), and an
	// operator may move it between the listing and the release.
	err := p.r.cfg.Store.ReleaseExpired(ctx, board.ReleaseExpiredParams{Card: c.ID, Prev: c.Token(), Cutoff: p.now, State: c.State, Actor: p.r.recovery})
	switch {
	case errors.Is(err, board.ErrClaimConflict), errors.Is(err, board.ErrTransitionRejected):
		sr.Outcome = OutcomeSkippedConflict
	case err != nil:
		sr.Outcome, sr.Err, sr.Error = OutcomeError, err, err.Error()
	default:
		sr.Outcome = OutcomeReleased
		p.r.cfg.Logger.Warn("watchdog: released an abandoned recovery claim", "card", sr.Card, "marker", sr.Marker, "epoch", c.ClaimEpoch)
	}
}
