package board

import (
	"encoding/json"
	"fmt"
	"time"
)

// The retry policy (DESIGN.md#retries). A card's attempts are the runs
// started for it since it was created, reopened or moved into a pool state
// by a person (Card.Attempts); a resumed run is the same run, so it is not
// a new attempt. Where a run's end sends the card is decided by one pure
// function, Board.RouteRun, which both the lifecycle's Finish and the
// watchdog's rows 9–11 call: the retry limit and the fleet's run ceiling
// are the same number, RetryPolicy.MaxAttempts.

// Defaults of the retry policy: a board that sets none, and every field a
// board or a card leaves zero, takes these. DefaultMaxAttempts is the run
// ceiling the fleet had before the policy existed.
const (
	DefaultMaxAttempts = 20
	DefaultBackoff     = 10 * time.Second
	DefaultBackoffMax  = 10 * time.Minute
	// MaxMaxAttempts bounds max_attempts: a policy is a limit, not a way to
	// retry for ever.
	MaxMaxAttempts = 10000
	// MaxBackoff bounds backoff and backoff_max.
	MaxBackoff = 7 * 24 * time.Hour
)

// RetryPolicy bounds a card's attempts and spaces its retries. A zero
// field means "not set here": a card's policy falls back to the board's,
// and the board's to the defaults (Board.RetryFor).
type RetryPolicy struct {
	// MaxAttempts is how many runs a card may start before a retryable or
	// (on a twin that cannot resume) resumable failure stops returning it
	// to the pool.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Backoff is how long the pool passes over a card after its first
	// retryable failure; it doubles with every further attempt, up to
	// BackoffMax.
	Backoff    time.Duration `json:"backoff,omitempty"`
	BackoffMax time.Duration `json:"backoff_max,omitempty"`
}

// retryPolicyJSON is RetryPolicy on the wire: durations in Go syntax
// ("10s"), as the configuration file writes them.
type retryPolicyJSON struct {
	MaxAttempts int    `json:"max_attempts,omitempty"`
	Backoff     string `json:"backoff,omitempty"`
	BackoffMax  string `json:"backoff_max,omitempty"`
}

