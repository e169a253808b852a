package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// hungAgent serves a real Unix socket that grants one claim trusted for a
// short while, then never answers anything else until the test ends: an
// agent that hangs (SIGSTOP, a wedged store) without closing its socket.
func hungAgent(t *testing.T, trustedMS int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hung.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	hang := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/watch", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(apitype.Frame{Type: apitype.FrameHello, Liveness: "pid", LeaseMS: 3000, PingMS: 1000})
		w.(http.Flusher).Flush()
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("POST /v1/claims", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(apitype.ClaimResponse{
			Card:    board.Card{ID: "wedged", State: board.StateReady},
			Token:   board.ClaimToken{Marker: "host-4242", Epoch: 1},
			LeaseMS: 3000, TrustedMS: trustedMS, Liveness: "pid", PingMS: 1000,
		})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		close(hang)
		_ = srv.Close()
	})
	return path
}

// TestWriteBoundedByTrustedDeadline: a fenced write in flight when the
// trusted deadline passes is cancelled with the claim, even though the
// agent never answers and the caller's own context has no deadline — so a
// hung agent cannot keep a holder working past its lease.
func TestWriteBoundedByTrustedDeadline(t *testing.T) {
	t.Parallel()
	sock := hungAgent(t, 300)
	for name, write := range map[string]func(*client.Claim) error{
		"state": func(cl *client.Claim) error {
			_, err := cl.SetState(context.Background(), board.StateDone)
			return err
		},
		"update run": func(cl *client.Claim) error {
			_, err := cl.UpdateRun(context.Background(), "r1", apitype.UpdateRunRequest{})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := &client.Client{Socket: sock}
			cl, err := c.Claim(testCtx(t), "wedged")
			if err != nil {
				t.Fatal(err)
			}
			if err := write(cl); err == nil {
				t.Errorf("%s against a hung agent returned nil", name)
			}
			if cause := context.Cause(cl.Context()); !errors.Is(cause, client.ErrLeaseUntrusted) {
				t.Errorf("claim ended with %v, want ErrLeaseUntrusted", cause)
			}
		})
	}
}
