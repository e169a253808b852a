package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// Waiting: a claim that blocks until the card (or, for next, any matching
// card) can be claimed, and a read that blocks until a card is in a state.
// The wake-up is the agent's event log, never a polling loop
// (DESIGN.md#waiting):
//
//  1. read the log's head (GET /v1/events/head);
//  2. try (the claim, the read);
//  3. follow the log after that head and try again on each event that may
//     have changed the answer.
//
// The head comes first: an event written between the try and the follow
// has a higher number than the head, so the follow delivers it. Read after
// the try, the head could pass over it, and the waiter would sleep through
// the one change it waits for.

// DefaultWaitBackstop is the interval of a waiter's safety re-try: a
// backstop for a change no event announces, never the wake-up itself
// (DESIGN.md#waiting).
const DefaultWaitBackstop = 30 * time.Second

// waitTryTimeout bounds the head read and each try of a wait. They run
// detached from the wait's context: a Start cut off mid-request could land
// unheard and leave the card claimed by this process.
const waitTryTimeout = 30 * time.Second

// The reconnect backoff of a waiter's follow of the log.
const (
	waitFollowMin = 100 * time.Millisecond
	waitFollowMax = 3 * time.Second
)

// WaitError ends a wait its context cut short: Err is the context's error
// (context.DeadlineExceeded on a timeout, context.Canceled), Last the
// refusal the last try got. errors.Is matches either, so a caller that
// timed out waiting for a held card still finds board.ErrClaimConflict.
type WaitError struct {
	Err  error
	Last error
}

func (e *WaitError) Error() string {
	if e.Last == nil {
		return fmt.Sprintf("gave up waiting: %v", e.Err)
	}
	return fmt.Sprintf("gave up waiting (%v); the last try: %v", e.Err, e.Last)
}

func (e *WaitError) Unwrap() []error {
	if e.Last == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Last}
}

// EventsHead is the sequence number of the log's last event now (0 while
// it has none): FollowEvents after it delivers every event written from
// then on and none from before.
func (c *Client) EventsHead(ctx context.Context) (int64, error) {
	var resp apitype.EventsHeadResponse
	err := c.do(ctx, http.MethodGet, "/v1/events/head", nil, nil, &resp)
	return resp.Seq, err
}

// ClaimWait is Claim that waits, while the card is held by another
// process or waits on its blockers, until it can be claimed or ctx ends.
// Any other refusal (no such card, a card in a sink) is returned at once.
// When ctx ends first, the error is a *WaitError carrying the last refusal.
func (c *Client) ClaimWait(ctx context.Context, card string) (*Claim, error) {
	return c.waitClaim(ctx, card, "/v1/claims", apitype.ClaimRequest{Card: card})
}

// ClaimNextWait is ClaimNext that waits, while no card is claimable, until
// one is (carrying every label given) or ctx ends.
func (c *Client) ClaimNextWait(ctx context.Context, labels ...string) (*Claim, error) {
	return c.waitClaim(ctx, "", "/v1/claims", apitype.ClaimRequest{Next: true, Labels: labels})
}

// Waitable reports whether a claim refused with err is one a wait waits
// out: for the next card (next), none claimable yet or the pick changing
// under the write; for a card by id, the card held or waiting on its
// blockers. A card backing off is the other thing a wait by id waits out;
// BackoffOf tells it (DESIGN.md#waiting).
func Waitable(next bool, err error) bool {
	if next {
		return errors.Is(err, board.ErrNotFound) || errors.Is(err, board.ErrClaimConflict)
	}
	return errors.Is(err, board.ErrClaimConflict) || errors.Is(err, board.ErrWaitingOnBlockers)
}

