package watchdog

import "time"

// The store's clock must move in step with this agent's own before the
// watchdog decides anything by it (DESIGN.md#clock-steps).
//
// Every lease the watchdog judges was stamped by the store's clock, and a
// holder stops by a deadline it keeps on its own monotonic clock. While
// both run at one rate, "the lease ended longer ago than the grace" proves
// the holder has stopped. A forward step of the store's clock (the host's
// clock on bbolt, the server's on MongoDB) makes every lease look older
// than it is: judged by it, a pass would transfer live holders' cards and
// prove their runs orphaned at once. So the reaper watches the store's
// clock against its own monotonic clock, and decides only once it has
// seen the two advance together for one lease and the orphan grace: every
// lease stamped before a step has by then been renewed on the new clock,
// or its holder has passed its deadline (its last confirmed renewal was
// before the step, and it trusts the claim for less than a lease after
// that). A reaper that has just started has watched nothing, and waits as
// long: a step may have happened while it was down.

// steadiness is the reaper's record of the store's clock against its own
// (guarded by Reaper.passMu).
type steadiness struct {
	seen      bool
	lastStore time.Time
	// lastFrom and lastTo bracket, on this agent's monotonic clock, the
	// instant the last store reading stands for.
	lastFrom, lastTo time.Time
	since            time.Time // monotonic: the two clocks agree since then
}

// stepTolerance is how far the store's clock may move from this agent's
// between two passes without counting as a step: rate drift. It is the
// heartbeat's margin rule (a tenth of the lease, at most 2 s): a smaller
// step is absorbed by the margin every holder keeps.
func stepTolerance(lease time.Duration) time.Duration { return min(lease/10, 2*time.Second) }

// observe records the store's time storeNow, read by a call that began at
// before and returned at after on this agent's monotonic clock, and returns
// how much longer the reaper must watch before it trusts the store's clock
// (zero: trusted now), and the step it saw, if any.
//
// The store's reading stands for an instant within the call, or up to one
// call earlier (the MongoDB twin takes the round trip off the server's
// time, to read a lower bound): a slow call widens what the reading could
// mean instead of passing for a step. A step is counted only when every
// pairing of the two brackets puts the clocks further apart than the
// tolerance.
func (s *steadiness) observe(storeNow, before, after time.Time, lease, grace time.Duration) (wait, step time.Duration) {
	from, to := before.Add(-after.Sub(before)), after
	if !s.seen {
		s.seen, s.since = true, after
	} else {
		moved := storeNow.Sub(s.lastStore)
		least, most := moved-to.Sub(s.lastFrom), moved-from.Sub(s.lastTo)
		switch tol := stepTolerance(lease); {
		case least > tol:
			s.since, step = after, least
		case most < -tol:
			s.since, step = after, most
		}
	}
	s.lastStore, s.lastFrom, s.lastTo = storeNow, from, to
	return max(lease+grace-after.Sub(s.since), 0), step
}