// MarshalJSON writes the durations in Go syntax.
func (p RetryPolicy) MarshalJSON() ([]byte, error) {
	out := retryPolicyJSON{MaxAttempts: p.MaxAttempts}
	if p.Backoff != 0 {
		out.Backoff = p.Backoff.String()
	}
	if p.BackoffMax != 0 {
		out.BackoffMax = p.BackoffMax.String()
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads the durations in Go syntax. An absent duration is
// not set; an empty one is refused (it is not a duration).
func (p *RetryPolicy) UnmarshalJSON(b []byte) error {
	var in struct {
		MaxAttempts int     `json:"max_attempts"`
		Backoff     *string `json:"backoff"`
		BackoffMax  *string `json:"backoff_max"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	out := RetryPolicy{MaxAttempts: in.MaxAttempts}
	for _, f := range []struct {
		name string
		s    *string
		d    *time.Duration
	}{{"backoff", in.Backoff, &out.Backoff}, {"backoff_max", in.BackoffMax, &out.BackoffMax}} {
		if f.s == nil {
			continue
		}
		d, err := time.ParseDuration(*f.s)
		if err != nil {
			return Invalid("retry policy: %s %q is not a duration: use Go syntax such as 30s or 2m", f.name, *f.s)
		}
		*f.d = d
	}
	*p = out
	return nil
}

// IsZero reports a policy that sets nothing.
func (p RetryPolicy) IsZero() bool { return p == RetryPolicy{} }

// Validate refuses a negative or out-of-range field, and a backoff above
// its own maximum when both are set.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxAttempts < 0 || p.MaxAttempts > MaxMaxAttempts:
		return Invalid("retry policy: max_attempts %d is outside 1..%d (0: not set)", p.MaxAttempts, MaxMaxAttempts)
	case p.Backoff < 0 || p.Backoff > MaxBackoff:
		return Invalid("retry policy: backoff %s is outside 0..%s", p.Backoff, MaxBackoff)
	case p.BackoffMax < 0 || p.BackoffMax > MaxBackoff:
		return Invalid("retry policy: backoff_max %s is outside 0..%s", p.BackoffMax, MaxBackoff)
	case p.Backoff != 0 && p.BackoffMax != 0 && p.Backoff > p.BackoffMax:
		return Invalid("retry policy: backoff %s is above backoff_max %s", p.Backoff, p.BackoffMax)
	}
	return nil
}

// over is p with every field it leaves zero taken from base.
func (p RetryPolicy) over(base RetryPolicy) RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = base.MaxAttempts
	}
	if p.Backoff == 0 {
		p.Backoff = base.Backoff
	}
	if p.BackoffMax == 0 {
		p.BackoffMax = base.BackoffMax
	}
	return p
}

// DefaultRetryPolicy is the policy of a board that sets none.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: DefaultMaxAttempts, Backoff: DefaultBackoff, BackoffMax: DefaultBackoffMax}
}

// RetryFor is card c's effective policy: its own override, over the
// board's default, over DefaultRetryPolicy. A board backoff_max below the
// card's backoff is raised to it, so a card asking for a longer backoff
// gets it.
func (b Board) RetryFor(c Card) RetryPolicy {
	p := b.Retry.over(DefaultRetryPolicy())
	if c.Retry != nil {
		p = c.Retry.over(p)
	}
	if p.BackoffMax < p.Backoff {
		p.BackoffMax = p.Backoff
	}
	return p
}

// Delay is how long the pool passes over a card after attempts runs:
// Backoff, doubled for every attempt after the first, at most BackoffMax.
func (p RetryPolicy) Delay(attempts int) time.Duration {
	d := p.Backoff
	for i := 1; i < attempts && d < p.BackoffMax; i++ {
		d *= 2
	}
	return min(d, p.BackoffMax)
}

// Retryable reports whether a failed run's failure is worth another
// attempt: the oracle's PROCESS_ORPHANED (its owner is gone, the run was
// lost with its claim), or a failure its worker marked retryable (Finish
// with Retryable: `leasekeeper claim` does for a command killed by a
// signal nobody sent). An exit status is the command's own verdict and is
// not retried.
func (r Run) Retryable() bool {
	return r.Status == RunFailed && (r.RetryableFailure || r.FailureCode == FailureProcessOrphaned)
}

// RouteKind is what a run's end does with its card.
type RouteKind string

const (
	// RouteComplete files the card to the completion state (run_finished).
	RouteComplete RouteKind = "complete"
	// RouteFail files the card to failed (run_failed): a failure that is
	// not retried.
	RouteFail RouteKind = "fail"
	// RouteReturn returns the card to the pool with its run resumable.
	RouteReturn RouteKind = "return"
	// RouteRetry returns the card to the pool as a fresh attempt, passed
	// over for RunRoute.Delay.
	RouteRetry RouteKind = "retry"
	// RouteSpent files the card to RunRoute.To because its attempts are
	// spent: failed for a retryable failure, the ceiling state (blocked,
	// or failed on a board without one) for a resumable one.
	RouteSpent RouteKind = "spent"
	// RouteNone: the run has no verdict the routing knows (it is open,
	// cancelled, or unknown).
	RouteNone RouteKind = ""
)

// RunRoute is where a run's end sends its card (Board.RouteRun).
type RunRoute struct {
	Kind RouteKind
	// To is the state RouteComplete, RouteFail and RouteSpent file to;
	// RouteReturn and RouteRetry leave the column to the caller (Finish
	// files by where the run was started, the watchdog by its twin).
	To     string
	Reason Reason
	// Attempts is the runs the card has started, counting the one that
	// ended; MaxAttempts its policy's limit.
	Attempts, MaxAttempts int
	// Delay is how long the pool passes over the card (RouteRetry).
	Delay time.Duration
}

// Why is the sentence a spent route leaves on the card (its gave_up
// stamp) and in logs.
func (r RunRoute) Why() string {
	return fmt.Sprintf("attempts spent (%d of %d)", r.Attempts, r.MaxAttempts)
}

// RouteRun decides where the end of run sends card c (DESIGN.md#retries).
// resumes is the twin's: true where a Start resumes the recorded run (the
// local bbolt twin), so a return costs no attempt and is never refused;
// false where every Start is a fresh run (the fleet), so a return spends
// an attempt and is refused once they are spent.
//
//   - finished → the completion state, run_finished.
//   - failed and retryable (Run.Retryable) → back to the pool as a fresh
//     attempt while attempts remain, else failed, run_failed, "attempts
//     spent (N of N)".
//   - failed otherwise → failed, run_failed.
//   - failed_resumable → back to the pool, unless the twin cannot resume
//     and the attempts are spent: then the ceiling state (blocked, or
//     failed on a board without one), machine provenance.
func (b Board) RouteRun(c Card, run Run, resumes bool) RunRoute {
	p := b.RetryFor(c)
	out := RunRoute{Attempts: max(c.Attempts, 1), MaxAttempts: p.MaxAttempts}
	left := out.Attempts < out.MaxAttempts
	switch run.Status {
	case RunFinished:
		out.Kind, out.To, out.Reason = RouteComplete, b.Completion(), ReasonRunFinished
	case RunFailed:
		switch {
		case !run.Retryable():
			out.Kind, out.To, out.Reason = RouteFail, StateFailed, ReasonRunFailed
		case left:
			out.Kind, out.Reason, out.Delay = RouteRetry, ReasonRetry, p.Delay(out.Attempts)
		default:
			out.Kind, out.To, out.Reason = RouteSpent, StateFailed, ReasonRunFailed
		}
	case RunFailedResumable:
		switch {
		case OrphanedResumable(run) && left:
			// Its owner died with it: an attempt, backed off like any
			// retry, though the next claim may resume its checkpoint.
			out.Kind, out.Reason, out.Delay = RouteRetry, ReasonRetry, p.Delay(out.Attempts)
		case OrphanedResumable(run):
			out.Kind, out.To, out.Reason = RouteSpent, b.CeilingState(), ReasonWatchdog
		case resumes || left:
			out.Kind, out.Reason = RouteReturn, ReasonWatchdog
		default:
			out.Kind, out.To, out.Reason = RouteSpent, b.CeilingState(), ReasonWatchdog
		}
	}
	return out
}

// OrphanedResumable reports a resumable run whose owner died with it: the
// oracle promoted it (PROCESS_ORPHANED) because it had a checkpoint to
// resume. Unlike a resumable run its worker handed back, it counts as an
// attempt, on its return and on its resume, so a job that keeps killing its
// owner spends its attempts (DESIGN.md#retries).
func OrphanedResumable(r Run) bool {
	return r.Status == RunFailedResumable && r.FailureCode == FailureProcessOrphaned
}

// CeilingState is where a card whose resumable run spent its attempts is
// filed: blocked, or failed on a board that has no blocked column.
func (b Board) CeilingState() string {
	if b.Has(StateBlocked) {
		return StateBlocked
	}
	return StateFailed
}

// SpentStamp is the gave_up stamp a spent route leaves on card c, naming
// the attempts, for the Needs-attention lane a person reads.
func SpentStamp(run Run, r RunRoute, now time.Time) *GaveUp {
	return &GaveUp{
		RunID:    run.ID,
		State:    r.To,
		Attempts: r.Attempts,
		Reason: fmt.Sprintf("%s: run %s ended %s (%s) and the retry policy allows no more; reopen the card for a fresh set of attempts",
			r.Why(), run.ID, run.Status, run.FailureCode),
		At: now,
	}
}

// RetryRefusal refuses a claim by id of a card still backing off at now
// (its RetryAt is later): ErrTransitionRejected naming the time. ClaimNext
// and a Start of the next card pass such a card over instead.
func RetryRefusal(c Card, now time.Time) error {
	if c.BackingOff(now) {
		return fmt.Errorf("card %q is backing off after attempt %d until %s (retry policy): claim it then, or reopen it: %w",
			c.ID, c.Attempts, c.RetryAt.UTC().Format(time.RFC3339Nano), ErrTransitionRejected)
	}
	return nil
}

// BackingOff reports whether the pool passes c over at now: its RetryAt is
// later than now, but not beyond now plus MaxBackoff. No policy stamps a
// backoff longer than MaxBackoff, so a RetryAt further ahead was stamped by
// a clock that has since stepped back, and passing the card over until the
// clock catches up would strand it (DESIGN.md#never-stranded).
func (c Card) BackingOff(now time.Time) bool {
	return !c.RetryAt.IsZero() && c.RetryAt.After(now) && !c.RetryAt.After(now.Add(MaxBackoff))
}

// String renders the policy compactly for logs and `card show`.
func (p RetryPolicy) String() string {
	return fmt.Sprintf("{max_attempts %d, backoff %s, backoff_max %s}", p.MaxAttempts, p.Backoff, p.BackoffMax)
}
