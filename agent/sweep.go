package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	"github.com/leasekeeper/leasekeeper/socketapi"
)

// SweepAction is what the boot sweep did with one same-host claim.
type SweepAction string

const (
	// SweepReleased: the owner is provably dead and the claim had no lease
	// (a legacy claim): it was released.
	SweepReleased SweepAction = "released"
	// SweepExpired: the owner is provably dead: its lease was expired at
	// once so the reaper may rule on the card without waiting out the TTL.
	SweepExpired SweepAction = "expired"
	// SweepDisowned: the owner is alive but its claim may already be over
	// (its holder may have passed its trusted deadline while no agent
	// renewed it): the claim is not adopted and its stored lease is left
	// to run its course, because the holder may still trust it until that
	// lease less a margin (DESIGN.md#boot-sweep).
	SweepDisowned SweepAction = "disowned"
	// SweepAdopted: the owner is alive and its claim still has time left:
	// the claim was renewed and handed to the heartbeat, so the worker never
	// notices the agent restarted.
	SweepAdopted SweepAction = "adopted"
	// SweepKept: the owner's liveness could not be proved either way (or
	// the claim changed under the sweep): the claim was left alone and its
	// lease runs its course.
	SweepKept SweepAction = "kept"
	// SweepFailed: a store call failed; the claim was left as it was.
	SweepFailed SweepAction = "failed"
)

// SweepItem is the boot sweep's record of one claim.
type SweepItem struct {
	Card   string
	Marker string
	Epoch  int64
	Action SweepAction
	Why    string
	Err    error
	// Lost, for a worker's claim the sweep expired, is the loss that amounts
	// to in the heartbeat's terms (its owner dead, or no renewal confirmed
	// before its trusted deadline): the agent does not vouch for the claim
	// although the store still names it. The caller hands it to the
	// heartbeat's Disown, so a re-claim by the same marker is a fresh
	// acquisition and not that token back. Empty otherwise.
	Lost heartbeat.LostReason
	// Owner, for a claim the sweep disowned, is its live holder's identity:
	// only that process may still hand the claim back.
	Owner heartbeat.Owner
}

// Adoption is a live worker's claim the sweep renewed; the caller hands it
// to the heartbeat.
type Adoption struct {
	Hold  board.Hold
	Owner heartbeat.Owner
	// AttemptStart is the clock reading taken just before the renewal that
	// confirmed the claim; with the lease it gives the trusted deadline.
	AttemptStart time.Time
	Lease        time.Duration
	// ClaimedAt is the card's claimed_at as listed (the store's clock),
	// for the claim's age in the metrics.
	ClaimedAt time.Time
}

// SweepStore is what the boot sweep calls: the claimed cards of this host
// and their runs (reads), the store's clock, and the three writes it
// settles a claim with: the renewal that adopts it, the expiry of a dead
// owner's lease, the release of a legacy claim (DESIGN.md#boot-sweep).
type SweepStore interface {
	ListCards(ctx context.Context, p board.ListCardsParams) ([]board.Card, error)
	GetRun(ctx context.Context, p board.GetRunParams) (board.Run, error)
	Now(ctx context.Context) (time.Time, error)
	RenewClaims(ctx context.Context, p board.RenewClaimsParams) ([]board.RenewResult, error)
	ExpireClaimOwned(ctx context.Context, p board.OwnedParams) error
	Release(ctx context.Context, p board.ReleaseParams) error
}

