// Command testplugin is a store plugin built by the tests of package plugins
// and of plugins/serve: a real bbolt store behind serve.Serve, plus the
// misbehaving plugins the tests need. TESTPLUGIN_MODE selects:
//
//	(empty)        serve the bbolt store named by the agent's ChildConfig
//	wrong-version  answer the handshake with another protocol version
//	before-labels  serve the bbolt store as a build from before routing by
//	               labels did: protocols 4 and 3 only, and a ClaimNext or
//	               Start that routes by labels is run without them (that
//	               build's messages have no such field, so it drops it)
//	before-retention serve the bbolt store as a build from before the
//	               retention verbs: protocols 5, 4 and 3 only
//	before-retries serve the bbolt store as a build from before the retry
//	               policy did: protocol 6 and older, and a card's policy, a
//	               retryable verdict and a retry's backoff are dropped
//	               (that build's messages have no such fields)
//	fail-open      fail to open the store
//	launcher       play the agent: Launch this binary as a plugin, print
//	               "child <pid>" and wait to be killed (the parent-death test)
//
// With TESTPLUGIN_DIE_AFTER_START set to a file path that does not exist
// yet, the first Start that commits creates that file and kills the plugin
// before it answers: a crash between the store's commit and its reply.
//
// With TESTPLUGIN_CLOCK set to a Unix socket, the store's clock is read from
// the test over that socket, so the conformance suite's manual clock crosses
// the process boundary.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
	"github.com/leasekeeper/leasekeeper/plugins/serve"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
	"github.com/leasekeeper/leasekeeper/storespec"
)

// HangCard is the card id whose GetCard blocks until the caller gives up,
// after writing HangLine to stderr: the tests kill the plugin mid-call.
const (
	HangCard = "hang-in-get"
	HangLine = "testplugin: GetCard is blocking"
)

func main() {
	switch mode := os.Getenv("TESTPLUGIN_MODE"); mode {
	case "wrong-version":
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig: wire.Handshake,
			VersionedPlugins: map[int]plugin.PluginSet{
				wire.ProtocolVersion + 98: {wire.PluginName: &serve.StorePlugin{Store: unused{}}},
			},
			GRPCServer: plugin.DefaultGRPCServer,
		})
	case "before-labels":
		store, err := openBolt(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		all := serve.VersionedPlugins(unrouted{store})
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig:  wire.Handshake,
			VersionedPlugins: map[int]plugin.PluginSet{4: all[4], 3: all[3]},
			GRPCServer:       plugin.DefaultGRPCServer,
		})
	case "before-retention":
		store, err := openBolt(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		all := serve.VersionedPlugins(store)
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig:  wire.Handshake,
			VersionedPlugins: map[int]plugin.PluginSet{5: all[5], 4: all[4], 3: all[3]},
			GRPCServer:       plugin.DefaultGRPCServer,
		})
	case "before-retries":
		store, err := openBolt(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		all := serve.VersionedPlugins(unretried{store})
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig:  wire.Handshake,
			VersionedPlugins: map[int]plugin.PluginSet{6: all[6], 5: all[5], 4: all[4], 3: all[3]},
			GRPCServer:       plugin.DefaultGRPCServer,
		})
	case "fail-open":
		if err := serve.Serve(func(context.Context) (board.Store, error) {
			return nil, errors.New("the disk is on fire")
		}); err != nil {
			os.Exit(1)
		}
	case "launcher":
		launch()
	case "":
		if err := serve.Serve(openBolt); err != nil {
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "testplugin: unknown TESTPLUGIN_MODE %q\n", mode)
		os.Exit(2)
	}
}