// waitClaim claims (path /v1/claims) or starts (/v1/starts) card, or the
// next card when card is empty, waiting as ClaimWait and ClaimNextWait
// say. A try in flight when ctx ends is completed, not cut off (a request
// cut off mid-way could land unheard): should it succeed, the claim is
// returned with a nil error, and the caller decides what to do with it.
func (c *Client) waitClaim(ctx context.Context, card, path string, req any) (*Claim, error) {
	var cl *Claim
	try := func(tctx context.Context) (bool, error) {
		var err error
		cl, err = c.claim(tctx, card, path, req)
		return err == nil, err
	}
	err := c.wait(ctx, claimWake(card), try, func(err error) waitVerdict {
		switch {
		case card == "" && errors.Is(err, board.ErrClaimConflict):
			return waitVerdict{keep: true, now: true} // the pick changed under the write: at once
		case Waitable(card == "", err):
			return waitVerdict{keep: true}
		case card != "":
			// A card backing off after a retryable failure
			// (DESIGN.md#retries) is claimable at its retry_at, which
			// no event announces: wait for that time.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), waitTryTimeout)
			defer cancel()
			if at := c.BackoffOf(rctx, card, err); !at.IsZero() {
				return waitVerdict{keep: true, at: at}
			}
		}
		return waitVerdict{}
	})
	if err != nil {
		return nil, err
	}
	return cl, nil
}

// BackoffOf returns the retry_at of card when err is a claim by id refused
// because the card backs off after a retryable failure
// (DESIGN.md#retries); zero for any other answer. It reads the card.
func (c *Client) BackoffOf(ctx context.Context, card string, err error) time.Time {
	if !errors.Is(err, board.ErrTransitionRejected) {
		return time.Time{}
	}
	cd, gerr := c.GetCard(ctx, card)
	if gerr != nil || cd.Claim != "" {
		return time.Time{}
	}
	return cd.RetryAt
}

// claimWake says which events may make a wait's claim possible. By id:
// any event of that card (its release, a move, the promotion out of
// waiting_deps when its last blocker completes, a run unpaused). For next:
// a release, a move (into the pool, out of waiting_deps), a card created, a
// label change, a run update (a paused run resumed) — on any card, since
// the events of a move carry no labels; a try too many costs one pick.
func claimWake(card string) func(board.Event) bool {
	if card != "" {
		return func(ev board.Event) bool { return ev.Card == card }
	}
	return func(ev board.Event) bool {
		return slices.Contains([]board.EventType{
			board.EventReleased, board.EventState, board.EventCardCreated, board.EventLabels, board.EventRunUpdated,
		}, ev.Type)
	}
}

// WaitCard reads the card until until says it is done with it, or ctx
// ends, and returns the card as until last saw it. until returning an
// error ends the wait with it (a card that can no longer get where the
// caller waits for it to be). A card that does not exist, or is deleted
// while waited for, is board.ErrNotFound; when ctx ends first, the error
// is a *WaitError. The card is read again on each event of its own.
func (c *Client) WaitCard(ctx context.Context, id string, until func(board.Card) (bool, error)) (board.Card, error) {
	var card board.Card
	try := func(tctx context.Context) (bool, error) {
		cd, err := c.GetCard(tctx, id)
		if err != nil {
			return false, err
		}
		card = cd
		return until(cd)
	}
	err := c.wait(ctx, func(ev board.Event) bool { return ev.Card == id }, try, nil)
	return card, err
}

// waitVerdict is what a wait makes of a refused try: keep waiting, try
// again at once (now), or try again at a time no event announces (at: a
// retry's backoff ending).
type waitVerdict struct {
	keep, now bool
	at        time.Time
}

// backoffFloor is the least a wait for a backoff's end waits between tries:
// a client whose clock runs ahead of the store's would otherwise try again
// and again before the store's clock gets there.
const backoffFloor = time.Second

