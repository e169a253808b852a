package watchdog_test

import (
	"fmt"
	"slices"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// The invariants, each named as a failure reports it:
//
//	one-holder       at most one live holder per card: a worker whose agent
//	                 still vouches for its claim (tracked, before the trusted
//	                 deadline) and that no operator stole, plus a recovery
//	                 claim whose lease has not ended;
//	epoch            every fresh acquisition (a claimed event) carries an
//	                 epoch above every earlier one of the card;
//	fence            no write under a superseded token is accepted: a
//	                 worker's owner write or renewal answered nil while the
//	                 card held another token, or an owner write in the log
//	                 by a marker that did not hold the card;
//	foreign-run      no card is filed by a recovery claim into a sink with
//	                 run_finished / run_failed from a run the claim being
//	                 judged did not start (the simulation records which
//	                 runs each claim's worker started);
//	starvation       every expired claim is listed by an agent's pass within
//	                 ceil(cards/batch)+2 of its passes, counting on the
//	                 fleet the passes whose share held the claim
//	                 (DESIGN.md#reaper-shares);
//	fleet-starvation every expired claim is listed by some agent's steady
//	                 pass within ceil(cards/batch)+3 intervals and a record's
//	                 hold of true time: no share is left to nobody;
//	stuck            no free card sits where nothing picks it up: in a
//	                 running column that is not a pool state (unless an
//	                 operator left it there), or in waiting_deps with every
//	                 blocker complete;
//	sink             a terminal card leaves its sink only by Reopen;
//	live-run         a run whose worker is alive and holds a valid lease (by
//	                 the store's clock) is never promoted to
//	                 PROCESS_ORPHANED;
//	queued-run       a queued run is never promoted (only a running one goes
//	                 through the oracle);
//	reopen           a Reopen is accepted only while every card naming the
//	                 reopened one as a blocker is in waiting_deps or a sink;
//	redispatch       ClaimNext never hands out delivered work: a card whose
//	                 run finished, untouched by an operator since.

// simModel is what the simulation knows besides the store: the store's
// state after the last step (cards, the runs it re-read), and what the
// workers and operators did.
type simModel struct {
	cards map[string]board.Card
	runs  map[string]board.Run
	// starts: card → claim epoch → the runs that claim's worker started.
	starts   map[string]map[int64][]string
	runOwner map[string]*simWorker
	// revoked: worker tokens an operator force-released.
	revoked map[board.ClaimToken]bool
	// delivered: card → a run of it seen finished since the last operator
	// gesture on the card (a reopen, a move, a force-release).
	delivered    map[string]string
	finishedSeen map[string]bool
	// opTouched: card → the state an operator left it in (moved it into,
	// or force-released it in).
	opTouched  map[string]string
	reopenStep map[string]int

	// The event log replayed: the claim each card holds, the last epoch
	// granted, and for each recovery claim the worker claim it took over
	// (through any chain of recovery claims).
	lastSeq int64
	// events counts the events replayed: the notes number them by it, since
	// a fleet's sequence numbers carry the server's time and differ per run.
	events int
	holder map[string]board.ClaimToken
	// released: card → who released its last claim, and which.
	released  map[string]string
	lastEpoch map[string]int64
	origin    map[string]map[int64]board.ClaimToken
}

func (m *simModel) init() {
	m.cards = map[string]board.Card{}
	m.runs = map[string]board.Run{}
	m.starts = map[string]map[int64][]string{}
	m.runOwner = map[string]*simWorker{}
	m.revoked = map[board.ClaimToken]bool{}
	m.delivered = map[string]string{}
	m.finishedSeen = map[string]bool{}
	m.opTouched = map[string]string{}
	m.reopenStep = map[string]int{}
	m.holder = map[string]board.ClaimToken{}
	m.released = map[string]string{}
	m.lastEpoch = map[string]int64{}
	m.origin = map[string]map[int64]board.ClaimToken{}
}

// started records that k's claim started run id.
func (m *simModel) started(k *simWorker, id string) {
	if m.starts[k.card] == nil {
		m.starts[k.card] = map[int64][]string{}
	}
	m.starts[k.card][k.tok.Epoch] = append(m.starts[k.card][k.tok.Epoch], id)
	m.runOwner[id] = k
}

func (m *simModel) dependents(id string) []board.Card {
	var out []board.Card
	for _, c := range m.cards {
		if slices.Contains(c.DependsOn, id) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b board.Card) int {
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	return out
}

func (m *simModel) operatorTouched(id, state string) {
	delete(m.delivered, id)
	m.opTouched[id] = state
}

// observe reads the store after a step, replays the new events and checks
// the invariants that hold between any two steps.
func (w *simWorld) observe(touched []string) {
	cards, err := w.truth.ListCards(w.ctx, board.ListCardsParams{})
	if err != nil {
		w.t.Fatalf("ListCards: %v", err)
	}
	prev := w.m.cards
	next := make(map[string]board.Card, len(cards))
	for _, c := range cards {
		next[c.ID] = c
	}
	evs, err := w.truth.Events(w.ctx, board.EventsParams{After: w.m.lastSeq, Limit: 0})
	if err != nil {
		w.t.Fatalf("Events: %v", err)
	}
	for _, ev := range evs {
		w.m.events++
		w.replay(ev, prev)
		w.m.lastSeq = ev.Seq
	}
	slices.Sort(touched)
	for _, id := range slices.Compact(touched) {
		w.readRun(id)
	}
	w.m.cards = next
	for id, st := range w.m.opTouched {
		if c := next[id]; c.Claimed() || c.State != st {
			delete(w.m.opTouched, id)
		}
	}
	w.checkSinks(prev, next)
	w.checkHolders()
	w.checkStuck()
}

func (w *simWorld) readRun(id string) {
	r, err := w.truth.GetRun(w.ctx, board.GetRunParams{ID: id})
	if err != nil {
		return // not created (the write was refused or never landed)
	}
	if old, ok := w.m.runs[id]; !ok || old.Status != r.Status || old.Continuation != r.Continuation || old.FailureCode != r.FailureCode {
		w.note(r.Card, "run %s is %s (continuation %q, failure %q)", r.ID, r.Status, r.Continuation, r.FailureCode)
	}
	w.m.runs[id] = r
	if r.Status == board.RunFinished && !w.m.finishedSeen[id] {
		w.m.finishedSeen[id] = true
		w.m.delivered[r.Card] = id
	}
}

func isMarker(s string) bool { return board.ValidateMarker(s) == nil }

// replay applies one event of the log to the replayed claims, checking the
// epoch, the fence and the filings on the way. prev is the store as the
// step began.
func (w *simWorld) replay(ev board.Event, prev map[string]board.Card) {
	id := ev.Card
	m := &w.m
	switch ev.Type {
	case board.EventClaimed:
		tok := board.ClaimToken{Marker: ev.Data.Marker, Epoch: ev.Data.Epoch}
		w.note(id, "event %d: claimed by %s@%d", w.m.events, tok.Marker, tok.Epoch)
		if last, ok := m.lastEpoch[id]; ok && tok.Epoch <= last {
			w.violation(id, "epoch", "acquisition %s@%d does not raise the epoch above %d", tok.Marker, tok.Epoch, last)
		}
		m.lastEpoch[id] = tok.Epoch
		if board.IsRecoveryMarker(tok.Marker) {
			o := m.holder[id]
			if board.IsRecoveryMarker(o.Marker) {
				o = m.origin[id][o.Epoch]
			}
			if m.origin[id] == nil {
				m.origin[id] = map[int64]board.ClaimToken{}
			}
			m.origin[id][tok.Epoch] = o
		}
		m.holder[id] = tok
		return
	case board.EventReleased:
		w.note(id, "event %d: released %s@%d by %q", w.m.events, ev.Data.Marker, ev.Data.Epoch, ev.Actor)
		m.holder[id] = board.ClaimToken{}
		m.released[id] = fmt.Sprintf("%s@%d released by %q", ev.Data.Marker, ev.Data.Epoch, ev.Actor)
		return
	case board.EventState, board.EventLastRun, board.EventAwaitingInput, board.EventGaveUp:
	default:
		return
	}
	if ev.Type == board.EventState {
		w.note(id, "event %d: state %s → %s, reason %q, actor %q", w.m.events, ev.Data.From, ev.Data.To, ev.Reason, ev.Actor)
	} else {
		w.note(id, "event %d: %s by %q", w.m.events, ev.Type, ev.Actor)
	}
	// An unblocked promotion is written on the dependent by whoever
	// completed its blocker: not an owner write of the dependent.
	if ev.Reason != board.ReasonUnblocked && isMarker(ev.Actor) {
		if h := m.holder[id]; h.Marker != ev.Actor {
			w.violation(id, "fence", "a %s write by %s landed while %q held the card", ev.Type, ev.Actor, h.Marker)
			return
		}
	}
	if ev.Type != board.EventState {
		return
	}
	if w.b.IsTerminal(ev.Data.From) && !w.b.IsTerminal(ev.Data.To) && m.reopenStep[id] != w.step {
		w.violation(id, "sink", "the card left sink %s for %s (actor %q, reason %q) without a Reopen", ev.Data.From, ev.Data.To, ev.Actor, ev.Reason)
		return
	}
	verdict := ev.Reason == board.ReasonRunFinished || ev.Reason == board.ReasonRunFailed
	if board.IsRecoveryMarker(ev.Actor) && verdict && w.b.IsTerminal(ev.Data.To) {
		rec := m.holder[id]
		judged := m.origin[id][rec.Epoch]
		run := prev[id].LastRunID
		if started := m.starts[id][judged.Epoch]; !slices.Contains(started, run) {
			w.violation(id, "foreign-run", "%s filed the card into %s (%s) from run %q, but the claim it judged, %s@%d, started %v",
				ev.Actor, ev.Data.To, ev.Reason, run, judged.Marker, judged.Epoch, started)
		}
	}
}

func (w *simWorld) checkSinks(prev, next map[string]board.Card) {
	for _, id := range w.cardIDs {
		p, ok := prev[id]
		if !ok {
			continue
		}
		if c := next[id]; w.b.IsTerminal(p.State) && !w.b.IsTerminal(c.State) && w.m.reopenStep[id] != w.step {
			w.violation(id, "sink", "the card left sink %s for %s without a Reopen", p.State, c.State)
			return
		}
	}
}

func (w *simWorld) checkHolders() {
	storeNow := w.storeClock.Now()
	for _, id := range w.cardIDs {
		var holders []string
		for _, k := range w.workers {
			if !k.alive || k.card != id || k.tok.IsZero() || k.agent.dead || w.m.revoked[k.tok] {
				continue
			}
			if c, ok := k.agent.loop.Lookup(id); ok && c.Hold.Token == k.tok && k.agent.host.clock.Now().Before(c.TrustedUntil) {
				holders = append(holders, fmt.Sprintf("worker %s@%d (trusted until %s by its agent's clock)", k.marker, k.tok.Epoch, c.TrustedUntil.Format(time.TimeOnly)))
			}
		}
		if c := w.m.cards[id]; board.IsRecoveryMarker(c.Claim) && c.ClaimLeaseUntil.After(storeNow) {
			holders = append(holders, fmt.Sprintf("recovery claim %s@%d (lease until %s)", c.Claim, c.ClaimEpoch, c.ClaimLeaseUntil.Truncate(time.Second).Format(time.TimeOnly)))
		}
		if len(holders) > 1 {
			w.violation(id, "one-holder", "%d live holders: %v", len(holders), holders)
			return
		}
	}
}

func (w *simWorld) checkStuck() {
	for _, id := range w.cardIDs {
		c := w.m.cards[id]
		if c.Claimed() || w.b.IsPool(c.State) || w.b.IsLaunch(c.State) || w.b.IsTerminal(c.State) {
			continue
		}
		switch {
		case c.State == board.StateWaitingDeps:
			complete := true
			for _, b := range c.DependsOn {
				complete = complete && w.b.IsCompletion(w.m.cards[b].State)
			}
			if complete {
				w.violation(id, "stuck", "free in %s although every blocker %v is complete: nothing will promote it", c.State, c.DependsOn)
				return
			}
		case w.b.IsRunning(c.State):
			if w.m.opTouched[id] == c.State {
				continue // an operator force-released it there
			}
			w.violation(id, "stuck", "free in the running column %s, which is not a pool state here: nothing will ever pick it up (last run %q; %s)", c.State, c.LastRunID, w.m.released[id])
			return
		}
	}
}

// checkClaimNext runs when ClaimNext handed out id (before the step's
// state is read back).
func (w *simWorld) checkClaimNext(id string) {
	if run, ok := w.m.delivered[id]; ok {
		w.violation(id, "redispatch", "ClaimNext handed out %s (in %s) although its run %s finished: delivered work dispatched again", id, w.m.cards[id].State, run)
	}
}

// checkReopen runs when a Reopen of id was accepted.
func (w *simWorld) checkReopen(id string) {
	for _, d := range w.m.dependents(id) {
		if d.State != board.StateWaitingDeps && !w.b.IsTerminal(d.State) {
			w.violation(id, "reopen", "Reopen(%s) was accepted while its dependent %s (depends on %v, promoted by %q) is in %s", id, d.ID, d.DependsOn, d.PromotedBy, d.State)
			return
		}
	}
}

// checkRenewals runs inside the heartbeat's RenewClaims, on what the store
// answered: a renewal confirmed for a token the card no longer held is a
// write accepted under a superseded token.
func (w *simWorld) checkRenewals(a *simAgent, hs []board.Hold, out []board.RenewResult) {
	for i, r := range out {
		if i >= len(hs) || r.Err != nil {
			continue
		}
		if cur := w.m.cards[hs[i].Card].Token(); cur != hs[i].Token {
			w.violation(hs[i].Card, "fence", "agent %s renewed %s@%d while the card was held by %s@%d", a.marker, hs[i].Token.Marker, hs[i].Token.Epoch, cur.Marker, cur.Epoch)
		}
	}
}

// passSnapshot is what a pass is checked against: the store as the pass
// began.
type passSnapshot struct {
	storeNow, agentNow time.Time
	live, queued       map[string]bool
	orphaned           map[string]bool
}

func (w *simWorld) beforePass(a *simAgent) passSnapshot {
	s := passSnapshot{
		storeNow: w.storeClock.Now(), agentNow: a.host.clock.Now(),
		live: map[string]bool{}, queued: map[string]bool{}, orphaned: map[string]bool{},
	}
	for _, id := range w.cardIDs {
		c := w.m.cards[id]
		run, ok := w.m.runs[c.LastRunID]
		if c.LastRunID == "" || !ok {
			continue
		}
		if run.FailureCode == board.FailureProcessOrphaned {
			s.orphaned[run.ID] = true
		}
		if run.Status == board.RunQueued {
			s.queued[run.ID] = true
		}
		k := w.m.runOwner[run.ID]
		if k != nil && k.alive && c.Token() == k.tok && c.ClaimLeaseUntil.After(s.storeNow) &&
			slices.Contains(w.m.starts[id][k.tok.Epoch], run.ID) {
			s.live[run.ID] = true
		}
	}
	return s
}

func (w *simWorld) afterPass(a *simAgent, before passSnapshot, res watchdog.PassResult, crashed bool) {
	for _, id := range w.cardIDs {
		runID := w.m.cards[id].LastRunID
		if runID == "" {
			continue
		}
		w.readRun(runID)
		r := w.m.runs[runID]
		if r.FailureCode != board.FailureProcessOrphaned || before.orphaned[runID] {
			continue
		}
		switch {
		case before.live[runID]:
			k := w.m.runOwner[runID]
			w.violation(id, "live-run", "%s promoted run %s to PROCESS_ORPHANED while its worker %s is alive and holds the card at epoch %d with lease until %s (store clock %s, agent clock %s)",
				a.marker, runID, k.marker, k.tok.Epoch, w.m.cards[id].ClaimLeaseUntil.Truncate(time.Second).Format(time.TimeOnly),
				before.storeNow.Format(time.TimeOnly), before.agentNow.Format(time.TimeOnly))
			return
		case before.queued[runID]:
			w.violation(id, "queued-run", "%s promoted queued run %s to PROCESS_ORPHANED: a queued run is never stolen from", a.marker, runID)
			return
		}
	}
	if !crashed {
		w.checkStarvation(a, before, res)
		w.checkFleetStarvation(a, before, res)
	}
}

// checkFleetStarvation: an expired claim that no agent's pass lists for
// longer than the fleet's bound. Every share is listed by its reaper
// within ceil(cards/batch)+2 of its passes, a share whose reaper stopped
// passing is taken over once its record runs out (1.5 intervals, at most
// 90 s), and a reaper that does not trust the clock lists every share
// (DESIGN.md#reaper-shares); the bound allows one more interval for a
// share moving to a new reaper. checkStarvation counts one agent's passes
// over its own share; this one counts true time across the fleet, so a
// share nobody examines shows up here.
func (w *simWorld) checkFleetStarvation(a *simAgent, before passSnapshot, res watchdog.PassResult) {
	if w.missedSince == nil || w.now()-w.lastPass > 2*w.prof.interval {
		// No agent passed for a while (all down): nothing was owed.
		w.missedSince = map[string]time.Duration{}
	}
	w.lastPass = w.now()
	cutoff := before.storeNow
	if before.agentNow.Before(cutoff) {
		cutoff = before.agentNow
	}
	// A pass that does not trust the clock yet lists every share but
	// decides only what a pid proves: its listing answers for nothing.
	listed := map[string]bool{}
	for _, cr := range res.Cards {
		listed[cr.Card] = res.ClockWait == 0
	}
	passes := (w.prof.cards+w.prof.batch-1)/w.prof.batch + 2
	bound := time.Duration(passes+1)*w.prof.interval + min(w.prof.interval*3/2, 90*time.Second)
	held := map[string]bool{}
	for _, id := range w.cardIDs {
		c := w.m.cards[id]
		key := fmt.Sprintf("%s %s@%d", id, c.Claim, c.ClaimEpoch)
		// Renewed since (by the store's clock): it owes nothing yet.
		held[key] = c.Claimed() && !c.ClaimLeaseUntil.After(before.storeNow)
		// Expired by this pass's clocks: an agent whose clock runs behind
		// sees it later, and its pass neither starts nor ends the count.
		if !c.Claimed() || c.ClaimLeaseUntil.IsZero() || c.ClaimLeaseUntil.After(cutoff) {
			continue
		}
		if listed[id] {
			delete(w.missedSince, key)
			continue
		}
		since, ok := w.missedSince[key]
		if !ok {
			w.missedSince[key] = w.now()
			continue
		}
		if w.now()-since > bound {
			w.violation(id, "fleet-starvation", "the claim %s@%d, expired since %s, was listed by no agent's pass for %s (bound %s: %d passes of %s, batch %d); %s's pass listed %v",
				c.Claim, c.ClaimEpoch, c.ClaimLeaseUntil.Truncate(time.Second).Format(time.TimeOnly), w.now()-since, bound, passes, w.prof.interval, w.prof.batch, a.marker, cardsOf(res))
			delete(w.missedSince, key)
		}
	}
	// A claim that ended (released, transferred, renewed under a new
	// epoch) owes nothing more.
	for key := range w.missedSince {
		if !held[key] {
			delete(w.missedSince, key)
		}
	}
}

// checkStarvation: an expired claim the agent's passes keep seeing and
// never list. A claim counts as expired for a pass only when both the
// store's clock and the agent's say so, so that a reaper reading its own
// clock (a separate defect, caught by live-run) does not show up here.
func (w *simWorld) checkStarvation(a *simAgent, before passSnapshot, res watchdog.PassResult) {
	cutoff := before.storeNow
	if before.agentNow.Before(cutoff) {
		cutoff = before.agentNow
	}
	listed := map[string]bool{}
	for _, cr := range res.Cards {
		listed[cr.Card] = true
	}
	bound := (w.prof.cards+w.prof.batch-1)/w.prof.batch + 2
	seen := map[string]int{}
	for _, id := range w.cardIDs {
		c := w.m.cards[id]
		if !c.Claimed() || c.ClaimLeaseUntil.IsZero() || c.ClaimLeaseUntil.After(cutoff) || listed[id] {
			continue
		}
		if res.Reapers > 1 && board.ShareKey(id)%int64(res.Reapers) != int64(res.ShareIndex) {
			continue // another reaper's share: its own passes answer for it
		}
		key := fmt.Sprintf("%s %s@%d", id, c.Claim, c.ClaimEpoch)
		seen[key] = a.starve[key] + 1
		if seen[key] > bound {
			w.violation(id, "starvation", "the claim %s@%d, expired since %s, went unlisted by %d passes of %s in a row (bound %d with batch %d); the passes listed %v",
				c.Claim, c.ClaimEpoch, c.ClaimLeaseUntil.Truncate(time.Second).Format(time.TimeOnly), seen[key], a.marker, bound, w.prof.batch, cardsOf(res))
			return
		}
	}
	a.starve = seen
}

func cardsOf(res watchdog.PassResult) []string {
	var out []string
	for _, cr := range res.Cards {
		out = append(out, fmt.Sprintf("%s(%s)", cr.Card, cr.Decision.Rule))
	}
	return out
}