// launch starts this binary as a store plugin through plugins.Launch, the
// way the agent does, retires OS threads (a plugin forked from a thread
// that is not kept for it could be killed by its parent-death signal here,
// long before this process dies), checks the plugin still answers, reports
// the child's pid and waits to be killed.
func launch() {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := context.Background()
	p, err := plugins.Launch(ctx, plugins.LaunchConfig{
		Cmd: func() *exec.Cmd {
			c := exec.Command(self)
			c.Env = append(os.Environ(), "TESTPLUGIN_MODE=")
			return c
		},
		Child: &storespec.Spec{Backend: "bolt", Path: os.Getenv("TESTPLUGIN_DB"), Board: board.DefaultBoard(true)},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Returning while locked makes the runtime end this thread.
			runtime.LockOSThread()
		}()
	}
	wg.Wait()
	if _, err := p.GetCard(ctx, board.GetCardParams{ID: "no-such-card"}); !errors.Is(err, board.ErrNotFound) {
		fmt.Fprintf(os.Stderr, "testplugin: plugin unusable after thread churn: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("child %d\n", p.Status().PID)
	select {} // until killed
}

func openBolt(ctx context.Context) (board.Store, error) {
	cfg, err := serve.ChildConfigFromEnv()
	if err != nil {
		return nil, err
	}
	var clock board.Clock = board.SystemClock{}
	if sock := os.Getenv("TESTPLUGIN_CLOCK"); sock != "" {
		c, err := dialClock(ctx, sock)
		if err != nil {
			return nil, err
		}
		clock = c
	}
	s, err := boltstore.Open(cfg.Path, boltstore.Options{Board: cfg.Board, Clock: clock, LockTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	// Keep the real stderr: go-plugin redirects os.Stderr once serving.
	return &hangStore{Store: s, stderr: os.Stderr, dieAfterStart: os.Getenv("TESTPLUGIN_DIE_AFTER_START")}, nil
}

// unrouted runs ClaimNext and Start as a build from before routing by
// labels does: it never sees the labels.
type unrouted struct{ board.Store }

func (u unrouted) ClaimNext(ctx context.Context, r board.ClaimNextParams) (board.Card, error) {
	r.Labels = nil
	return u.Store.ClaimNext(ctx, r)
}

func (u unrouted) Start(ctx context.Context, r board.StartParams) (board.StartResult, error) {
	r.Labels = nil
	return u.Store.Start(ctx, r)
}

// unretried is a store from before the retry policy: it never sees one.
type unretried struct{ board.Store }

func (u unretried) CreateCard(ctx context.Context, nc board.CreateCardParams) (board.Card, error) {
	nc.Retry = nil
	return u.Store.CreateCard(ctx, nc)
}

func (u unretried) Finish(ctx context.Context, r board.FinishParams) (board.FinishResult, error) {
	r.Retryable = false
	return u.Store.Finish(ctx, r)
}

func (u unretried) SetStateOwned(ctx context.Context, m board.SetStateOwnedParams) (board.MoveResult, error) {
	m.Retry = false
	return u.Store.SetStateOwned(ctx, m)
}

// GetCard answers as a store from before the retry policy does: no
// attempts counted (its cards have no such field).
func (u unretried) GetCard(ctx context.Context, p board.GetCardParams) (board.Card, error) {
	c, err := u.Store.GetCard(ctx, p)
	c.Attempts = 0
	return c, err
}

// ReclaimExpired answers with the card as a store from before the retry
// policy has it: no attempts counted.
func (u unretried) ReclaimExpired(ctx context.Context, r board.ReclaimExpiredParams) (board.Card, error) {
	c, err := u.Store.ReclaimExpired(ctx, r)
	c.Attempts = 0
	return c, err
}

// unused stands in for a store no call reaches.
type unused struct{ board.Store }

// hangStore blocks GetCard(HangCard) until the caller's ctx ends.
type hangStore struct {
	board.Store
	stderr        *os.File
	dieAfterStart string
}

// Start dies after the commit, before the answer, once (see
// TESTPLUGIN_DIE_AFTER_START).
func (h *hangStore) Start(ctx context.Context, r board.StartParams) (board.StartResult, error) {
	st, err := h.Store.Start(ctx, r)
	if err == nil && h.dieAfterStart != "" {
		if f, ferr := os.OpenFile(h.dieAfterStart, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); ferr == nil {
			_ = f.Close()
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	return st, err
}

func (h *hangStore) GetCard(ctx context.Context, p board.GetCardParams) (board.Card, error) {
	if p.ID != HangCard {
		return h.Store.GetCard(ctx, p)
	}
	fmt.Fprintln(h.stderr, HangLine)
	<-ctx.Done()
	return board.Card{}, ctx.Err()
}

// socketClock asks the test for the time: one line out ("now"), one line
// back (RFC 3339 with nanoseconds).
type socketClock struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
}

func dialClock(ctx context.Context, sock string) (*socketClock, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, fmt.Errorf("testplugin: clock socket: %w", err)
	}
	return &socketClock{conn: conn, r: bufio.NewReader(conn)}, nil
}

func (c *socketClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.conn.Write([]byte("now\n")); err != nil {
		panic(fmt.Sprintf("testplugin: clock socket: %v", err))
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		panic(fmt.Sprintf("testplugin: clock socket: %v", err))
	}
	t, err := time.Parse(time.RFC3339Nano, line[:len(line)-1])
	if err != nil {
		panic(fmt.Sprintf("testplugin: clock socket: %v", err))
	}
	return t
}
