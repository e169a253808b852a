package board

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	t.Run("card over board over the defaults", func(t *testing.T) {
		b := DefaultBoard(true)
		if got := b.RetryFor(Card{}); got != DefaultRetryPolicy() {
			t.Errorf("no policy anywhere = %+v, want the defaults %+v", got, DefaultRetryPolicy())
		}
		b.Retry = RetryPolicy{MaxAttempts: 5, Backoff: time.Minute}
		got := b.RetryFor(Card{Retry: &RetryPolicy{MaxAttempts: 2}})
		if want := (RetryPolicy{MaxAttempts: 2, Backoff: time.Minute, BackoffMax: DefaultBackoffMax}); got != want {
			t.Errorf("RetryFor = %+v, want %+v", got, want)
		}
		// A backoff above the maximum it inherits raises the maximum.
		got = b.RetryFor(Card{Retry: &RetryPolicy{Backoff: time.Hour}})
		if got.Backoff != time.Hour || got.BackoffMax != time.Hour {
			t.Errorf("RetryFor = %+v, want backoff and backoff_max 1h", got)
		}
	})
	t.Run("the backoff doubles per attempt up to its maximum", func(t *testing.T) {
		p := RetryPolicy{Backoff: 10 * time.Second, BackoffMax: time.Minute}
		for attempts, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 4: time.Minute, 40: time.Minute} {
			if got := p.Delay(attempts); got != want {
				t.Errorf("Delay(%d) = %s, want %s", attempts, got, want)
			}
		}
	})
	t.Run("validation", func(t *testing.T) {
		for _, p := range []RetryPolicy{{MaxAttempts: -1}, {MaxAttempts: MaxMaxAttempts + 1}, {Backoff: -time.Second},
			{Backoff: time.Hour, BackoffMax: time.Minute}, {BackoffMax: MaxBackoff + 1}} {
			if err := p.Validate(); err == nil {
				t.Errorf("Validate(%+v) = nil, want a refusal", p)
			}
		}
		b := DefaultBoard(true)
		b.Retry = RetryPolicy{MaxAttempts: -3}
		if err := b.Validate(); err == nil {
			t.Errorf("a board with max_attempts -3 validates")
		}
	})
	t.Run("durations cross JSON in Go syntax", func(t *testing.T) {
		raw, err := json.Marshal(RetryPolicy{MaxAttempts: 3, Backoff: 30 * time.Second})
		if err != nil || string(raw) != `{"max_attempts":3,"backoff":"30s"}` {
			t.Fatalf("Marshal = %s, %v", raw, err)
		}
		var p RetryPolicy
		if err := json.Unmarshal([]byte(`{"backoff":"2m","backoff_max":"1h"}`), &p); err != nil || p != (RetryPolicy{Backoff: 2 * time.Minute, BackoffMax: time.Hour}) {
			t.Errorf("Unmarshal = %+v, %v", p, err)
		}
		if err := json.Unmarshal([]byte(`{"backoff":"soon"}`), &p); err == nil || !strings.Contains(err.Error(), "not a duration") {
			t.Errorf("Unmarshal of a bad duration = %v", err)
		}
	})
}

