package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

// TestReclaimAfterLossIsAFreshAcquisition: a worker whose claim the agent
// reported lost, and which then claims the same card again, gets a fresh
// claim at a higher epoch — never its lost token back (the store's Claim is
// idempotent for one marker), which it would have to refuse at once while
// the agent renewed it for ever. The fence must tell the two holds apart.
//
// The loss is real: in keepalive mode a proxy holds the client's pings, and
// the agent drops the claim as a hung worker's.
func TestReclaimAfterLossIsAFreshAcquisition(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{Lease: 1500 * time.Millisecond, Liveness: apitype.LivenessKeepalive})
	a.Card(t, "again")
	p := newGateProxy(t, a.Path)
	ctx := testCtx(t)
	c := &client.Client{Socket: p.Path}
	first, err := c.Claim(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	p.holdPings.Store(true)
	cause := waitDone(t, first.Context(), 10*time.Second)
	if !errors.Is(cause, client.ErrClaimLost) || !strings.Contains(cause.Error(), string(apitype.LostNoKeepalive)) {
		t.Fatalf("first claim ended with %v, want ErrClaimLost for %s", cause, apitype.LostNoKeepalive)
	}
	p.holdPings.Store(false)

	second, err := c.Claim(ctx, "again")
	if err != nil {
		t.Fatalf("re-claim after the loss: %v", err)
	}
	if got, lost := second.Token().Epoch, first.Token().Epoch; got <= lost {
		t.Errorf("re-claim after the loss got epoch %d, want above the lost epoch %d", got, lost)
	}
	if err := second.Context().Err(); err != nil {
		t.Errorf("re-claimed claim ended at once: %v", context.Cause(second.Context()))
	}
	card, err := a.Store.GetCard(ctx, board.GetCardParams{ID: "again"})
	if err != nil {
		t.Fatal(err)
	}
	if card.Token() != second.Token() {
		t.Errorf("store holds %+v, want the re-claim's %+v", card.Token(), second.Token())
	}
	if h, ok := a.Loop.Lookup("again"); !ok || h.Hold.Token != second.Token() {
		t.Errorf("heartbeat renews %+v (tracked %v), want the re-claim's %+v", h.Hold.Token, ok, second.Token())
	}
	if err := second.Release(ctx); err != nil {
		t.Error(err)
	}
}
