package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

// TestLateFrameDoesNotStretchTheDeadline: a ping the client reads late —
// held on its way, as it is for a worker that was stopped or starved while
// the agent wrote to it — must not move the client's deadline past the one
// the agent vouched for when it wrote the frame. Counted from its reading,
// the frame would stretch the deadline by the delay, past the agent's own
// and past the lease, which the watchdog's orphan proof cannot allow.
//
// The frame is held by a proxy on the real socket for one whole ping
// interval (until the agent's next ping reaches the proxy), then delivered
// followed by a claim_lost for a second claim, whose end tells the test the
// client has read both.
func TestLateFrameDoesNotStretchTheDeadline(t *testing.T) {
	t.Parallel()
	// A 6s lease pings every 2s; the claim made just before the held ping
	// is trusted for 5.4s, so it is still live when the frame, 2s late,
	// arrives.
	a := socketapitest.Start(t, socketapitest.Options{Lease: 6 * time.Second})
	a.Card(t, "late")
	a.Card(t, "signal")
	p := newGateProxy(t, a.Path)
	ctx := testCtx(t)
	c := &client.Client{Socket: p.Path}
	signal, err := c.Claim(ctx, "signal") // opens the watch stream
	if err != nil {
		t.Fatal(err)
	}
	p.holdFrames.Store(true)
	late, err := c.Claim(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}

	p1 := p.nextHeld(t, "ping for the late claim", func(f apitype.Frame) bool {
		_, ok := trustedIn(f, "late")
		return ok
	})
	p.nextHeld(t, "second ping", func(f apitype.Frame) bool { return f.Type == apitype.FramePing })
	op := &client.Client{Socket: a.Path}
	if _, err := op.ForceRelease(ctx, "signal"); err != nil {
		t.Fatal(err)
	}
	lost := p.nextHeld(t, "claim_lost of the signal claim", func(f apitype.Frame) bool {
		return f.Type == apitype.FrameClaimLost && f.Card == "signal"
	})
	before := late.TrustedUntil()
	p.deliver <- p1.line
	p.deliver <- lost.line
	if cause := waitDone(t, signal.Context(), 10*time.Second); !errors.Is(cause, client.ErrClaimLost) {
		t.Fatalf("signal claim ended with %v, want ErrClaimLost from the delivered frame", cause)
	}
	if err := late.Context().Err(); err != nil {
		t.Fatalf("the late claim ended (%v) before its frame was read: this run says nothing", err)
	}

	// The agent wrote p1 before the proxy read it, and truncates trusted_ms
	// down to the millisecond: what it vouched for ends before this bound.
	trusted, _ := trustedIn(p1.f, "late")
	bound := p1.at.Add(trusted + time.Millisecond)
	if got := late.TrustedUntil(); got.After(bound) {
		t.Errorf("client deadline %v after a frame read %v late; the agent vouched for no later than %v (the client is %v past it; before the frame it held %v)",
			got, time.Since(p1.at).Round(time.Millisecond), bound, got.Sub(bound), before)
	}
	if err := late.Release(ctx); err != nil {
		t.Error(err)
	}
}
