package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	"github.com/leasekeeper/leasekeeper/socketapi"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// agent is the socket API wired the way the daemon wires it: a bbolt store
// (in this process, or served by a store plugin child as the shipped agent
// runs it), a running heartbeat loop whose losses become claim_lost
// frames, and the server on a real Unix socket.
type agent struct {
	store  board.Store
	loop   *heartbeat.Loop
	server *socketapi.Server
	path   string
}

func startAgent(ctx context.Context, dir string, lease time.Duration) (*agent, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	st, err := boltstore.Open(filepath.Join(dir, "board.db"), boltstore.Options{})
	if err != nil {
		return nil, err
	}
	return wireAgent(ctx, dir, lease, st)
}

// startPluginAgent is startAgent with the store behind the go-plugin
// boundary: this binary re-executed as the store's child process, as the
// agent re-executes itself for its built-in stores by default.
func startPluginAgent(ctx context.Context, dir string, lease time.Duration) (*agent, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	proxy, err := launchStorePlugin(ctx, filepath.Join(dir, "board.db"))
	if err != nil {
		return nil, err
	}
	return wireAgent(ctx, dir, lease, proxy)
}

func wireAgent(ctx context.Context, dir string, lease time.Duration, st board.Store) (*agent, error) {
	leaseFn := func() time.Duration { return lease }
	var srv atomic.Pointer[socketapi.Server]
	loop, err := heartbeat.New(heartbeat.Config{
		Store: st,
		Lease: leaseFn,
		OnLost: func(l heartbeat.Lost) {
			if s := srv.Load(); s != nil {
				s.Notify(apitype.Frame{Type: apitype.FrameClaimLost, Card: l.Card, Epoch: l.Epoch, Marker: l.Marker, Reason: string(l.Reason)})
			}
		},
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	host, err := pidprobe.Hostname()
	if err != nil || host == "" {
		host = "benchhost"
	}
	path := filepath.Join(dir, "lk.sock")
	s, err := socketapi.New(socketapi.Config{
		Path:     path,
		Store:    st,
		Claims:   loop,
		Prober:   pidprobe.New(),
		Host:     host,
		Lease:    leaseFn,
		Liveness: func() string { return apitype.LivenessPID },
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	srv.Store(s)
	if err := loop.Start(ctx); err != nil {
		st.Close()
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		loop.Stop()
		st.Close()
		return nil, fmt.Errorf("start socket server: %w", err)
	}
	return &agent{store: st, loop: loop, server: s, path: path}, nil
}

func (a *agent) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = a.server.Shutdown(ctx)
	a.loop.Stop()
	_ = a.store.Close()
}
