package main

import (
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

// TestE2EACrashIsRetriedUntilAttemptsAreSpent: a command killed by a signal
// nobody sent (here it kills itself with SIGKILL) crashed; that is not its
// verdict, so under the card's retry policy the card returns to the pool
// for another attempt, and once max_attempts runs are spent it is filed
// failed saying so (DESIGN.md#retries).
func TestE2EACrashIsRetriedUntilAttemptsAreSpent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "crash", "--max-attempts", "2", "--backoff", "50ms")

	_, stderr, code := e.Run("claim", "crash", "--", "sh", "-c", "kill -9 $$")
	if code != 128+9 {
		t.Fatalf("claim exited %d, want 137 (CMD killed by SIGKILL); stderr:\n%s", code, stderr)
	}
	c := e.Card("crash")
	if c.State != board.StateReady || c.Claimed() || c.Attempts != 1 || c.RetryAt.IsZero() || c.GaveUp != nil {
		t.Fatalf("card after the first crash: state %s claimed %v attempts %d retry_at %s gave_up %+v; want free in ready, 1 attempt, backing off",
			c.State, c.Claimed(), c.Attempts, c.RetryAt, c.GaveUp)
	}
	first := e.GetRun(c.LastRunID)
	if first.Status != board.RunFailed || first.FailureCode != "SIGNAL_9" || !first.RetryableFailure {
		t.Errorf("first run %+v, want failed, SIGNAL_9, retryable", first)
	}
	if !strings.Contains(stderr, "a crash") {
		t.Errorf("claim did not say the card returns for another attempt; stderr:\n%s", stderr)
	}

	// The second attempt, once the backoff has passed (a claim by id
	// before it is refused), crashes too: the attempts are spent.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, stderr, code = e.Run("claim", "crash", "--", "sh", "-c", "kill -9 $$")
		if code != claimExitError || !strings.Contains(stderr, "backing off") || time.Now().After(deadline) {
			break
		}
	}
	if code != 128+9 {
		t.Fatalf("second claim exited %d, want 137; stderr:\n%s", code, stderr)
	}
	c = e.Card("crash")
	if c.State != board.StateFailed || c.Claimed() || c.Attempts != 2 || c.GaveUp == nil || !strings.Contains(c.GaveUp.Reason, "attempts spent (2 of 2)") {
		t.Fatalf("card after the second crash: state %s claimed %v attempts %d gave_up %+v; want failed, saying its attempts spent (2 of 2)",
			c.State, c.Claimed(), c.Attempts, c.GaveUp)
	}
	if !strings.Contains(stderr, "attempts spent (2 of 2)") {
		t.Errorf("claim did not say the attempts are spent; stderr:\n%s", stderr)
	}
	if out := e.MustRun("card", "show", "crash"); !strings.Contains(out, "2 of 2") {
		t.Errorf("card show does not show the attempts against the policy:\n%s", out)
	}

	// An exit status, 137 included, is the command's own verdict: not retried.
	e.MustRun("card", "create", "exits", "--max-attempts", "2")
	if _, stderr, code := e.Run("claim", "exits", "--", "sh", "-c", "exit 137"); code != 137 {
		t.Fatalf("claim exited %d, want 137; stderr:\n%s", code, stderr)
	}
	if c := e.Card("exits"); c.State != board.StateFailed || c.GaveUp != nil {
		t.Errorf("card after exit 137: state %s gave_up %+v; want failed, no retry", c.State, c.GaveUp)
	}
}

// TestE2EBoardRetrySetsTheBoardsDefault: `board retry` changes the stored
// board's default retry policy, which a card without its own follows
// (DESIGN.md#retries), and `board show` prints it.
func TestE2EBoardRetrySetsTheBoardsDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	if out := e.MustRun("board", "show"); !strings.Contains(out, "max_attempts 20, backoff 10s") {
		t.Errorf("board show before: want the defaults\n%s", out)
	}
	if out := e.MustRun("board", "retry", "--max-attempts", "1", "--backoff", "1s"); !strings.Contains(out, "max_attempts 1, backoff 1s") {
		t.Errorf("board retry printed:\n%s", out)
	}
	if out := e.MustRun("board", "show"); !strings.Contains(out, "max_attempts 1, backoff 1s, backoff_max 10m0s") {
		t.Errorf("board show after: want the new policy\n%s", out)
	}
	if _, stderr, code := e.Run("board", "retry", "--max-attempts", "-2"); code == 0 {
		t.Errorf("board retry --max-attempts -2 succeeded; stderr:\n%s", stderr)
	}
	// A card without its own policy follows the board's: one crash spends it.
	e.MustRun("card", "create", "once")
	if _, stderr, code := e.Run("claim", "once", "--", "sh", "-c", "kill -9 $$"); code != 137 {
		t.Fatalf("claim exited %d, want 137; stderr:\n%s", code, stderr)
	}
	if c := e.Card("once"); c.State != board.StateFailed || c.GaveUp == nil || !strings.Contains(c.GaveUp.Reason, "attempts spent (1 of 1)") {
		t.Errorf("card after one crash under the board's max_attempts 1: %s gave_up %+v", c.State, c.GaveUp)
	}
}

// TestE2EACrashUnderResumableIsAnAttempt: `claim --resumable` restarts a
// failed CMD, but a CMD killed by a signal nobody sent crashed all the
// same (DESIGN.md#retries): its failure is retryable — an attempt, backing
// off — not a resumable return, which on the local twin is the same
// attempt and no backoff, so a command crashing under --resumable would
// be claimed and crash again for ever.
func TestE2EACrashUnderResumableIsAnAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "crash", "--max-attempts", "1")
	_, stderr, code := e.Run("claim", "--resumable", "crash", "--", "sh", "-c", "kill -9 $$")
	if code != 128+9 {
		t.Fatalf("claim exited %d, want 137 (CMD killed by SIGKILL); stderr:\n%s", code, stderr)
	}
	c := e.Card("crash")
	if c.State != board.StateFailed || c.Claimed() || c.Attempts != 1 || c.GaveUp == nil || !strings.Contains(c.GaveUp.Reason, "attempts spent (1 of 1)") {
		t.Fatalf("card after a crash under --resumable: state %s claimed %v attempts %d retry_at %s gave_up %+v; want failed, its attempts spent (1 of 1)",
			c.State, c.Claimed(), c.Attempts, c.RetryAt, c.GaveUp)
	}
}
