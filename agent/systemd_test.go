package agent

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// notifySocket plays systemd's side of the notify protocol: a unixgram
// socket whose datagrams arrive on the returned channel, in order.
type notifySocket struct {
	path string
	conn *net.UnixConn
	msgs chan string
}

// endMarker is a datagram the test sends itself after the agent stopped:
// datagrams on a Unix socket arrive in order, so once it is read every
// notification the agent sent has been read too.
const endMarker = "TEST_END=1"

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	dir, err := os.MkdirTemp("", "lkn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{path: path, conn: conn, msgs: make(chan string, 256)}
	go func() {
		defer close(n.msgs)
		buf := make([]byte, 4096)
		for {
			k, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			n.msgs <- string(buf[:k])
		}
	}()
	t.Cleanup(func() { _ = conn.Close() })
	return n
}

// next returns the next notification, failing the test after bound.
func (n *notifySocket) next(t *testing.T, bound time.Duration) string {
	t.Helper()
	select {
	case m, ok := <-n.msgs:
		if !ok {
			t.Fatal("notify socket closed")
		}
		return m
	case <-time.After(bound):
		t.Fatalf("no notification within %s", bound)
		return ""
	}
}

// until reads notifications up to and including want; it returns the ones
// read before it.
func (n *notifySocket) until(t *testing.T, want string, bound time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(bound)
	var before []string
	for {
		m := n.next(t, time.Until(deadline))
		if m == want {
			return before
		}
		before = append(before, m)
	}
}

// rest sends the end marker and returns every notification still unread.
func (n *notifySocket) rest(t *testing.T) []string {
	t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(endMarker)); err != nil {
		t.Fatal(err)
	}
	return n.until(t, endMarker, 10*time.Second)
}

func count(msgs []string, want string) int {
	k := 0
	for _, m := range msgs {
		if m == want {
			k++
		}
	}
	return k
}

// seedDeadClaim leaves a claim of a dead worker of this host in the file,
// so the boot sweep has something to do before READY=1.
func seedDeadClaim(t *testing.T, s *boltstore.Store) {
	t.Helper()
	ctx := context.Background()
	host, err := pidprobe.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "orphan", State: "backlog"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, board.ClaimParams{Card: "orphan", Marker: board.WorkerMarker(host, deadPID(t)), Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
}

// TestSystemdNotifyProtocol runs the real agent under a fake systemd. It
// sets process environment variables (NOTIFY_SOCKET, WATCHDOG_USEC), so it
// does not run in parallel with the other tests.
func TestSystemdNotifyProtocol(t *testing.T) {
	cases := []struct {
		name     string
		watchdog bool
	}{
		{name: "watchdog requested: every heartbeat tick pings", watchdog: true},
		{name: "no watchdog: no pings", watchdog: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := listenNotify(t)
			t.Setenv("NOTIFY_SOCKET", n.path)
			if tc.watchdog {
				t.Setenv("WATCHDOG_USEC", strconv.Itoa(int(time.Minute/time.Microsecond)))
				t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
			} else {
				t.Setenv("WATCHDOG_USEC", "")
				t.Setenv("WATCHDOG_PID", "")
			}
			// The gate off: the reaper's first pass, at start, would
			// otherwise decide the expired claim this test reads back.
			r := startRun(t, runOpts{yaml: "lease: 3s\nreaper: {enabled: false}\n", seed: seedDeadClaim, noWait: true})

			// READY=1 means the socket answers and the boot sweep is
			// done: ask at once, with no retry.
			beforeReady := n.until(t, "READY=1", 30*time.Second)
			for _, m := range beforeReady {
				if m != "WATCHDOG=1" {
					t.Errorf("notification %q before READY=1", m)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := r.client().GetCard(ctx, "orphan")
			if err != nil {
				t.Fatalf("the socket does not answer right after READY=1: %v", err)
			}
			if !c.Claimed() || !c.LeaseExpired(time.Now()) {
				t.Errorf("at READY=1 the dead worker's claim is %q with lease until %v: the boot sweep has not expired it",
					c.Claim, c.ClaimLeaseUntil)
			}

			if tc.watchdog {
				// The heartbeat ticks every lease/3 = 1s: two pings come
				// from two ticks after READY.
				for range 2 {
					if m := n.next(t, 15*time.Second); m != "WATCHDOG=1" {
						t.Fatalf("notification %q while serving, want WATCHDOG=1", m)
					}
				}
			} else {
				// Let the loop tick twice after READY: a ping would have
				// been sent by now if it were sent without WATCHDOG_USEC.
				first := r.waitStatus(t, 15*time.Second, "a heartbeat tick", func(st apitype.Status) bool {
					return st.Heartbeat.LastTick != nil
				}).Heartbeat.LastTick.StartedAt
				r.waitStatus(t, 15*time.Second, "a second heartbeat tick", func(st apitype.Status) bool {
					return st.Heartbeat.LastTick != nil && st.Heartbeat.LastTick.StartedAt.After(first)
				})
			}

			r.cancel()
			afterServing := n.until(t, "STOPPING=1", 30*time.Second)
			if err := r.stop(t); err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
			// Everything but the one READY=1 and the one STOPPING=1 must
			// be a watchdog ping.
			all := append(append(beforeReady, afterServing...), n.rest(t)...)
			pings := count(all, "WATCHDOG=1")
			if !tc.watchdog && pings != 0 {
				t.Errorf("%d WATCHDOG=1 sent with no WATCHDOG_USEC, want none", pings)
			}
			for _, m := range all {
				if m != "WATCHDOG=1" {
					t.Errorf("unexpected notification %q", m)
				}
			}
		})
	}
}

func TestNotifierWarnsOfAShortWatchdog(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		watchdog time.Duration
		lease    time.Duration
		wantWarn bool
	}{
		{name: "no watchdog", watchdog: 0, lease: 30 * time.Second, wantWarn: false},
		{name: "shorter than a lease and a tick", watchdog: 30 * time.Second, lease: 30 * time.Second, wantWarn: true},
		{name: "exactly a lease and a tick", watchdog: 40 * time.Second, lease: 30 * time.Second, wantWarn: false},
		{name: "the shipped unit's 60s", watchdog: time.Minute, lease: 30 * time.Second, wantWarn: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs agentproc.Buffer
			n := &notifier{log: slog.New(slog.NewTextHandler(&logs, nil)), watchdog: tc.watchdog}
			n.checkInterval(tc.lease)
			if got := strings.Contains(logs.String(), "WatchdogSec is shorter"); got != tc.wantWarn {
				t.Errorf("warned = %v, want %v; log: %q", got, tc.wantWarn, logs.String())
			}
		})
	}
}