// SweepConfig configures BootSweep.
type SweepConfig struct {
	Store  SweepStore
	Prober pidprobe.Prober
	Clock  board.Clock
	// Host is this host's name: only markers of this host are touched.
	Host string
	// SelfPID is the agent's own pid. A claim naming it can only be a
	// leftover of an earlier agent that had the same pid (containers
	// restart their processes with the same pids), never a live claim.
	SelfPID int
	// Lease is the lease adopted claims are renewed with.
	Lease time.Duration
	// Margin is the heartbeat's trust margin (see heartbeat.Config.Margin);
	// zero means heartbeat.DefaultMargin(Lease). A live worker's claim whose
	// stored lease ends within two margins of now is over, not adopted
	// (see over).
	Margin time.Duration
	// Keepalive: the agent runs in keepalive mode, so claims self-declared
	// by workers in another pid namespace ("<host>~pidns-<pid>") are
	// adopted too; their client's pings decide whether they stay.
	Keepalive bool
	Logger    *slog.Logger
	Actor     string
}

// BootSweep runs once at agent start, BEFORE the socket serves: it visits
// every claimed card whose marker names this host — worker claims and
// "reaper:" recovery claims alike — and
//
//   - releases the claim when its owner is provably dead and it has no
//     lease (a legacy claim: no time-based reaper would ever touch it);
//   - expires the lease at once when its owner is provably dead, so the
//     gated reaper may rule on the card now (DESIGN.md#boot-sweep: this repair is
//     ungated);
//   - adopts the claim of a live worker: renews it and returns it for the
//     heartbeat, so restarting the agent under running workers loses
//     nothing;
//   - but disowns, and does not adopt, a live worker's claim that may
//     already be over: its holder may have passed its trusted deadline
//     and given the claim up (see over). Its lease is left as stored: the
//     holder may still trust the claim until that lease less a margin, so
//     moving the lease earlier would let the watchdog's orphan grace run
//     out while the holder may still work (DESIGN.md#boot-sweep).
//
// Anything it cannot prove is left alone. The returned adoptions were
// renewed successfully; the caller must hand them to the heartbeat.
func BootSweep(ctx context.Context, cfg SweepConfig) ([]SweepItem, []Adoption, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = board.SystemClock{}
	}
	if cfg.Margin <= 0 {
		cfg.Margin = heartbeat.DefaultMargin(cfg.Lease)
	}
	// Only this host's claims are read, not the fleet's; the checks below
	// still judge every marker, for a store that ignores the filter.
	hosts := []string{cfg.Host}
	if cfg.Keepalive {
		hosts = append(hosts, cfg.Host+socketapi.ForeignHostSuffix)
	}
	cards, err := cfg.Store.ListCards(ctx, board.ListCardsParams{ClaimedOnly: true, ClaimHosts: hosts})
	if err != nil {
		return nil, nil, fmt.Errorf("boot sweep: list claimed cards: %w", err)
	}
	var items []SweepItem
	type candidate struct {
		card  board.Card
		owner heartbeat.Owner
		why   string
	}
	var live []candidate
	for _, c := range cards {
		if !c.Claimed() {
			continue
		}
		m, err := board.ParseMarker(c.Claim)
		if err != nil {
			continue // not a marker this agent understands: not ours to judge
		}
		item := SweepItem{Card: c.ID, Marker: c.Claim, Epoch: c.ClaimEpoch}
		switch {
		case m.Host == cfg.Host:
		case cfg.Keepalive && !m.Recovery && m.Host == cfg.Host+socketapi.ForeignHostSuffix:
			// A worker in another pid namespace: its pid means nothing
			// here, only its pings will tell.
			live = append(live, candidate{c, heartbeat.Owner{KeepaliveID: c.Claim}, "self-declared worker (keepalive mode)"})
			continue
		default:
			continue
		}

		verdict, start, why := cfg.judge(ctx, c, m)
		switch verdict {
		case pidprobe.Dead:
			item.Action, item.Why, item.Err = cfg.bury(ctx, c)
			item.Why = why + "; " + item.Why
			if item.Action == SweepExpired && !m.Recovery {
				item.Lost = heartbeat.LostOwnerDead
			}
		case pidprobe.Alive:
			if m.Recovery {
				// A live agent's recovery claim (another agent of this host
				// on a shared store): its own reaper manages it.
				item.Action, item.Why = SweepKept, why+"; another live agent's recovery claim"
				break
			}
			owner := heartbeat.Owner{PID: m.PID, Start: start, KeepaliveID: c.Claim}
			live = append(live, candidate{c, owner, why})
			continue
		default:
			item.Action, item.Why = SweepKept, why
		}
		items = append(items, item)
	}

	// A claim this host's agent gave up on before it stopped (its owner
	// missed its keepalive) is not adopted again: its holder was told it
	// lost the claim, and may have stopped working to it. Its lease runs
	// out on its own, and a re-claim by the same worker gets a fresh epoch
	// (DESIGN.md#keepalive).
	adoptable := live[:0:0]
	for _, l := range live {
		if !l.card.Disowned() {
			adoptable = append(adoptable, l)
			continue
		}
		items = append(items, SweepItem{Card: l.card.ID, Marker: l.card.Claim, Epoch: l.card.ClaimEpoch,
			Action: SweepDisowned, Lost: heartbeat.LostKeepaliveMissed, Owner: l.owner,
			Why: l.why + ", but this host's agent gave the claim up before it stopped (its owner missed its keepalive); not adopted, its lease left to run out"})
	}
	live = adoptable

	// The store's clock is read once, as late as it can be before the
	// renewal: a later reading only judges more claims over, the safe side
	// (see over). attempt, this agent's clock, starts the adoptees' trusted
	// deadlines, which are this agent's own.
	storeNow, nowErr := cfg.Store.Now(ctx)
	attempt := cfg.Clock.Now()
	if nowErr != nil {
		// Without the store's clock nothing can be judged live: adopt
		// nothing (the safe failure) and let the leases run their course.
		for _, l := range live {
			items = append(items, SweepItem{Card: l.card.ID, Marker: l.card.Claim, Epoch: l.card.ClaimEpoch,
				Action: SweepFailed, Why: "cannot read the store's clock to judge the claim", Err: nowErr})
		}
		return items, nil, nil
	}
	renew := live[:0:0]
	for _, l := range live {
		if !cfg.over(l.card, storeNow) {
			renew = append(renew, l)
			continue
		}
		items = append(items, SweepItem{Card: l.card.ID, Marker: l.card.Claim, Epoch: l.card.ClaimEpoch,
			Action: SweepDisowned, Lost: heartbeat.LostUnconfirmed, Owner: l.owner,
			Why: fmt.Sprintf("%s, but the claim may be over: its lease ends at %s, not %v after now (%s), so its holder may have passed its trusted deadline and given it up; not adopted, its lease left to run out",
				l.why, l.card.ClaimLeaseUntil.Format(time.RFC3339Nano), cfg.overAhead(), storeNow.Format(time.RFC3339Nano))})
	}
	live = renew
	if len(live) == 0 {
		return items, nil, nil
	}
	// One batched renewal for every adoptee, as a heartbeat tick would.
	holds := make([]board.Hold, len(live))
	for i, l := range live {
		holds[i] = board.Hold{Card: l.card.ID, Token: l.card.Token()}
	}
	results, err := cfg.Store.RenewClaims(ctx, board.RenewClaimsParams{Holds: holds, Lease: cfg.Lease})
	if err == nil && len(results) != len(holds) {
		err = fmt.Errorf("store answered %d results for %d holds", len(results), len(holds))
	}
	var adopted []Adoption
	for i, l := range live {
		item := SweepItem{Card: l.card.ID, Marker: l.card.Claim, Epoch: l.card.ClaimEpoch}
		switch {
		case err != nil:
			item.Action, item.Why, item.Err = SweepFailed, "renewal batch failed", err
		case results[i].Err != nil:
			// The claim changed since the listing (released, reclaimed):
			// nothing to adopt.
			item.Action, item.Why, item.Err = SweepKept, "claim changed before the renewal", results[i].Err
		default:
			item.Action, item.Why = SweepAdopted, "owner alive"
			if l.owner.PID == 0 {
				item.Why = "self-declared worker (keepalive mode): its pings decide"
			}
			adopted = append(adopted, Adoption{Hold: holds[i], Owner: l.owner, AttemptStart: attempt, Lease: cfg.Lease, ClaimedAt: l.card.ClaimedAt})
		}
		items = append(items, item)
	}
	return items, adopted, nil
}

