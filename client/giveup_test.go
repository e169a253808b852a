package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"

	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

// TestSelfCancelReleasesTheClaim: a client that stops hearing the agent
// cancels its claim at the trusted deadline, and hands the card back as it
// does. In pid mode the agent renews a claim for as long as the worker's pid
// lives, so without that release the card would stay held, renewed for
// ever, by a process that no longer thinks it holds it.
//
// The watch stream is held by a proxy on the real socket (the worker cannot
// hear the pings) while every request still gets through.
func TestSelfCancelReleasesTheClaim(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{Lease: 1500 * time.Millisecond})
	a.Card(t, "deaf")
	p := newGateProxy(t, a.Path)
	ctx := testCtx(t)
	c := &client.Client{Socket: p.Path}
	cl, err := c.Claim(ctx, "deaf")
	if err != nil {
		t.Fatal(err)
	}
	p.holdFrames.Store(true)
	if cause := waitDone(t, cl.Context(), 10*time.Second); !errors.Is(cause, client.ErrLeaseUntrusted) {
		t.Fatalf("claim ended with %v, want ErrLeaseUntrusted (no ping reached it)", cause)
	}
	if status := p.nextRelease(t, "deaf", 10*time.Second); !strings.HasPrefix(status, "204") {
		t.Errorf("release after the self-cancel answered %s, want 204", status)
	}
	card, err := a.Store.GetCard(ctx, board.GetCardParams{ID: "deaf"})
	if err != nil {
		t.Fatal(err)
	}
	if card.Claimed() {
		t.Errorf("card still claimed by %s@%d after the holder gave it up", card.Claim, card.ClaimEpoch)
	}
	if h, ok := a.Loop.Lookup("deaf"); ok {
		t.Errorf("heartbeat still renews %+v for a holder that gave it up", h.Hold)
	}
}
