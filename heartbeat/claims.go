package heartbeat

import (
	"fmt"
	"sort"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// Owner is the worker a claim is renewed for.
type Owner struct {
	// PID and Start name the worker process (pid mode): Start is its exact
	// identity, read when the claim was granted or adopted, so a process
	// that later lands on the pid is never taken for it. PID <= 0 is an
	// owner the agent cannot see; a zero Start is an unknown one.
	PID   int               `json:"pid,omitempty"`
	Start pidprobe.Identity `json:"start"`
	// KeepaliveID is the key the owner's client pings with (keepalive
	// mode). Several claims may share one key.
	KeepaliveID string `json:"keepalive_id,omitempty"`
}

// LostReason says why the loop stopped renewing a claim.
type LostReason string

const (
	// LostSuperseded: the store refused the renewal because another token
	// now holds the card.
	LostSuperseded LostReason = "superseded"
	// LostReleased: the store refused the renewal because the card is free
	// (an operator's force-release): nobody holds it, but we no longer do.
	LostReleased LostReason = "released"
	// LostUnconfirmed: no renewal was confirmed before the trusted deadline
	// (store unreachable, outcome unknown). The store may still show the
	// lease for a moment, but the agent can no longer vouch for it.
	LostUnconfirmed LostReason = "unconfirmed"
	// LostOwnerDead: the owner's pid is provably dead (or reused); its
	// lease was expired at once.
	LostOwnerDead LostReason = "owner_dead"
	// LostKeepaliveMissed: the owner's client stopped pinging (keepalive
	// mode); its lease is no longer renewed and runs out on its own, never
	// before the deadline the owner was last given.
	LostKeepaliveMissed LostReason = "keepalive_missed"
)

// Lost reports a claim the loop stopped renewing.
type Lost struct {
	Card   string     `json:"card"`
	Epoch  int64      `json:"epoch"`
	Marker string     `json:"marker"`
	Reason LostReason `json:"reason"`
	Owner  Owner      `json:"owner"`
}

// Claim is a snapshot of one tracked claim.
type Claim struct {
	Hold  board.Hold `json:"hold"`
	Owner Owner      `json:"owner"`
	// ConfirmedAt is the start of the attempt that last confirmed the lease
	// (the claim attempt itself until the first renewal lands).
	ConfirmedAt time.Time `json:"confirmed_at"`
	// TrustedUntil is ConfirmedAt + lease − margin: past it, with no newer
	// confirmation, the claim is lost.
	TrustedUntil time.Time `json:"trusted_until"`
	// LastRenewed is when the last confirmed renewal returned; zero until
	// one has.
	LastRenewed time.Time `json:"last_renewed,omitzero"`
	// LeaseUntil is the lease end the store reported (the store's clock);
	// zero until the first renewal.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// Failures counts renewal attempts since the last confirmation.
	Failures int `json:"failures"`
}

// entry is the loop's record of one claim. A tick holds *entry values
// across the store call, so every write-back checks that the map still
// points at the same entry: a Remove or a re-Add during the call must win
// over a stale result.
type entry struct {
	Claim
	// closing counts the calls in flight that end this claim in the store
	// (its holder's Finish or release, BeginClose): a renewal that finds
	// the card free meanwhile found that call's own write, not a loss.
	closing int
	// closedByTick: a tick dropped the claim as closed while a close was
	// in flight; if that close then fails, the claim was lost after all.
	closedByTick bool
}

// Add starts renewing h on behalf of o. attemptStart is the clock reading
// taken just BEFORE the Claim (or renewal) call that granted h, and lease
// the lease that call asked for (zero: the current Lease()); together they
// give the first trusted deadline. Adding a card already tracked under the
// same token only moves its confirmation forward; under another token it
// replaces the old record (the old token is gone from the store anyway).
// The token the loop gave up on for the card (Disowned) is refused
// (ErrDisownedToken).
func (l *Loop) Add(h board.Hold, o Owner, attemptStart time.Time, lease time.Duration) error {
	if h.Card == "" {
		return fmt.Errorf("%w: no card", ErrInvalidClaim)
	}
	if err := h.Token.Validate(); err != nil {
		return fmt.Errorf("%w: card %q: %w", ErrInvalidClaim, h.Card, err)
	}
	if attemptStart.IsZero() {
		return fmt.Errorf("%w: card %q: zero attempt start", ErrInvalidClaim, h.Card)
	}
	if lease <= 0 {
		lease = l.currentLease()
	}
	trusted := attemptStart.Add(lease - l.margin(lease))
	now := l.cfg.Clock.Now()

	l.mu.Lock()
	if d, ok := l.disowned[h.Card]; ok && d.Marker == h.Token.Marker && d.Epoch == h.Token.Epoch {
		// The lost token itself, handed back by the store's same-marker
		// Claim to a re-claim that raced the loss: its holder was told it
		// lost it, and the store may mark it disowned. Never vouched for
		// again (DESIGN.md#keepalive, DESIGN.md#shutdown-keeps-fences).
		l.mu.Unlock()
		return fmt.Errorf("%w: card %q epoch %d", ErrDisownedToken, h.Card, h.Token.Epoch)
	}
	delete(l.disowned, h.Card) // the agent vouches for this card's claim again
	old, ok := l.claims[h.Card]
	if ok && old.Hold.Token == h.Token {
		if attemptStart.After(old.ConfirmedAt) {
			old.ConfirmedAt = attemptStart
		}
		if trusted.After(old.TrustedUntil) {
			old.TrustedUntil = trusted
		}
		l.swapKey(old.Owner.KeepaliveID, o.KeepaliveID, now)
		old.Owner = o
	} else {
		if ok {
			l.dropKey(old.Owner.KeepaliveID)
		}
		l.claims[h.Card] = &entry{Claim: Claim{Hold: h, Owner: o, ConfirmedAt: attemptStart, TrustedUntil: trusted}}
		l.addKey(o.KeepaliveID, now)
	}
	// The new deadline may come before the loop's next scheduled tick;
	// only then is the loop woken to re-plan its wait.
	wake := l.wakeNeededLocked(trusted.Sub(now))
	if wake && (l.wakeAt.IsZero() || trusted.Before(l.wakeAt)) {
		l.wakeAt = trusted
	}
	l.mu.Unlock()

	if wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// Remove stops renewing card without reporting a loss (the worker released
// it). It reports whether the card was tracked.
func (l *Loop) Remove(card string) bool {
	return l.remove(card, nil)
}

// BeginClose marks the claim tracked on card, if it is exactly tok, as
// being ended by its holder's own call (Finish, release) until end runs. A
// tick whose renewal meanwhile finds the card free drops the claim without
// declaring it lost: the free card is that call's write, and the call
// answers its caller itself (DESIGN.md#claim-lost). end reports whether the
// call landed: when it did not, a claim a tick dropped meanwhile was freed
// by someone else, and is reported lost (released) then. Taken by another
// holder is a loss either way.
func (l *Loop) BeginClose(card string, tok board.ClaimToken) (end func(landed bool)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.claims[card]
	if !ok || e.Hold.Token != tok {
		return func(bool) {}
	}
	e.closing++
	return func(landed bool) {
		l.mu.Lock()
		e.closing--
		report := !landed && e.closedByTick
		if report {
			e.closedByTick = false // one report, however many closes failed
		}
		l.mu.Unlock()
		if report && l.cfg.OnLost != nil {
			l.cfg.OnLost(lostOf(e, LostReleased))
		}
	}
}

// RemoveHold is Remove only while the claim tracked on card is exactly tok.
// Whoever releases a claim it read (its holder, or an operator) must use
// it: between that read and the removal another holder may have claimed
// the card afresh, and removing its entry would stop its renewals.
func (l *Loop) RemoveHold(card string, tok board.ClaimToken) bool {
	return l.remove(card, &tok)
}

func (l *Loop) remove(card string, tok *board.ClaimToken) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.claims[card]
	if tok != nil && (!ok || e.Hold.Token != *tok) {
		if d, ok := l.disowned[card]; ok && d.Marker == tok.Marker && d.Epoch == tok.Epoch {
			delete(l.disowned, card)
		}
		return false
	}
	delete(l.disowned, card)
	if !ok {
		return false
	}
	delete(l.claims, card)
	l.dropKey(e.Owner.KeepaliveID)
	return true
}

// Disowned returns the claim on card the loop stopped vouching for while the
// store may still name its token, if any: the last claim on the card it
// declared lost because no renewal was confirmed in time, its owner died or
// stopped pinging (not because someone else took it or an operator freed
// it), or one handed to Disown. It is forgotten once the card is tracked
// again (Add) or released (Remove).
//
// The store's Claim is idempotent for one marker: asked by the same worker
// again, it hands that very token back, lease refreshed. The agent must not
// grant it — the holder was told it lost the claim, or gave it up at its
// trusted deadline, and two holds under one token defeat the fence (the
// socket API re-acquires the card instead; see socketapi's claim path).
// One entry per card at most, so the record is bounded by the board.
func (l *Loop) Disowned(card string) (Lost, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lo, ok := l.disowned[card]
	return lo, ok
}

// Disown records a claim the agent does not vouch for although the store
// may still name it — the boot sweep's claims that it judged over and did
// not adopt — so that Disowned reports it. A card the loop tracks is left
// alone: the tracked claim is the one the agent vouches for.
func (l *Loop) Disown(lo Lost) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, tracked := l.claims[lo.Card]; tracked {
		return
	}
	l.disowned[lo.Card] = lo
}