// judge decides whether the claim's owner is alive, and for a live worker
// returns its identity as the socket will read it.
//
// The run the claim stamped records who started it: the owner's exact
// identity (start ticks and boot), or, for a run an older agent recorded,
// only its inexact start in milliseconds (see pidprobe.Compare). A process
// that landed on the owner's pid since carries another identity, so it is
// never taken for the owner, however soon after the owner's start it came.
func (cfg SweepConfig) judge(ctx context.Context, c board.Card, m board.Marker) (pidprobe.Liveness, pidprobe.Identity, string) {
	none := pidprobe.Identity{}
	if m.PID == cfg.SelfPID {
		return pidprobe.Dead, none, fmt.Sprintf("pid %d is this agent: the claim is an earlier incarnation's", m.PID)
	}
	// Recovery claims have no run of their own.
	var rec pidprobe.Identity
	if !m.Recovery && c.LastRunID != "" {
		r, err := cfg.Store.GetRun(ctx, board.GetRunParams{ID: c.LastRunID})
		switch {
		case err == nil && r.Owner == c.Claim && r.PID == m.PID:
			rec = pidprobe.Identity{BootID: r.BootID, StartTicks: r.PIDStartTicks, StartMillis: r.PIDStart}
		case err != nil && !errors.Is(err, board.ErrNotFound):
			return pidprobe.Unknown, none, fmt.Sprintf("cannot read run %s: %v", c.LastRunID, err)
		}
	}
	switch v := cfg.Prober.Probe(ctx, m.PID, rec); v {
	case pidprobe.Dead:
		if rec.Known() {
			return v, none, fmt.Sprintf("pid %d is gone or names another process (the owner %s)", m.PID, rec)
		}
		return v, none, fmt.Sprintf("pid %d is gone", m.PID)
	case pidprobe.Alive:
		cur, err := cfg.Prober.Identify(ctx, m.PID)
		if err != nil {
			if errors.Is(err, pidprobe.ErrNoProcess) {
				return pidprobe.Dead, none, fmt.Sprintf("pid %d exited during the sweep", m.PID)
			}
			return pidprobe.Unknown, none, fmt.Sprintf("pid %d: cannot read its identity: %v", m.PID, err)
		}
		// The identity adopted is read after the probe: it must still be
		// the owner's, or the pid changed hands in between. A legacy
		// record that stops matching may be a wall-clock step instead
		// (its milliseconds move with the clock): that proves nothing.
		switch pidprobe.Compare(rec, cur) {
		case pidprobe.MatchSame:
		case pidprobe.MatchOther:
			if rec.Exact() {
				return pidprobe.Dead, none, fmt.Sprintf("pid %d changed hands during the sweep (the owner %s, now %s)", m.PID, rec, cur)
			}
			fallthrough
		default:
			return pidprobe.Unknown, none, fmt.Sprintf("pid %d: its identity cannot be matched to the owner's (%s, now %s), conserving", m.PID, rec, cur)
		}
		return v, cur, fmt.Sprintf("pid %d alive", m.PID)
	default:
		return v, none, fmt.Sprintf("pid %d: liveness unknown, conserving", m.PID)
	}
}

