package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// Waiting from the command line (DESIGN.md#waiting): `claim --wait` and
// `card wait`. Both wait through the client, which the agent's event log
// wakes; neither polls.

// waitForever is --wait's value when no duration is given.
const waitForever = "forever"

// waitFlag is `claim --wait[=DURATION]`: unset (do not wait), forever, or
// a bound. A bare --wait followed by a duration as its own word (flock -w
// 10) is read by the claim command's argument check (waitDurationArg),
// since the flag parser leaves that word to the arguments.
type waitFlag struct {
	set bool
	d   time.Duration // 0 with set: forever
}

func (f *waitFlag) String() string {
	switch {
	case !f.set:
		return ""
	case f.d == 0:
		return waitForever
	}
	return f.d.String()
}

func (f *waitFlag) Set(v string) error {
	if v == waitForever {
		f.set, f.d = true, 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration (90s, 5m) or %q, got %q", waitForever, v)
	}
	f.set, f.d = true, d
	return nil
}

func (f *waitFlag) Type() string { return "duration" }

// waitDurationArg takes the first argument before -- as --wait's duration
// when --wait was given bare and the arguments hold one word more than the
// command wants (want: 0 with --next, 1 with a card ID) and that word is a
// duration: `claim --wait 10s build-42 -- CMD`, as flock -w 10 reads.
// It returns the arguments left.
func waitDurationArg(w *waitFlag, before []string, want int) []string {
	if !w.set || w.d != 0 || len(before) != want+1 {
		return before
	}
	d, err := time.ParseDuration(before[0])
	if err != nil || d <= 0 {
		return before
	}
	w.d = d
	return before[1:]
}

// waitContext is ctx bounded by the wait's duration, if any.
func waitContext(ctx context.Context, w waitFlag) (context.Context, context.CancelFunc) {
	if w.d > 0 {
		return context.WithTimeout(ctx, w.d)
	}
	return context.WithCancel(ctx)
}

// waitBound says how long a wait may last, for messages.
func waitBound(d time.Duration) string {
	if d == 0 {
		return "for as long as it takes"
	}
	return "up to " + d.String()
}

// interruptCode is the exit status of a wait a signal ended: 128+N, as a
// shell reports a command the signal killed (130 for ^C). The signal that
// cancelled the command's context is also sent to sigs, claim's and card
// wait's own subscription, though not necessarily first: it is given a
// moment to arrive there; SIGINT when it does not.
func interruptCode(sigs <-chan os.Signal) (int, os.Signal) {
	select {
	case s := <-sigs:
		if n, ok := s.(syscall.Signal); ok {
			return 128 + int(n), s
		}
	case <-time.After(signalArrival):
	}
	return 128 + int(syscall.SIGINT), syscall.SIGINT
}

// signalArrival bounds how long interruptCode waits for the signal to
// reach sigs after it cancelled the context.
const signalArrival = 200 * time.Millisecond

// Exit codes of `card wait`.
const (
	// cardWaitExitElsewhere: the card rests in a terminal state other than
	// the one waited for (only an operator's refiling or reopen moves it
	// on).
	cardWaitExitElsewhere = 3
	// cardWaitExitGone: the card does not exist, or was deleted while
	// waited for.
	cardWaitExitGone = 4
	// cardWaitExitTimeout: --timeout passed first, as timeout(1) exits.
	cardWaitExitTimeout = 124
)

const cardWaitExitCodesHelp = `Exit codes:
  0    the card is in STATE
  1    leasekeeper failed (agent unreachable, request refused)
  2    usage error (STATE is not a state of the agent's board)
  3    the card rests in another terminal state (only an operator's
       refiling or reopen moves it on)
  4    the card does not exist, or was deleted while waited for
  124  --timeout passed first (as timeout(1))
  130  interrupted (SIGINT; 143 for SIGTERM)`

type cardWaitOpts struct {
	id, state string
	timeout   time.Duration
}

// runCardWait waits until the card is in o.state (DESIGN.md#waiting).
func runCardWait(ctx context.Context, env *cli, o cardWaitOpts) error {
	if o.timeout < 0 {
		return usageError("--timeout must not be negative")
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	c := env.client()
	b, err := c.Board(ctx)
	if err != nil {
		return env.agentError(c, err)
	}
	if !b.Has(o.state) {
		return usageError("--for %q: the agent's board has no such state (leasekeeper board show lists them)", o.state)
	}
	wctx, cancel := waitContext(ctx, waitFlag{set: true, d: o.timeout})
	defer cancel()
	said := false
	card, err := c.WaitCard(wctx, o.id, func(cd board.Card) (bool, error) {
		switch {
		case cd.State == o.state:
			return true, nil
		case b.IsTerminal(cd.State):
			return false, withCode(cardWaitExitElsewhere, fmt.Errorf("card %s is in terminal state %s, not %s: only an operator's refiling or reopen moves it on", cd.ID, cd.State, o.state))
		}
		if !said {
			said = true
			fmt.Fprintf(env.stderr, "leasekeeper: card %s is in %s; waiting for %s, %s\n", cd.ID, cd.State, o.state, waitBound(o.timeout))
		}
		return false, nil
	})
	var we *client.WaitError
	switch {
	case err == nil:
		fmt.Fprintf(env.stdout, "%s is in %s\n", card.ID, card.State)
		return nil
	case errors.As(err, &we) && errors.Is(err, context.DeadlineExceeded):
		now := ""
		if card.ID != "" {
			now = fmt.Sprintf(" (it is in %s)", card.State)
		}
		return withCode(cardWaitExitTimeout, fmt.Errorf("timed out after %s waiting for card %s to be in %s%s", o.timeout, o.id, o.state, now))
	case errors.As(err, &we):
		code, sig := interruptCode(sigs)
		return withCode(code, fmt.Errorf("interrupted (%v) while waiting for card %s to be in %s", sig, o.id, o.state))
	case errors.Is(err, board.ErrNotFound):
		if said {
			return withCode(cardWaitExitGone, fmt.Errorf("card %s was deleted while waited for", o.id))
		}
		return withCode(cardWaitExitGone, fmt.Errorf("no card %s", o.id))
	}
	var ce *codeError
	if errors.As(err, &ce) {
		return err
	}
	return env.agentError(c, err)
}
