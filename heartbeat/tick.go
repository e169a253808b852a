package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// TickResult says what one tick did.
type TickResult struct {
	// Start is the clock reading at the start of the tick.
	Start time.Time
	// Lease and Mode are the values the tick used (hot-reloadable).
	Lease time.Duration
	Mode  Mode
	// Held is how many claims were tracked when the tick started.
	Held int
	// Renewed counts confirmed renewals.
	Renewed int
	// Closed counts claims found freed by their holder's own Finish or
	// release in flight (Loop.BeginClose): dropped, not lost.
	Closed int
	// StoreCalls counts RenewClaims calls: 1, or 0 when nothing was held.
	StoreCalls int
	// Lost lists the claims this tick stopped tracking, in the order
	// OnLost was told.
	Lost []Lost
	// Err is the batch error of RenewClaims (or ErrBadBatch); nil when the
	// store answered.
	Err error
	// Unconfirmed counts the claims whose renewal this tick could not
	// confirm (the store unreachable, an unknown outcome) and that are
	// still tracked: their trusted deadline decides.
	Unconfirmed int
	// Next is how long the loop waits before the next tick: Lease/3, less
	// when a trusted deadline comes sooner, and RetryDelay when a renewal
	// went unconfirmed.
	Next time.Duration
}

// verdict is what the owner check decided for one claim.
type verdict int

const (
	renew verdict = iota
	ownerDead
	keepaliveMissed
)

type probeKey struct {
	pid   int
	start pidprobe.Identity
}

