package socketapi_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

// A peer that opens a request and never finishes its headers (slowloris)
// is cut off by the header timeout; the agent keeps answering others.
func TestSlowlorisIsCutOffByTheHeaderTimeout(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	c, err := net.Dial("unix", a.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /v1/status HTTP/1.1\r\nHost: leasekeeper\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection was still open after %s: the header timeout did not cut it", time.Since(start))
	}
	newRaw(t, a.Path).mustAnswer()
}

// Two thousand idle keep-alive connections are all served, and once their
// peers go away the agent gives back what they held: its goroutines return
// to where they were.
func TestIdleConnectionsAreServedAndReclaimed(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 2,000 connections")
	}
	a := socketapitest.Start(t, socketapitest.Options{})
	newRaw(t, a.Path).mustAnswer()
	base := runtime.NumGoroutine()
	const n = 2000
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := net.Dial("unix", a.Path)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, "GET /v1/status HTTP/1.1\r\nHost: leasekeeper\r\n\r\n"); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: status %d", i, resp.StatusCode)
		}
	}
	// All idle now, and a new peer is still served.
	newRaw(t, a.Path).mustAnswer()
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > base+10 {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %d after the peers left, want back to about %d", runtime.NumGoroutine(), base)
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // polling a condition, bounded above
	}
}
