package plugins

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/internal/plugintest"
	"github.com/leasekeeper/leasekeeper/plugins/internal/wire"
	"github.com/leasekeeper/leasekeeper/plugins/serve"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

func TestMain(m *testing.M) { plugintest.Main(m) }

// testPluginCmd returns a Cmd func running the test plugin in mode.
func testPluginCmd(t testing.TB, mode string, env ...string) func() *exec.Cmd {
	bin := plugintest.Binary(t)
	return func() *exec.Cmd {
		c := exec.Command(bin)
		c.Env = append(os.Environ(), "TESTPLUGIN_MODE="+mode)
		c.Env = append(c.Env, env...)
		return c
	}
}

// openBolt opens a real bbolt store in t's temp dir.
func openBolt(t *testing.T, b board.Board, clock board.Clock) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{Board: b, Clock: clock, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("boltstore.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing the bbolt store: %v", err)
		}
	})
	return s
}

// inProcess serves store through go-plugin's in-process gRPC test pair and
// returns the agent's side of the boundary, loaded.
func inProcess(t *testing.T, store board.Store) *remoteStore {
	t.Helper()
	client, server := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{
		wire.PluginName: bothEnds(store),
	})
	// Closing the client asks the server to stop (go-plugin's controller),
	// as the agent does with a real plugin; stopping it here as well would
	// race inside go-plugin.
	_ = server
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(wire.PluginName)
	if err != nil {
		t.Fatalf("Dispense: %v", err)
	}
	rs, ok := raw.(*remoteStore)
	if !ok {
		t.Fatalf("Dispense returned %T, want *remoteStore", raw)
	}
	if err := rs.load(t.Context()); err != nil {
		t.Fatalf("load: %v", err)
	}
	return rs
}

// pairPlugin is both ends of the boundary in one go-plugin definition, for
// go-plugin's in-process test pair: the plugin's server (serve.StorePlugin)
// and the agent's client (storePlugin). Only the tests join them: the
// agent's side does not import the plugin's.
type pairPlugin struct {
	*serve.StorePlugin
	client *storePlugin
}

func (p pairPlugin) GRPCClient(ctx context.Context, b *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return p.client.GRPCClient(ctx, b, c)
}

// bothEnds is the in-process pair's plugin serving store.
func bothEnds(store board.Store) plugin.Plugin {
	return pairPlugin{StorePlugin: &serve.StorePlugin{Store: store}, client: &storePlugin{}}
}

// registerStore registers the plugin's store service, serving store, on
// srv, as a plugin process does.
func registerStore(t testing.TB, srv *grpc.Server, store board.Store) {
	t.Helper()
	if err := (&serve.StorePlugin{Store: store}).GRPCServer(nil, srv); err != nil {
		t.Fatal(err)
	}
}

// logWatch is a slog handler that hands every message to waiters, so a test
// can wait for a plugin's stderr line relayed through go-plugin instead of
// sleeping.
type logWatch struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{}
}

func newLogWatch() *logWatch { return &logWatch{changed: make(chan struct{})} }

func (w *logWatch) logger() *slog.Logger { return slog.New(w) }

func (w *logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w *logWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *logWatch) WithGroup(string) slog.Handler            { return w }

func (w *logWatch) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, b.String())
	close(w.changed)
	w.changed = make(chan struct{})
	return nil
}

// wait blocks until a logged line contains substr, or fails t after d.
func (w *logWatch) wait(t *testing.T, substr string, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		w.mu.Lock()
		for _, l := range w.lines {
			if strings.Contains(l, substr) {
				w.mu.Unlock()
				return
			}
		}
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("no log line containing %q within %s", substr, d)
		}
	}
}

// waitState blocks until p's state is want, or fails t after d. It waits on
// the proxy's own change notifications, not on a timer.
func waitState(t *testing.T, p *Proxy, want string, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		p.mu.Lock()
		got, ch := p.status.State, p.changed
		p.mu.Unlock()
		if got == want {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("proxy state is %q after %s, want %q", got, d, want)
		}
	}
}

// scripted is a board.Store whose few verbs a test needs are functions;
// the boundary tests use it to make the plugin side return exactly the
// error or value under test. Any other verb panics (the embedded nil).
type scripted struct {
	board.Store
	getCard     func(ctx context.Context, id string) (board.Card, error)
	renewClaims func(ctx context.Context, holds []board.Hold, lease time.Duration) ([]board.RenewResult, error)
	listCards   func(ctx context.Context, f board.ListCardsParams) ([]board.Card, error)
	traits      board.Traits
}

func (s *scripted) LoadBoard(context.Context) (board.Board, error) {
	return board.DefaultBoard(true), nil
}
func (s *scripted) Traits() board.Traits { return s.traits }

func (s *scripted) GetCard(ctx context.Context, p board.GetCardParams) (board.Card, error) {
	id := p.ID
	return s.getCard(ctx, id)
}

func (s *scripted) RenewClaims(ctx context.Context, p board.RenewClaimsParams) ([]board.RenewResult, error) {
	holds, lease := p.Holds, p.Lease
	return s.renewClaims(ctx, holds, lease)
}

func (s *scripted) ListCards(ctx context.Context, f board.ListCardsParams) ([]board.Card, error) {
	return s.listCards(ctx, f)
}

func (s *scripted) Close() error { return nil }

// waitCount blocks until n logged lines contain substr, or fails t after d.
func (w *logWatch) waitCount(t *testing.T, substr string, n int, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		w.mu.Lock()
		got := 0
		for _, l := range w.lines {
			if strings.Contains(l, substr) {
				got++
			}
		}
		ch := w.changed
		w.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%d log lines containing %q within %s, want %d", got, substr, d, n)
		}
	}
}
