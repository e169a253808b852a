package watchdog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// Deciding: a pass lists the expired claims of its share, transfers each
// card to its recovery claim and decides it on the card the transfer
// observed (DESIGN.md#transfer-first, DESIGN.md#observed-card).

// pass is one pass's view of the world: the store's time, read once, and
// the configuration as the pass read it.
type pass struct {
	r      *Reaper
	now    time.Time
	lease  time.Duration
	board  board.Board
	dryRun bool
	// everyShare lists every reaper's share (a woken pass).
	everyShare bool
	// unsteady: the reaper does not trust the store's clock yet
	// (DESIGN.md#clock-steps), so the pass decides only cards whose owner
	// is provably dead by its pid, a proof no clock enters.
	unsteady bool
}

// holderGone reports whether the process the listed claim names ran on
// this agent's host and no process has its pid any more: whoever held the
// claim has stopped, whatever the clocks say. A pid that names a process,
// the claim's holder or one that took the pid since, proves nothing.
func (p *pass) holderGone(ctx context.Context, c board.Card) bool {
	m, err := board.ParseMarker(c.Claim)
	if err != nil || m.Host != p.r.cfg.Host || p.r.cfg.Prober == nil {
		return false
	}
	return p.r.cfg.Prober.Probe(ctx, m.PID, pidprobe.Identity{}) == pidprobe.Dead
}

// listExpired lists what this pass decides. A gated pass takes one page of
// this reaper's share (on a store several agents reap, the others list the
// rest: DESIGN.md#reaper-shares), resuming where the previous pass stopped
// and starting over once the listing ran out; it also returns how many
// reapers shared the listing and which share was this one's. A pass that
// does not trust the store's clock yet takes no share: it lists every
// reaper's, deciding only the cards whose holder is provably gone. A dry run
// walks the whole listing from the start, every reaper's share, and leaves
// the cursor alone.
func (p *pass) listExpired(ctx context.Context) ([]board.Card, board.ListExpiredClaimCandidatesResult, error) {
	st := p.r.cfg.Store
	if !p.dryRun {
		q := board.ListExpiredClaimCandidatesParams{Cutoff: p.now, Limit: p.r.cfg.Batch, After: p.r.cursor}
		if !p.unsteady && !p.everyShare {
			// A reaper that does not trust the store's clock decides only
			// pid-proven cards: it takes no share, or nobody would decide
			// the rest of it while it waits (DESIGN.md#reaper-shares).
			q.Share = &board.ReaperShare{Reaper: p.r.cfg.Marker, Interval: p.r.cfg.Interval}
		}
		page, err := st.ListExpiredClaimCandidates(ctx, q)
		if err != nil {
			p.r.cursor = "" // a position the store no longer reads must not wedge the reaper
			return nil, board.ListExpiredClaimCandidatesResult{}, err
		}
		p.r.cursor = page.Next
		return page.Cards, page, nil
	}
	var out []board.Card
	after := ""
	for {
		page, err := st.ListExpiredClaimCandidates(ctx, board.ListExpiredClaimCandidatesParams{Cutoff: p.now, Limit: p.r.cfg.Batch, After: after})
		out = append(out, page.Cards...)
		if err != nil || page.Next == "" || len(page.Cards) == 0 {
			return out, board.ListExpiredClaimCandidatesResult{}, err
		}
		after = page.Next
	}
}

// mode is how reapOne treats a card.
type mode int

const (
	// modeDecide is the gated pass: the whole table, transfer first.
	modeDecide mode = iota
	// modePreview decides as modeDecide would and writes nothing.
	modePreview
	// modeRepair is a gate-off sweep reconciling a card it must not leave
	// free where it is: only a settled disposition (complete, fail,
	// repark) is carried out, after a transfer; everything else is kept.
	modeRepair
)

// settles reports the dispositions a repair sweep carries out: they leave
// the card where the run's own verdict says, which is what releasing the
// claim would have let the card's owner do.
func settles(a Action) bool {
	return a == ActionComplete || a == ActionFail || a == ActionRepark
}

// repairable is d as a repair sweep may carry it out: a settled
// disposition. The run ceiling — the retry policy's limit reached by a
// merely resumable run (rule attempts_spent, a give-up) — files the card to
// a sink on the watchdog's own judgement: a decision, which the gate
// stops. Anything else is kept.
func (p *pass) repairable(d Decision) Decision {
	why := ""
	switch {
	case d.Rule == RuleAttemptsSpent && d.Action == ActionGiveUp:
		why = fmt.Sprintf("a resumable run's card whose %s is filed to a sink, a decision the gate stops",
			board.RunRoute{Attempts: d.Attempts, MaxAttempts: d.MaxAttempts}.Why())
	case !settles(d.Action):
		why = "not a settled disposition"
	default:
		return d
	}
	return Decision{Action: ActionKeep, Row: d.Row, Rule: d.Rule, Reason: d.Reason + "; " + why + ": the repair sweep keeps it"}
}

