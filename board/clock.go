package board

import "time"

// Clock is the injected source of wall time for lease arithmetic. Stores and
// background loops take a Clock so tests can move time without sleeping.
// Local deadlines that never leave the process should use monotonic time
// (time.Since on a value obtained from the same clock) instead.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real clock, steady while the process runs.
type SystemClock struct{}

// processStart anchors SystemClock: the wall time when the process started,
// with its monotonic reading.
var processStart = time.Now()

// Now returns the wall time at the process's start advanced by the
// monotonic time elapsed since. A step of the host's wall clock while the
// process runs (an operator's date, an NTP step) therefore moves no lease
// the bbolt store stamps, no expiry the reaper judges and no deadline the
// heartbeat keeps; the next process reads the stepped clock afresh
// (DESIGN.md#clock-steps). The readings carry the monotonic clock too, so
// the differences between them are monotonic.
func (SystemClock) Now() time.Time { return processStart.Add(time.Since(processStart)) }
