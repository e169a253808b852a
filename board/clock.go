package board

import "time"

// Clock is the injected source of wall time for lease arithmetic. Stores and
// background loops take a Clock so tests can move time without sleeping.
// Local deadlines that never leave the process should use monotonic time
// (time.Since on a value obtained from the same clock) instead.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real wall clock.
type SystemClock struct{}

// Now returns the current time.
func (SystemClock) Now() time.Time { return time.Now() }