// disownLocked records a loss that may leave the store naming the lost
// token. Callers hold l.mu and have just removed the card from claims.
func (l *Loop) disownLocked(lo Lost) {
	switch lo.Reason {
	case LostUnconfirmed, LostOwnerDead, LostKeepaliveMissed:
		l.disowned[lo.Card] = lo
	}
}

// Ping records a keepalive from the client that owns key. It reports
// whether any tracked claim uses key (false tells the client it holds
// nothing here any more).
func (l *Loop) Ping(key string) bool {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k, ok := l.keys[key]
	if !ok || key == "" {
		return false
	}
	if now.After(k.lastPing) {
		k.lastPing = now
	}
	return true
}

// Held returns a snapshot of every tracked claim, ordered by card.
func (l *Loop) Held() []Claim {
	l.mu.Lock()
	out := make([]Claim, 0, len(l.claims))
	for _, e := range l.claims {
		out = append(out, e.Claim)
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Hold.Card < out[j].Hold.Card })
	return out
}

// Lookup returns the tracked claim on card, if any: one map read under the
// lock, where Held copies and sorts every tracked claim. The socket API
// checks the caller's claim on every owner request, so that check must not
// grow with the number of claims the agent holds.
func (l *Loop) Lookup(card string) (Claim, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.claims[card]
	if !ok {
		return Claim{}, false
	}
	return e.Claim, true
}

// keepalive tracks one ping key: how many claims use it and when it was
// last heard.
type keepalive struct {
	users    int
	lastPing time.Time
}

// addKey counts a claim under key. Being granted a claim is itself a sign
// of life from the owner, so it counts as a ping. Callers hold l.mu.
func (l *Loop) addKey(key string, now time.Time) {
	if key == "" {
		return
	}
	k, ok := l.keys[key]
	if !ok {
		k = &keepalive{}
		l.keys[key] = k
	}
	k.users++
	if now.After(k.lastPing) {
		k.lastPing = now
	}
}

// dropKey uncounts a claim under key. Callers hold l.mu.
func (l *Loop) dropKey(key string) {
	if key == "" {
		return
	}
	if k, ok := l.keys[key]; ok {
		k.users--
		if k.users <= 0 {
			delete(l.keys, key)
		}
	}
}

func (l *Loop) swapKey(oldKey, newKey string, now time.Time) {
	l.dropKey(oldKey)
	l.addKey(newKey, now)
}