// reapOne is one card: resolve its claim's run, pre-check, transfer, decide
// on the card the transfer observed, act.
func (p *pass) reapOne(ctx context.Context, listed board.Card, m mode) (cr CardResult) {
	defer func() {
		if cr.Err != nil {
			cr.Error = cr.Err.Error()
		}
	}()
	r := p.r
	cr = CardResult{Card: listed.ID, Prev: listed.Token()}

	// The pre-check sees the run as a promotion would leave it, but nothing
	// is written before the transfer: the listing's copy may be stale, and
	// a promotion is made only once the transfer has proved it is not
	// (Oracle.ResolveAfterTransfer). A repair sweep never promotes.
	var res Resolution
	if m == modeRepair {
		res = r.oracle.Read(ctx, listed)
	} else {
		res = r.oracle.Preview(ctx, listed, p.now)
	}
	cr.Run = res.Recorded
	in := res.Stuck(listed, p.board, p.now, p.lease)
	in.Fleet = r.cfg.Fleet
	if m == modeRepair {
		cr.PreCheck = p.repairable(DecideStuckCard(in))
	} else {
		cr.PreCheck = PreCheck(in)
	}
	if cr.PreCheck.Action == ActionKeep {
		cr.Decision, cr.Outcome = cr.PreCheck, OutcomeKept
		if m == modePreview {
			cr.Outcome = OutcomeDecided
		}
		return cr
	}
	if p.unsteady && m == modeDecide && res.Proof != ProofPIDDead && !p.holderGone(ctx, listed) {
		cr.Decision, cr.Outcome = Decision{Action: ActionKeep, Rule: RuleClockUnsteady,
			Reason: "the store's clock is not trusted yet (the reaper has just started, or the clock stepped): only a pid proof decides"}, OutcomeKept
		return cr
	}
	if m == modePreview {
		// What the real pass would decide if the transfer observed the
		// listing's copy unchanged.
		cr.Decision, cr.Outcome = AfterTransfer(DecideStuckCard(in), listed.Claim, Strands(p.board, listed.State)), OutcomeDecided
		return cr
	}

	if r.beforeTransfer != nil {
		r.beforeTransfer(listed)
	}
	// DESIGN.md#transfer-first: transfer first. Freeing an eligible card before its
	// disposition is decided would let the very tick we clean up after
	// re-dispatch it. The CAS carries the whole precondition — the claim is
	// still exactly the listed token and still expired at the store's time
	// — so a renewal, an operator or another agent's reaper in between is a
	// clean skip.
	observed, err := r.cfg.Store.ReclaimExpired(ctx, board.ReclaimExpiredParams{
		Card: listed.ID, Prev: listed.Token(), RecoveryMarker: r.recovery, Cutoff: p.now, Lease: p.lease,
	})
	tok := observed.Token()
	switch {
	case errors.Is(err, board.ErrClaimConflict):
		cr.Decision, cr.Outcome = cr.PreCheck, OutcomeSkippedConflict
		return cr
	case err != nil:
		cr.Decision, cr.Outcome, cr.Err = cr.PreCheck, OutcomeError, fmt.Errorf("transfer: %w", err)
		return cr
	}
	cr.Token = tok
	r.cfg.Logger.Warn("watchdog: reclaimed an expired claim",
		"card", listed.ID, "prev_marker", listed.Claim, "prev_epoch", listed.ClaimEpoch,
		"epoch", tok.Epoch, "lease_until", listed.ClaimLeaseUntil, "pre_check", cr.PreCheck.Rule)

	// DESIGN.md#observed-card: the decision that counts is taken on the card the
	// transfer observed, never on the listing's copy — an operator may have
	// moved it in between. The run is read again for the pointer the
	// observed card records (the owner may have stamped a new one before
	// the transfer fenced it out), and promoted now if the proof holds for
	// the claim the transfer took over. The transfer carried the judged
	// epoch over (RecoveredEpoch), so the same claim is judged.
	var res2 Resolution
	if m == modeRepair {
		res2 = r.oracle.Read(ctx, observed)
	} else {
		res2 = r.oracle.ResolveAfterTransfer(ctx, listed, observed, p.now)
	}
	cr.Run = res2.Recorded
	in2 := res2.Stuck(observed, p.board, p.now, p.lease)
	in2.Fleet = r.cfg.Fleet
	// The transfer re-stamped claimed_at; the window is the listed
	// claim's, or the transfer would re-open it.
	in2.ClaimStart = listed.ClaimedAt
	d := DecideStuckCard(in2)
	if m == modeRepair {
		d = p.repairable(d)
	}
	cr.Decision = AfterTransfer(d, listed.Claim, Strands(p.board, observed.State))
	p.act(ctx, &cr, observed, tok, res2.Recorded)
	return cr
}

// each runs fn(0) … fn(n-1) on at most Workers goroutines and waits for
// them. It starts no new index once ctx is done; done reports which ones
// ran. fn must touch only what belongs to its own index.
func (r *Reaper) each(ctx context.Context, n int, fn func(i int)) (done []bool) {
	done = make([]bool, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(r.cfg.Workers, n) {
		wg.Go(func() {
			for i := range next {
				fn(i)
				done[i] = true
			}
		})
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return done
}
