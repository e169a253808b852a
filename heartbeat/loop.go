package heartbeat

import (
	"context"
	"sync"
	"time"
)

// Loop renews the claims an agent holds. Create it with New, feed it with
// Add / Remove / Ping, run it with Start / Stop, or drive it one tick at a
// time with RunOnce.
type Loop struct {
	cfg Config

	// tickMu serialises ticks: the background loop and a caller's RunOnce
	// never renew concurrently, so each tick sees the previous one's result.
	tickMu sync.Mutex

	mu        sync.Mutex // guards everything below until runMu
	claims    map[string]*entry
	disowned  map[string]Lost // see Disowned; never a card in claims
	keys      map[string]*keepalive
	lastMode  Mode
	lastLease time.Duration // the last valid Lease(), used if a reload returns nonsense

	runMu  sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}

	wake chan struct{} // Add nudges the running loop to re-plan its wait
	// wakeAt is the earliest trusted deadline among the claims added since
	// the running loop last re-planned its wait; zero for none. Guarded by
	// mu.
	wakeAt time.Time
	// planned is when the running loop's timer fires, on this process's
	// monotonic clock; zero while no loop runs. An Add whose deadline
	// comes after it leaves the loop asleep: the planned tick covers it.
	// Guarded by mu.
	planned time.Time
}

// New validates cfg and returns a stopped Loop.
func New(cfg Config) (*Loop, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Loop{
		cfg:       cfg,
		claims:    map[string]*entry{},
		disowned:  map[string]Lost{},
		keys:      map[string]*keepalive{},
		lastMode:  cfg.Mode(),
		lastLease: cfg.Lease(),
		wake:      make(chan struct{}, 1),
	}, nil
}

// Start runs the loop in the background until Stop or until ctx ends. The
// first tick runs at once, the next ones every Lease()/3 (re-read after
// every tick) or sooner when a trusted deadline falls before that. Start on
// a running loop does nothing; Start after Stop starts it again.
func (l *Loop) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.runMu.Lock()
	defer l.runMu.Unlock()
	if l.done != nil {
		select {
		case <-l.done: // ended on its own (ctx done): start afresh
		default:
			return nil
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	go l.run(runCtx, done)
	return nil
}

// Stop ends the background loop and waits for its tick in flight, if any,
// to finish. Stop on a stopped loop does nothing. The tracked claims stay:
// a later Start (or RunOnce) carries on with them.
func (l *Loop) Stop() {
	l.runMu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.runMu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (l *Loop) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	defer l.plan(time.Time{})
	// due is when the timer will fire, on this process's monotonic clock.
	// It only schedules the timer; no lease arithmetic uses it.
	due := time.Now()
	l.plan(due)
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			res := l.RunOnce(ctx)
			timer.Reset(res.Next)
			due = time.Now().Add(res.Next)
			l.plan(due)
		case <-l.wake:
			// A claim was added. Its trusted deadline may come before the
			// scheduled tick, and the loss must be declared on time.
			d, ok := l.untilAddedDeadline()
			if ok && d < time.Until(due) {
				if !timer.Stop() {
					select {
					case <-timer.C:
					default:
					}
				}
				timer.Reset(max(d, 0))
				due = time.Now().Add(max(d, 0))
				l.plan(due)
			}
		}
	}
}

// plan records when the running loop's timer fires (zero: no loop runs).
func (l *Loop) plan(due time.Time) {
	l.mu.Lock()
	l.planned = due
	l.mu.Unlock()
}

// wakeNeededLocked reports whether a claim trusted for d from now must
// wake the running loop: its deadline comes before the planned tick, or no
// tick is planned ahead (the loop is ticking now, or its timer is due), so
// the plan being made may not cover it. Most claims are trusted for about
// a lease and the loop ticks every third of one, so a grant seldom wakes
// it. l.mu is held.
func (l *Loop) wakeNeededLocked(d time.Duration) bool {
	if l.planned.IsZero() {
		return false // no loop runs; Start's first tick covers every claim
	}
	left := time.Until(l.planned)
	return left <= 0 || d < left
}

// untilAddedDeadline returns how long until the earliest trusted deadline
// among the claims added since the last call, and forgets them. Only those
// can move the wait earlier: the wait already planned covers every claim
// known when it was planned (a tick plans for all of them, a wake for the
// ones added before it), and nothing but an Add brings a tracked deadline
// closer. It is O(1) where a scan of every tracked claim would make each
// claim the socket API grants cost O(claims held).
func (l *Loop) untilAddedDeadline() (time.Duration, bool) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	at := l.wakeAt
	l.wakeAt = time.Time{}
	l.mu.Unlock()
	if at.IsZero() {
		return 0, false
	}
	return at.Sub(now), true
}

func (l *Loop) earliestLocked(now time.Time) (time.Duration, bool) {
	var earliest time.Time
	for _, e := range l.claims {
		if earliest.IsZero() || e.TrustedUntil.Before(earliest) {
			earliest = e.TrustedUntil
		}
	}
	if earliest.IsZero() {
		return 0, false
	}
	return earliest.Sub(now), true
}

// currentLease reads Lease(), falling back to the last valid value when a
// reload returned a non-positive one (the config reloader validates too;
// this keeps a bad value from stopping every renewal).
func (l *Loop) currentLease() time.Duration {
	lease := l.cfg.Lease()
	l.mu.Lock()
	defer l.mu.Unlock()
	if lease <= 0 {
		l.cfg.Logger.Warn("heartbeat: ignoring non-positive lease from reload", "lease", lease, "using", l.lastLease)
		return l.lastLease
	}
	l.lastLease = lease
	return lease
}

// margin is the configured margin, or the default for lease; it is capped
// below half the lease so a hot-reloaded short lease still leaves time for
// renewals.
func (l *Loop) margin(lease time.Duration) time.Duration {
	m := l.cfg.Margin
	if m == 0 {
		m = DefaultMargin(lease)
	}
	if m >= lease/2 {
		m = DefaultMargin(lease)
	}
	return m
}
