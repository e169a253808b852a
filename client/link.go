package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// link follows the watch stream (and, in keepalive mode, pings) for as
// long as this client holds or is acquiring claims.
type link struct {
	c      *Client
	refs   int
	ctx    context.Context
	cancel context.CancelFunc

	ready    chan struct{} // closed after the first hello or first failure
	readyErr error
}

// acquireLink returns the running link, starting it if needed, once
// its watch stream is connected.
func (c *Client) acquireLink(ctx context.Context) (*link, error) {
	c.init()
	c.mu.Lock()
	s := c.link
	if s == nil {
		sctx, cancel := context.WithCancel(context.Background())
		s = &link{c: c, ctx: sctx, cancel: cancel, ready: make(chan struct{})}
		c.link = s
		go s.run()
	}
	s.refs++
	c.mu.Unlock()
	select {
	case <-s.ready:
		if s.readyErr != nil {
			c.releaseLink(s)
			return nil, s.readyErr
		}
		return s, nil
	case <-ctx.Done():
		c.releaseLink(s)
		return nil, ctx.Err()
	}
}

func (c *Client) releaseLink(s *link) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.refs--
	if s.refs <= 0 {
		s.cancel()
		if c.link == s {
			c.link = nil
		}
	}
}

const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

func (s *link) run() {
	var readyOnce bool
	markReady := func(err error) {
		if !readyOnce {
			readyOnce = true
			s.readyErr = err
			close(s.ready)
		}
	}
	after := int64(-1)
	backoff := minBackoff
	var pinger context.CancelFunc
	defer func() {
		if pinger != nil {
			pinger()
		}
	}()
	for s.ctx.Err() == nil {
		// Read before the watch request goes out, so before the agent
		// receives it: the pings count their trusted times from here.
		sent := time.Now()
		err := s.c.Watch(s.ctx, after, func(f apitype.Frame) error {
			received := time.Now()
			switch f.Type {
			case apitype.FrameHello:
				backoff = minBackoff
				if f.Missed && after >= 0 {
					go s.verify()
				}
				if f.Liveness == apitype.LivenessKeepalive && pinger == nil && f.PingMS > 0 {
					var pctx context.Context
					pctx, pinger = context.WithCancel(s.ctx)
					go s.ping(pctx, time.Duration(f.PingMS)*time.Millisecond)
				}
				markReady(nil)
			case apitype.FrameClaimLost:
				s.c.noteLost(f.Card, f.Epoch)
				if cl := s.c.lookup(f.Card, f.Epoch); cl != nil {
					cl.end(fmt.Errorf("%w: card %s epoch %d: %s", ErrClaimLost, f.Card, f.Epoch, f.Reason))
				}
			case apitype.FramePing:
				at := measuredAt(sent, f, received)
				for _, tc := range f.Claims {
					if cl := s.c.lookup(tc.Card, tc.Epoch); cl != nil {
						cl.trust(time.Duration(tc.TrustedMS)*time.Millisecond, at)
					}
				}
			}
			after = f.Seq
			return nil
		})
		if s.ctx.Err() != nil {
			return
		}
		if !readyOnce {
			markReady(fmt.Errorf("opening the watch stream: %w", err))
			return
		}
		// The stream broke. Claims keep counting down to the deadline the
		// agent last vouched for; reconnect and resume from `after`.
		t := time.NewTimer(backoff)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// measuredAt is the instant a ping's trusted times count from: one no later
// than the moment the agent measured them, on this process's monotonic
// clock.
//
// The frame's receipt is not such an instant. A reader that stalls while
// frames queue up (a stopped or starved process, a full socket buffer)
// reads a frame late, and counting its trusted time from the reading would
// push the deadline past the agent's by the delay — past the lease the
// store stamped, where the watchdog's orphan proof counts on every holder
// having stopped. So the agent says when, since it received this watch
// request, it measured the frame (stream_ms), and the request was sent at
// streamSent, before the agent received it: streamSent + stream_ms precedes
// the measurement. That sum mixes two processes' readings, which is sound
// because they read one clock: worker and agent share a host, and Go's
// monotonic readings on it are CLOCK_MONOTONIC in every process (a time
// namespace may offset that clock, but only durations cross the wire, each
// measured on one side, so an offset cancels out). No clock is read on the
// agent's behalf here, so the package stays standard-library only.
//
// The price is the request's transit (dial, accept, the agent's peer
// check): every deadline counted from this stream comes that much early,
// which is the safe side. A late frame no longer stretches anything; the
// newest frame still wins, and a deadline already passed is never revived
// (Claim.trust). An agent that predates stream_ms leaves the receipt.
func measuredAt(streamSent time.Time, f apitype.Frame, received time.Time) time.Time {
	if f.StreamMS == nil {
		return received
	}
	if at := streamSent.Add(time.Duration(*f.StreamMS) * time.Millisecond); at.Before(received) {
		return at
	}
	return received
}

// ping keeps the agent renewing this process's claims in keepalive mode. A
// stopped or hung process stops pinging, and the agent stops renewing: that
// is the point of the mode. Each answer is also a sound bound on the trusted
// time, since it is counted from when the ping was sent.
func (s *link) ping(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		sent := time.Now()
		var resp apitype.KeepaliveResponse
		rctx, cancel := context.WithTimeout(ctx, every)
		err := s.c.do(rctx, http.MethodPost, "/v1/keepalive", nil, struct{}{}, &resp)
		cancel()
		if err == nil {
			for _, tc := range resp.Claims {
				if cl := s.c.lookup(tc.Card, tc.Epoch); cl != nil {
					cl.trust(time.Duration(tc.TrustedMS)*time.Millisecond, sent)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// verify re-checks every open claim against the board after the stream
// said frames may have been missed: a claim_lost may have been among them.
func (s *link) verify() {
	for _, cl := range s.c.open() {
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		card, err := s.c.GetCard(ctx, cl.card.ID)
		cancel()
		switch {
		case errors.Is(err, board.ErrNotFound):
			cl.end(fmt.Errorf("%w: card %s is gone", ErrClaimLost, cl.card.ID))
		case err != nil:
			// Cannot tell; the trusted deadline still bounds the claim.
		case card.Token() != cl.token:
			cl.end(fmt.Errorf("%w: card %s is now held by %q at epoch %d", ErrClaimLost, card.ID, card.Claim, card.ClaimEpoch))
		}
	}
}