// wait runs the race-free wait (DESIGN.md#waiting): the log's head first,
// then the try, then a follow of the log after the head, trying again on
// each event wake says may matter, and every backstop interval as a safety
// net. try reports true when the wait is over; an error it returns ends the
// wait unless waitable says to keep waiting (and, with now, to try again at
// once). A nil waitable keeps waiting only on a false, nil answer.
func (c *Client) wait(ctx context.Context, wake func(board.Event) bool, try func(context.Context) (bool, error),
	waitable func(error) waitVerdict) error {
	c.init()
	// The head read and every try run to their answer, bounded on their
	// own: ctx ends the waiting between them, so a wait it ends always
	// reports a refusal, and a try's write is never cut off unheard.
	detached := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), waitTryTimeout)
	}
	hctx, cancel := detached()
	head, err := c.EventsHead(hctx)
	cancel()
	if err != nil {
		return err
	}
	var last error
	var at time.Time // when to try again though no event came; zero: never
	attempt := func() (done bool, again bool, err error) {
		tctx, cancel := detached()
		defer cancel()
		at = time.Time{}
		ok, err := try(tctx)
		switch {
		case err == nil:
			return ok, false, nil
		case waitable != nil:
			if v := waitable(err); v.keep {
				if !v.now || last == nil {
					// A pick that changed under the write is tried
					// again at once; the refusal a timeout reports is
					// the one waited on.
					last = err
				}
				if !v.at.IsZero() {
					at = v.at
					if floor := time.Now().Add(backoffFloor); at.Before(floor) {
						at = floor
					}
				}
				return false, v.now, nil
			}
		}
		return false, false, err
	}
	done, again, err := attempt()
	if done || err != nil {
		return err
	}
	if c.waitAfterTry != nil {
		c.waitAfterTry() // tests: an event in the window between the try and the follow
	}

	fctx, stop := context.WithCancel(ctx)
	defer stop()
	woke := make(chan struct{}, 1)
	signal := func() {
		select {
		case woke <- struct{}{}:
		default:
		}
	}
	broke := make(chan error, 1)
	go func() { broke <- c.followForWait(fctx, head, wake, signal) }()

	backstop := c.waitBackstop
	if backstop <= 0 {
		backstop = DefaultWaitBackstop
	}
	next := func() time.Duration {
		if !at.IsZero() {
			return min(backstop, time.Until(at))
		}
		return backstop
	}
	timer := time.NewTimer(next())
	defer timer.Stop()
	for {
		if again {
			signal()
		}
		select {
		case <-ctx.Done():
			return &WaitError{Err: ctx.Err(), Last: last}
		case err := <-broke:
			if ctx.Err() != nil {
				return &WaitError{Err: ctx.Err(), Last: last}
			}
			return fmt.Errorf("following the event log to wait: %w", err)
		case <-woke:
		case <-timer.C:
		}
		if done, again, err = attempt(); done || err != nil {
			return err
		}
		timer.Reset(next())
	}
}

// followForWait follows the log after `after` and calls signal for each
// event wake picks, until ctx ends. A broken stream (the agent restarting)
// is resumed after the last event seen once the agent answers again, with
// backoff, and signals once more then. A follow the agent refuses (its
// position no longer served, say the log was pruned past it) starts over
// from a fresh head, then signals: the try that follows comes after that
// head, so the rule of the first try holds again (DESIGN.md#waiting). A
// second refusal in a row, with no event between, is returned.
func (c *Client) followForWait(ctx context.Context, after int64, wake func(board.Event) bool, signal func()) error {
	refused := false
	for {
		err := c.FollowEvents(ctx, after, func(ev board.Event) error {
			after, refused = ev.Seq, false
			if wake(ev) {
				signal()
			}
			return nil
		})
		if ctx.Err() != nil {
			return nil
		}
		if final(err) {
			if refused {
				return err
			}
			refused = true
			head, herr := c.EventsHead(ctx)
			if herr != nil {
				if ctx.Err() != nil {
					return nil
				}
				return herr
			}
			after = head
			signal()
			continue
		}
		backoff := waitFollowMin
		for {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			backoff = min(2*backoff, waitFollowMax)
			if _, err = c.Events(ctx, after, 1); err == nil || final(err) {
				break
			}
		}
		signal() // the agent is back: try again, in case
	}
}

// final says whether err is the agent's answer refusing a request, which
// no retry changes (anything but unavailable); a broken connection is not.
func final(err error) bool {
	var ae *apitype.Error
	return errors.As(err, &ae) && !errors.Is(err, apitype.ErrUnavailable)
}