// TestRouteRunAndFinishFiling: the one routing of a run's end
// (DESIGN.md#retries) and where Finish files what it decides.
func TestRouteRunAndFinishFiling(t *testing.T) {
	t.Parallel()
	local, fleet := DefaultBoard(true), DefaultBoard(false)
	orphaned := Run{ID: "r", Status: RunFailed, FailureCode: FailureProcessOrphaned}
	crashed := Run{ID: "r", Status: RunFailed, FailureCode: "SIGNAL_9", RetryableFailure: true}
	exited := Run{ID: "r", Status: RunFailed, FailureCode: "EXIT_137"}
	resumable := Run{ID: "r", Status: RunFailedResumable}
	orphanedResumable := Run{ID: "r", Status: RunFailedResumable, FailureCode: FailureProcessOrphaned}
	two := &RetryPolicy{MaxAttempts: 2}
	tests := []struct {
		name     string
		b        Board
		card     Card
		run      Run
		resumes  bool
		cur      string
		from     string
		kind     RouteKind
		to       string
		reason   Reason
		filedTo  string
		filedFor Reason
	}{
		{"finished completes", local, Card{Attempts: 1}, Run{Status: RunFinished}, true, StateInProgress, StateReady,
			RouteComplete, StateDone, ReasonRunFinished, StateDone, ReasonRunFinished},
		{"an exit status fails, never retried", local, Card{Attempts: 1}, exited, true, StateInProgress, StateReady,
			RouteFail, StateFailed, ReasonRunFailed, StateFailed, ReasonRunFailed},
		{"orphaned, attempts left: a retry to the first pool state, even where the running column is a pool state", local, Card{Attempts: 1, Retry: two}, orphaned, true, StateInProgress, StateInProgress,
			RouteRetry, "", ReasonRetry, StateReady, ReasonRetry},
		{"a crash, attempts left, started out of backlog: back to backlog", local, Card{Attempts: 1, Retry: two}, crashed, true, StateInProgress, StateBacklog,
			RouteRetry, "", ReasonRetry, StateBacklog, ReasonRetry},
		{"a crash, attempts spent: failed", local, Card{Attempts: 2, Retry: two}, crashed, true, StateInProgress, StateReady,
			RouteSpent, StateFailed, ReasonRunFailed, StateFailed, ReasonRunFailed},
		{"resumable, local, attempts spent: still a return (a resume adds no attempt)", local, Card{Attempts: 2, Retry: two}, resumable, true, StateInProgress, StateReady,
			RouteReturn, "", ReasonWatchdog, "", ReasonNone},
		{"resumable, fleet, attempts left: back to the first pool state", fleet, Card{Attempts: 1, Retry: two}, resumable, false, StateInProgress, StateReady,
			RouteReturn, "", ReasonWatchdog, StateReady, ReasonNone},
		{"resumable, fleet, attempts spent: the ceiling state", fleet, Card{Attempts: 2, Retry: two}, resumable, false, StateInProgress, StateReady,
			RouteSpent, StateBlocked, ReasonWatchdog, StateBlocked, ReasonWatchdog},
		{"resumable but orphaned, local, attempts left: a retry, backed off", local, Card{Attempts: 1, Retry: two}, orphanedResumable, true, StateInProgress, StateReady,
			RouteRetry, "", ReasonRetry, StateReady, ReasonRetry},
		{"resumable but orphaned, local, attempts spent: the ceiling state (its owner keeps dying)", local, Card{Attempts: 2, Retry: two}, orphanedResumable, true, StateInProgress, StateReady,
			RouteSpent, StateBlocked, ReasonWatchdog, StateBlocked, ReasonWatchdog},
		{"a card an operator filed to a sink stays there", local, Card{Attempts: 1}, orphaned, true, StateCancelled, StateReady,
			RouteRetry, "", ReasonRetry, "", ReasonNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.b.RouteRun(tc.card, tc.run, tc.resumes)
			if r.Kind != tc.kind || r.To != tc.to || r.Reason != tc.reason {
				t.Errorf("RouteRun = %s → %q (%s), want %s → %q (%s)", r.Kind, r.To, r.Reason, tc.kind, tc.to, tc.reason)
			}
			if r.Kind == RouteRetry && r.Delay != DefaultBackoff {
				t.Errorf("the first retry's delay = %s, want %s", r.Delay, DefaultBackoff)
			}
			if r.Kind == RouteSpent && !strings.Contains(SpentStamp(tc.run, r, time.Time{}).Reason, "attempts spent (2 of 2)") {
				t.Errorf("spent stamp = %q, want it to name the attempts", SpentStamp(tc.run, r, time.Time{}).Reason)
			}
			to, reason := tc.b.FinishFiling(tc.cur, tc.from, r)
			if to != tc.filedTo || reason != tc.filedFor {
				t.Errorf("FinishFiling = %q (%s), want %q (%s)", to, reason, tc.filedTo, tc.filedFor)
			}
		})
	}
}