// over reports whether a live worker's claim is already over at now: its
// stored lease, less two heartbeat margins, has ended.
//
// Every holder stops by its trusted deadline on its own — the agent
// declares a claim lost there, and the client library cancels by itself
// when it cannot hear the agent; the watchdog's orphan proof counts on both.
// The rule must judge a claim over as soon as its holder MAY have given it
// up, not only once it surely has. The holder's client learns its deadline
// from the watch stream's pings, which run every lease/3 and are not tied
// to the renewals, so it may still be counting from the renewal before the
// last one: its deadline is no earlier than the stored lease, less one
// renewal interval (lease/3), less the heartbeat margin the agent keeps on
// every deadline. A claim with less than that left (plus a second margin,
// below) is treated as given up. Adopting it would not bring the holder
// back: the agent would renew, for as long as the pid lives, a card nobody
// works on (and re-grant its epoch to the next claim of that process). The
// claim is disowned instead, and its stored lease left alone: "may have
// given it up" is the earliest moment, and the holder may equally be
// counting from the latest renewal and keep working until the stored lease
// less one margin. The watchdog's orphan grace counts from the stored
// lease, so it runs out only after every holder has stopped; expiring the
// lease now would let a reaper file the run PROCESS_ORPHANED and hand the
// card on while the holder may still work. The price: an agent must be back within about lease/2 of its last renewal
// (15 s for a 30 s lease) for its live workers' claims to be adopted.
//
// Whose clock. The lease was stamped by the store, so now is the store's
// own clock (Store.Now), never this agent's: on MongoDB the server's,
// read as a lower bound (the reported time less the round trip). It errs
// towards "not over yet" by up to twice that round trip: the server read
// its clock somewhere inside it. The stamp errs the same way:
// MongoDB measures a lease from the time its server reported to a hello
// sent after the renewal's attempt, or, from a reading reused, from the
// upper bound of its clock (DESIGN.md#twin-clock), up to one reading's
// round trip after the server's time at the attempt. The second margin
// absorbs both, together with the store round trip between a renewal's
// attempt and the store's stamp. The error directions:
//
//   - Judging a claim over too early disowns a live holder's claim. The
//     agent does not adopt it, so the holder hears no more pings and stops
//     at its own trusted deadline, having lost the claim: a loss every
//     holder must tolerate anyway (an operator can break any claim).
//   - Judging an over claim live adopts it, which is the defect this rule
//     exists to stop.
//
// Adopting nothing is the safe failure; renewing a given-up claim is not.
// A legacy claim (no lease) has no deadline and is never over by time.
func (cfg SweepConfig) over(c board.Card, now time.Time) bool {
	if c.ClaimLeaseUntil.IsZero() {
		return false
	}
	return !c.ClaimLeaseUntil.Add(-cfg.overAhead()).After(now)
}

