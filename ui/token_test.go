package ui_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/ui"
)

func TestUITokenIsSingleUse(t *testing.T) {
	t.Parallel()
	f := start(t, "")
	f.agent.MustRun("card", "create", "c1")
	first := browser(t)
	f.login(first)

	// The same URL again, from a browser without the cookie (another
	// user who read it, or a second tab): refused, with a page that says
	// what to do.
	second := browser(t)
	resp, err := second.Get(f.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body strings.Builder
	if _, err := bufio.NewReader(resp.Body).WriteTo(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET the printed URL a second time: %d, want 401", resp.StatusCode)
	}
	if cs := resp.Cookies(); len(cs) != 0 {
		t.Errorf("the second exchange set cookies %v, want none", cs)
	}
	if !strings.Contains(body.String(), "used already") || !strings.Contains(body.String(), "restart leasekeeper ui") {
		t.Errorf("the refusal does not say the token was used and to restart leasekeeper ui:\n%s", body.String())
	}
	if got := f.do(second, "GET", "/board", nil); got.code != http.StatusUnauthorized {
		t.Errorf("GET /board after the refused exchange: %d, want 401", got.code)
	}
	// The session the first exchange opened goes on.
	if got := f.do(first, "GET", "/board", nil); got.code != http.StatusOK || !strings.Contains(got.body, `data-card="c1"`) {
		t.Errorf("GET /board with the first session: %d, want 200 and card c1", got.code)
	}
}

// serveAnother starts another UI server in front of f's agent and returns
// it with its address; each has a fresh token.
func (f *fixture) serveAnother() (*ui.Server, string) {
	f.t.Helper()
	srv, err := ui.Listen(ui.Config{Client: &client.Client{Socket: f.agent.Socket}, Listen: "127.0.0.1:0"})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("Serve: %v", err)
		}
	})
	return srv, srv.Addr().String()
}

// rawGet sends target as the request line's target byte for byte (no
// client cleans it) and returns the answer.
func rawGet(t *testing.T, addr, target string) *http.Response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, addr); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	resp.Body.Close()
	return resp
}

func TestUIRedirectAfterExchangeStaysLocal(t *testing.T) {
	t.Parallel()
	f := start(t, "")
	tests := []struct{ path, want string }{
		{"//evil.com/x", "/evil.com/x"},
		{`/\evil.com`, "/evil.com"},
		{`/\\evil.com`, "/evil.com"},
		{"/%2F%2Fevil.com", "/evil.com"},
		{"/%5C%5Cevil.com", "/evil.com"},
		{"///evil.com", "/evil.com"},
		{"/./%2Fevil.com", "/evil.com"},
		{"/", "/"},
		{"/cards/c1", "/cards/c1"},
	}
	for _, tc := range tests {
		srv, addr := f.serveAnother()
		u, err := url.Parse(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		resp := rawGet(t, addr, tc.path+"?"+u.RawQuery)
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("GET %s with the token: %d, want 303", tc.path, resp.StatusCode)
			continue
		}
		// Where a browser goes: Location resolved against the page.
		ref, err := url.Parse(loc)
		if err != nil {
			t.Errorf("GET %s: Location %q does not parse: %v", tc.path, loc, err)
			continue
		}
		to := u.ResolveReference(ref)
		if to.Host != u.Host || to.Scheme != "http" || strings.HasPrefix(loc, "//") || strings.Contains(loc, `\`) {
			t.Errorf("GET %s with the token: Location %q leads to %s, want a path of %s", tc.path, loc, to, u.Host)
		}
		if loc != tc.want {
			t.Errorf("GET %s with the token: Location %q, want %q", tc.path, loc, tc.want)
		}
	}
	// The rest of the query stays; the token goes.
	srv, addr := f.serveAnother()
	u, _ := url.Parse(srv.URL())
	if loc := rawGet(t, addr, "/?state=ready&"+u.RawQuery).Header.Get("Location"); loc != "/?state=ready" {
		t.Errorf("GET /?state=ready with the token: Location %q, want /?state=ready", loc)
	}
}

func TestUIBoundAddressMustBeLoopback(t *testing.T) {
	t.Parallel()
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 8080},
		&net.TCPAddr{IP: net.IPv4zero, Port: 8080},
		&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080},
		&net.UnixAddr{Name: "/x", Net: "unix"},
	} {
		if err := ui.CheckBound(a); !errors.Is(err, ui.ErrNotLoopback) {
			t.Errorf("CheckBound(%s) = %v, want ErrNotLoopback", a, err)
		}
	}
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8080},
		&net.TCPAddr{IP: net.ParseIP("127.3.4.5"), Port: 8080},
		&net.TCPAddr{IP: net.IPv6loopback, Port: 8080},
	} {
		if err := ui.CheckBound(a); err != nil {
			t.Errorf("CheckBound(%s) = %v, want nil", a, err)
		}
	}
}
