// Package socketapitest starts a real socket API for tests: a bbolt store
// in a temporary directory, a running heartbeat loop and a socketapi.Server
// on a real Unix socket, wired the way the agent wires them (the loop's
// losses become claim_lost frames).
package socketapitest

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	"github.com/leasekeeper/leasekeeper/socketapi"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// Options tune the agent under test. Zero values pick test defaults.
type Options struct {
	Lease     time.Duration // default 3s
	Liveness  string        // default pid
	Operators func() []uint32
	// Prober reads peer start times for the server (default the real
	// pidprobe). The heartbeat always uses the real prober.
	Prober socketapi.Prober
	// Path places the socket; default a fresh short temporary directory
	// (Unix socket paths are limited to about 100 bytes).
	Path       string
	ReaperPass func(ctx context.Context, dryRun bool) (apitype.ReaperPass, error)
	// Store reuses an open store instead of creating one.
	Store *boltstore.Store
}

// Agent is a running socket API under test.
type Agent struct {
	Server *socketapi.Server
	Store  *boltstore.Store
	Loop   *heartbeat.Loop
	Path   string
	Lease  time.Duration

	stopOnce sync.Once
}

// Start builds and starts an agent; it stops when the test ends.
func Start(t testing.TB, o Options) *Agent {
	t.Helper()
	if o.Lease == 0 {
		o.Lease = 3 * time.Second
	}
	if o.Liveness == "" {
		o.Liveness = apitype.LivenessPID
	}
	if o.Path == "" {
		dir, err := os.MkdirTemp("", "lk")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		o.Path = filepath.Join(dir, "run", "leasekeeper.sock")
	}
	st := o.Store
	if st == nil {
		var err error
		st, err = boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{})
		if err != nil {
			t.Fatalf("open bolt store: %v", err)
		}
		t.Cleanup(func() { st.Close() })
	}
	if o.Prober == nil {
		o.Prober = pidprobe.New()
	}
	lease := func() time.Duration { return o.Lease }
	var srv atomic.Pointer[socketapi.Server]
	loop, err := heartbeat.New(heartbeat.Config{
		Store: st,
		Lease: lease,
		Mode:  func() heartbeat.Mode { return heartbeat.Mode(o.Liveness) },
		OnLost: func(l heartbeat.Lost) {
			if s := srv.Load(); s != nil {
				s.Notify(apitype.Frame{Type: apitype.FrameClaimLost, Card: l.Card, Epoch: l.Epoch, Marker: l.Marker, Reason: string(l.Reason)})
			}
		},
	})
	if err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	host, err := pidprobe.Hostname()
	if err != nil || host == "" {
		host = "testhost"
	}
	s, err := socketapi.New(socketapi.Config{
		Path:       o.Path,
		Store:      st,
		Claims:     loop,
		Prober:     o.Prober,
		Host:       host,
		Lease:      lease,
		Liveness:   func() string { return o.Liveness },
		Operators:  o.Operators,
		ReaperPass: o.ReaperPass,
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("socketapi.New: %v", err)
	}
	srv.Store(s)
	ctx := context.Background()
	if err := loop.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		loop.Stop()
		t.Fatalf("start server: %v", err)
	}
	a := &Agent{Server: s, Store: st, Loop: loop, Path: o.Path, Lease: o.Lease}
	t.Cleanup(a.Stop)
	return a
}

// Stop shuts the server down and stops the heartbeat, as an agent exiting
// does. Idempotent.
func (a *Agent) Stop() {
	a.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Server.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
			slog.Default().Warn("socketapitest: shutdown", "err", err)
		}
		a.Loop.Stop()
	})
}

// Card creates a card in the store directly.
func (a *Agent) Card(t testing.TB, id string) board.Card {
	t.Helper()
	c, err := a.Store.CreateCard(context.Background(), board.CreateCardParams{ID: id, Title: id})
	if err != nil {
		t.Fatalf("create card %s: %v", id, err)
	}
	return c
}