// overAhead is how long before its stored lease ends a claim counts as
// over (see over): one renewal interval and two margins.
func (cfg SweepConfig) overAhead() time.Duration {
	return cfg.Lease/3 + 2*cfg.Margin
}

// bury releases a dead owner's legacy claim or expires its lease.
func (cfg SweepConfig) bury(ctx context.Context, c board.Card) (SweepAction, string, error) {
	if c.Legacy() {
		if err := cfg.Store.Release(ctx, board.ReleaseParams{Card: c.ID, Marker: c.Claim, Actor: cfg.Actor}); err != nil {
			return SweepFailed, "release of a legacy claim failed", err
		}
		return SweepReleased, "legacy claim (no lease) released", nil
	}
	return cfg.expire(ctx, c)
}

// expire sets a claim's lease to the store's now, fenced on its token.
func (cfg SweepConfig) expire(ctx context.Context, c board.Card) (SweepAction, string, error) {
	if err := cfg.Store.ExpireClaimOwned(ctx, board.OwnedParams{Card: c.ID, Token: c.Token()}); err != nil {
		if errors.Is(err, board.ErrClaimConflict) {
			return SweepKept, "claim changed before the expiry", err
		}
		return SweepFailed, "expiry failed", err
	}
	return SweepExpired, "lease expired at once", nil
}
