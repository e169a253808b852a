package plugins

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/board/boardtest"
	"github.com/leasekeeper/leasekeeper/storespec"
)

// TestConformanceInProcess runs the store conformance suite against a real
// bbolt store behind the plugin boundary, over go-plugin's in-process gRPC
// pair. The suite's clock is handed to the store directly: a Clock does not
// cross a process boundary.
func TestConformanceInProcess(t *testing.T) {
	boardtest.Exercise(t, boardtest.Harness{
		Open: func(t *testing.T, cfg boardtest.Config) board.Store {
			t.Helper()
			return inProcess(t, openBolt(t, cfg.Board, cfg.Clock))
		},
	})
}

// TestConformanceSubprocess runs the same suite through a real plugin
// process per test, launched and supervised by a Proxy. The plugin's store
// reads the suite's manual clock over a Unix socket the test serves, so the
// exact lease arithmetic the suite asserts still holds across the process
// boundary.
func TestConformanceSubprocess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts one plugin process per conformance test")
	}
	boardtest.Exercise(t, boardtest.Harness{
		Open: func(t *testing.T, cfg boardtest.Config) board.Store {
			t.Helper()
			sock := serveClock(t, cfg.Clock)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			p, err := Launch(ctx, LaunchConfig{
				Cmd:   testPluginCmd(t, "", "TESTPLUGIN_CLOCK="+sock),
				Child: &storespec.Spec{Backend: "bolt", Path: filepath.Join(t.TempDir(), "board.db"), Board: cfg.Board},
			})
			if err != nil {
				t.Fatalf("Launch: %v", err)
			}
			t.Cleanup(func() {
				if err := p.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			return p
		},
	})
}

// serveClock answers "now" lines on a Unix socket with clock's time, until
// t ends. The socket lives in a short private directory: Unix socket paths
// are limited to about 100 bytes, and subtest temp dirs are longer.
func serveClock(t *testing.T, clock board.Clock) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lkclock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "clock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("clock socket: %v", err)
				}
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := conn.Write([]byte(clock.Now().Format(time.RFC3339Nano) + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return sock
}

// TestStressFencingThroughThePlugin races workers and reapers over a few
// cards through the plugin boundary and checks the recorded history: the
// fence must hold when every call is an RPC.
func TestStressFencingThroughThePlugin(t *testing.T) {
	o := boardtest.StressOptions{Cards: 3, Workers: 6, Duration: 2 * time.Second, Ops: 800}
	if testing.Short() {
		o.Duration, o.Ops = time.Second, 300
	}
	boardtest.StressFencing(t, boardtest.Harness{
		Open: func(t *testing.T, cfg boardtest.Config) board.Store {
			t.Helper()
			return inProcess(t, openBolt(t, cfg.Board, cfg.Clock))
		},
	}, o)
}