// RunOnce runs one tick: declare the claims whose trusted deadline passed
// lost; judge every owner (pid probe or keepalive); declare lost the claims
// of dead and silent owners; renew all the rest in ONE RenewClaims call;
// apply the results; then, bounded, expire the dead owners' leases and mark
// the silent owners' claims. OnLost and OnTick are called before it returns.
func (l *Loop) RunOnce(ctx context.Context) TickResult {
	l.tickMu.Lock()
	defer l.tickMu.Unlock()

	lease := l.currentLease()
	margin := l.margin(lease)
	mode := l.cfg.Mode()
	if !mode.Valid() {
		l.cfg.Logger.Warn("heartbeat: unknown liveness mode from reload, using pid", "mode", mode)
		mode = ModePID
	}
	now := l.cfg.Clock.Now()
	res := TickResult{Start: now, Lease: lease, Mode: mode}

	// 1. Deadlines and the owner check that needs no I/O.
	l.mu.Lock()
	if mode == ModeKeepalive && l.lastMode != ModeKeepalive {
		// Clients were not bound to ping in pid mode: judging them on
		// pings they never had to send would drop every claim at the
		// switch. Everyone starts a fresh window now.
		for _, k := range l.keys {
			k.lastPing = now
		}
	}
	l.lastMode = mode
	res.Held = len(l.claims)
	window := l.cfg.KeepaliveWindow
	if window == 0 {
		window = 2 * (lease / 3)
	}
	var (
		live     []*entry
		toProbe  []*entry
		verdicts = map[*entry]verdict{}
	)
	for card, e := range l.claims {
		if !now.Before(e.TrustedUntil) {
			delete(l.claims, card)
			l.dropKey(e.Owner.KeepaliveID)
			lo := lostOf(e, LostUnconfirmed)
			l.disownLocked(lo)
			res.Lost = append(res.Lost, lo)
			continue
		}
		live = append(live, e)
		switch l.judgeBy(mode, e.Owner) {
		case byKeepalive:
			if k, ok := l.keys[e.Owner.KeepaliveID]; !ok || now.Sub(k.lastPing) > window {
				verdicts[e] = keepaliveMissed
			}
		case byPID:
			toProbe = append(toProbe, e)
		}
	}
	l.mu.Unlock()
	sortLost(res.Lost)

	// 2. Probe owners outside the lock (it reads /proc); one probe per
	// distinct process however many claims it holds.
	probed := map[probeKey]pidprobe.Liveness{}
	for _, e := range toProbe {
		k := probeKey{e.Owner.PID, e.Owner.Start}
		lv, ok := probed[k]
		if !ok {
			lv = l.cfg.Prober.Probe(ctx, k.pid, k.start)
			probed[k] = lv
		}
		// Only a proof of death stops renewal; Unknown conserves.
		if lv == pidprobe.Dead {
			verdicts[e] = ownerDead
		}
	}

	// 3. Stop tracking the dead and the silent owners' claims (their store
	// writes are step 5).
	sort.Slice(live, func(i, j int) bool { return live[i].Hold.Card < live[j].Hold.Card })
	var dead []Lost
	batch := live[:0:0]
	l.mu.Lock()
	for _, e := range live {
		v := verdicts[e]
		if v == renew {
			batch = append(batch, e)
			continue
		}
		if l.claims[e.Hold.Card] != e {
			continue // removed or replaced meanwhile: not ours to report
		}
		delete(l.claims, e.Hold.Card)
		l.dropKey(e.Owner.KeepaliveID)
		reason := LostOwnerDead
		if v == keepaliveMissed {
			reason = LostKeepaliveMissed
		}
		lo := lostOf(e, reason)
		l.disownLocked(lo)
		dead = append(dead, lo)
	}
	l.mu.Unlock()
	res.Lost = append(res.Lost, dead...)

	// 4. One batched renewal for everything else. It goes before the
	// losses' own store writes: a slow one of those must not carry the
	// renewal of the live claims past their trusted deadlines.
	if len(batch) > 0 {
		l.renew(ctx, batch, lease, margin, &res)
	}

	// 5. Expire the dead owners' leases through the owner's own fenced
	// write, so the watchdog may rule at once instead of waiting out the
	// TTL, and mark the silent owners' claims. Both are best effort, and
	// bounded by when the next tick is due: a hanging write must not hold
	// it past a live claim's deadline either.
	if len(dead) > 0 {
		l.mu.Lock()
		bound := l.nextLocked(l.cfg.Clock.Now(), lease, res.Unconfirmed > 0)
		l.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, bound)
		for _, lo := range dead {
			tok := board.ClaimToken{Marker: lo.Marker, Epoch: lo.Epoch}
			if lo.Reason == LostKeepaliveMissed {
				// A silent owner is not proved gone: it may be stopped or
				// starved, and its client trusts the claim until the deadline
				// its last ping was given, which may be a tick or so past now.
				// Its lease is left to run out on its own, which is never
				// before that deadline; the claim is only marked given up, so
				// an agent restarted meanwhile does not adopt it again
				// (DESIGN.md#keepalive).
				if err := l.cfg.Store.DisownClaimOwned(wctx, board.OwnedParams{Card: lo.Card, Token: tok}); err != nil {
					l.cfg.Logger.Warn("heartbeat: could not mark a silent owner's claim given up; an agent restarted before its lease runs out would adopt it again",
						"card", lo.Card, "epoch", lo.Epoch, "err", err)
				}
				continue
			}
			if err := l.cfg.Store.ExpireClaimOwned(wctx, board.OwnedParams{Card: lo.Card, Token: tok}); err != nil {
				// The lease then runs out on its own: slower, still safe.
				l.cfg.Logger.Warn("heartbeat: could not expire a dead owner's lease",
					"card", lo.Card, "epoch", lo.Epoch, "reason", lo.Reason, "err", err)
			}
		}
		cancel()
	}

	l.mu.Lock()
	res.Next = l.nextLocked(l.cfg.Clock.Now(), lease, res.Unconfirmed > 0)
	l.mu.Unlock()

	if l.cfg.OnLost != nil {
		for _, lo := range res.Lost {
			l.cfg.OnLost(lo)
		}
	}
	if l.cfg.OnTick != nil {
		l.cfg.OnTick(res)
	}
	return res
}

// nextLocked is how soon after now the next tick must run: an interval
// (lease/3), or sooner for a trusted deadline that falls before it. An
// unconfirmed renewal is retried sooner still: a store plugin that is
// restarted, or a database that fails over, in less than a lease must not
// cost the claims whose trusted deadline falls before the next tick.
// Against a store that is still down each retry is one fast-failing call.
// Callers hold l.mu.
func (l *Loop) nextLocked(now time.Time, lease time.Duration, unconfirmed bool) time.Duration {
	next := lease / 3
	if d, ok := l.earliestLocked(now); ok && d < next {
		next = max(d, 0)
	}
	if unconfirmed {
		next = min(next, RetryDelay(lease))
	}
	return next
}

// RetryDelay is how soon a tick whose renewals went unconfirmed is
// followed by another: lease/40, between 50 ms and 1 s.
func RetryDelay(lease time.Duration) time.Duration {
	return min(max(lease/40, 50*time.Millisecond), time.Second)
}

