package mongostore

import (
	"testing"
	"time"
)

// TestALeaseFromAReusedReadingOutlastsItsHoldersDeadline: the holder of a
// renewed claim trusts it until the renewal's attempt + lease − margin
// (DESIGN.md#trusted-deadline; the margin is at most 2s), and the reaper
// may act once the stamped lease has passed on the server's clock. So the
// lease stamped from a reading, fresh or reused for a renewal, must end no
// earlier than the server's time at that attempt + lease − margin, whatever
// the reading's round trip, or a run-less card is handed on while its
// holder may still work (DESIGN.md#keepalive: a silent holder's lease is
// left to run out on its own). And it gains at most the reading's
// uncertainty: a round trip and the drift (DESIGN.md#twin-clock).
//
// Worst case for the first bound: the reported time is the server's as the
// hello left (the earliest it can be), so the server is a round trip further
// on when the reply arrives; the renewal starts when the reading is age old.
func TestALeaseFromAReusedReadingOutlastsItsHoldersDeadline(t *testing.T) {
	const (
		lease  = 30 * time.Second
		margin = 2 * time.Second // heartbeat.DefaultMargin(30s)
	)
	for _, rtt := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 500 * time.Millisecond, 1500 * time.Millisecond, 5 * time.Second} {
		for _, age := range []time.Duration{0, 900 * time.Millisecond} { // under clockReuse: the reading is reused
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // the server's time as the hello left
			r := clockReading{now: start, rtt: rtt}
			attempt := start.Add(rtt + age) // the server's time when the renewal starts, at the latest
			got := r.aged(age).leaseUntil(lease)
			if deadline := attempt.Add(lease - margin); got.Before(deadline) {
				t.Errorf("round trip %v, age %v: lease stamped until %v, %v before its holder's deadline %v",
					rtt, age, got.Format(time.StampMilli), deadline.Sub(got), deadline.Format(time.StampMilli))
			}
			// The reported time may also be the server's as the reply
			// left: then the attempt is at start + age, and the lease may
			// run past it by the round trip and the drift, no more.
			drift := age/driftDivisor + time.Millisecond
			if most := start.Add(age + lease + rtt + drift); got.After(most) {
				t.Errorf("round trip %v, age %v: lease stamped until %v, %v past the server's time + lease + the reading's uncertainty",
					rtt, age, got.Format(time.StampMilli), got.Sub(most))
			}
		}
	}
}
