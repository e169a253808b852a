package boardtest

import (
	"sync"
	"time"
)

// ManualClock is a board.Clock that only moves when a test moves it, so
// lease arithmetic can be checked exactly and expiry reached without
// sleeping. It is safe for concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock reading t0.
func NewManualClock(t0 time.Time) *ManualClock { return &ManualClock{now: t0} }

// Now returns the clock's current reading.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (backward when d is negative, which
// is how a test simulates a clock step).
func (c *ManualClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Set puts the clock at t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
