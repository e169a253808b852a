package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// The reconnect backoff of `events --follow`: the first retry comes soon
// (a restart takes about a second), later ones no more often than
// followBackoffMax, for as long as it takes.
const (
	followBackoffMin = 100 * time.Millisecond
	followBackoffMax = 3 * time.Second
)

// printError is a failure to print an event (stdout closed): no reconnect
// helps with it.
type printError struct{ err error }

func (e *printError) Error() string { return e.err.Error() }
func (e *printError) Unwrap() error { return e.err }

// followEvents prints the events after `after` as the agent logs them, and
// survives the agent going away: when the stream ends it reconnects with
// backoff and resumes after the last event it printed, so across a restart
// no event is printed twice and none is skipped. It says so on stderr, one
// line when the connection is lost and one when it is back. It returns nil
// when ctx ends (SIGINT, SIGTERM) and an error only for what a reconnect
// cannot mend: the agent refusing the request, or stdout failing.
//
// Each connection starts with a plain read of the log: it proves the agent
// answers (the follow stream says nothing until there is an event), so the
// first one failing is an error like any other command's, and a later one
// succeeding is when the stream has resumed.
func followEvents(ctx context.Context, env *cli, c *client.Client, after int64, print func(board.Event) error) error {
	if _, err := c.Events(ctx, after, 1); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return env.agentError(c, err)
	}
	for {
		err := c.FollowEvents(ctx, after, func(ev board.Event) error {
			if err := print(ev); err != nil {
				return &printError{err}
			}
			after = ev.Seq
			return nil
		})
		if ctx.Err() != nil {
			return nil // interrupted by the user: a normal end of --follow
		}
		if !retryable(err) {
			return env.agentError(c, err)
		}
		fmt.Fprintf(env.stderr, "leasekeeper: agent connection lost (%v); reconnecting…\n", err)
		if err := reconnect(ctx, c, after); err != nil {
			return env.agentError(c, err)
		}
		if ctx.Err() != nil {
			return nil
		}
		fmt.Fprintf(env.stderr, "leasekeeper: resumed after seq %d\n", after)
	}
}

// reconnect waits, with backoff, until the agent answers a read of the
// log after `after`. It returns nil once it does or ctx ends, and the
// error of an answer no retry will change.
func reconnect(ctx context.Context, c *client.Client, after int64) error {
	wait := followBackoffMin
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		_, err := c.Events(ctx, after, 1)
		switch {
		case err == nil, ctx.Err() != nil:
			return nil
		case !retryable(err):
			return err
		}
		wait = min(2*wait, followBackoffMax)
		timer.Reset(wait)
	}
}

// retryable says whether a follow stream that failed with err may work
// again on a new connection: the agent is gone or going (the socket
// refuses, is missing, or the stream broke off) or says it cannot serve
// now. An answer that refuses the request itself is final.
func retryable(err error) bool {
	var pe *printError
	var ae *apitype.Error
	var ue *url.Error
	var oe *net.OpError
	switch {
	case err == nil, errors.As(err, &pe):
		return false
	case errors.As(err, &ae):
		return errors.Is(err, apitype.ErrUnavailable)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.As(err, &oe), errors.As(err, &ue):
		return true
	}
	return false
}