// renew sends the batch and applies the answer.
func (l *Loop) renew(ctx context.Context, batch []*entry, lease, margin time.Duration, res *TickResult) {
	holds := make([]board.Hold, len(batch))
	earliest := batch[0].TrustedUntil
	for i, e := range batch {
		holds[i] = e.Hold
		if e.TrustedUntil.Before(earliest) {
			earliest = e.TrustedUntil
		}
	}

	attempt := l.cfg.Clock.Now()
	// A store that hangs must not carry the tick past the earliest trusted
	// deadline: the loss has to be declared on time.
	callCtx, cancel := context.WithTimeout(ctx, earliest.Sub(attempt))
	results, err := l.cfg.Store.RenewClaims(callCtx, board.RenewClaimsParams{Holds: holds, Lease: lease})
	cancel()
	res.StoreCalls++
	if err == nil && len(results) != len(holds) {
		err = fmt.Errorf("%w: %d results for %d holds", ErrBadBatch, len(results), len(holds))
	}
	if err != nil {
		// Store unreachable, or ErrOutcomeUnknown: some leases may have
		// moved, but nothing is confirmed, so nothing counts as renewed.
		res.Err = err
		l.cfg.Logger.Warn("heartbeat: renewal batch not confirmed", "claims", len(holds), "err", err)
	}
	trusted := attempt.Add(lease - margin)
	returned := l.cfg.Clock.Now()

	var lost []Lost
	l.mu.Lock()
	for i, e := range batch {
		if l.claims[e.Hold.Card] != e {
			continue // removed or replaced during the call
		}
		if err != nil || results[i].Card != e.Hold.Card {
			e.Failures++
			res.Unconfirmed++
			continue
		}
		r := results[i]
		switch {
		case r.Err == nil:
			if attempt.After(e.ConfirmedAt) {
				e.ConfirmedAt = attempt
			}
			if trusted.After(e.TrustedUntil) {
				e.TrustedUntil = trusted
			}
			e.LeaseUntil = r.LeaseUntil
			e.LastRenewed = returned
			e.Failures = 0
			res.Renewed++
		case errors.Is(r.Err, board.ErrClaimConflict):
			delete(l.claims, e.Hold.Card)
			l.dropKey(e.Owner.KeepaliveID)
			reason := LostSuperseded
			if ce, ok := board.AsClaimConflict(r.Err); ok && ce.Holder == "" {
				reason = LostReleased
			}
			if reason == LostReleased && e.closing > 0 {
				// The holder's own Finish or release freed the card
				// (BeginClose): nothing was lost, nothing is left to renew
				// — unless that call fails (its end reports it then).
				e.closedByTick = true
				res.Closed++
				continue
			}
			lost = append(lost, lostOf(e, reason))
		default:
			// Any other per-hold error (outcome unknown, not found) is
			// simply not a confirmation; the deadline decides.
			e.Failures++
			res.Unconfirmed++
			l.cfg.Logger.Warn("heartbeat: renewal not confirmed", "card", e.Hold.Card, "err", r.Err)
		}
	}
	// The call itself may have outlasted some deadlines.
	var late []Lost
	for _, e := range batch {
		if l.claims[e.Hold.Card] == e && !returned.Before(e.TrustedUntil) {
			delete(l.claims, e.Hold.Card)
			l.dropKey(e.Owner.KeepaliveID)
			lo := lostOf(e, LostUnconfirmed)
			l.disownLocked(lo)
			late = append(late, lo)
			res.Unconfirmed = max(res.Unconfirmed-1, 0)
		}
	}
	l.mu.Unlock()
	res.Lost = append(res.Lost, lost...)
	res.Lost = append(res.Lost, late...)
}

type judgement int

const (
	byNothing judgement = iota
	byPID
	byKeepalive
)

// judgeBy picks the evidence for an owner: the mode's own, or the other
// kind when the owner offers none of the mode's (a pid-mode owner the agent
// cannot see, a keepalive-mode owner with no client key). An owner with
// neither is renewed until released or superseded.
func (l *Loop) judgeBy(mode Mode, o Owner) judgement {
	hasPID, hasKey := o.PID > 0, o.KeepaliveID != ""
	switch {
	case mode == ModeKeepalive && hasKey, mode == ModePID && !hasPID && hasKey:
		return byKeepalive
	case hasPID:
		return byPID
	default:
		return byNothing
	}
}

func lostOf(e *entry, r LostReason) Lost {
	return Lost{Card: e.Hold.Card, Epoch: e.Hold.Token.Epoch, Marker: e.Hold.Token.Marker, Reason: r, Owner: e.Owner}
}

func sortLost(ls []Lost) {
	sort.Slice(ls, func(i, j int) bool { return ls[i].Card < ls[j].Card })
}
