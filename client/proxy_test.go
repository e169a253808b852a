package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
)

// gateProxy stands between a client and a real agent, on a Unix socket of
// its own, and passes every request through untouched unless the test shuts
// one of its two gates:
//
//   - holdFrames: the frames of the watch stream are held back as they come
//     from the agent (sent on held, with the moment the proxy read each) and
//     the client gets only the lines the test hands to deliver, when it does;
//   - holdPings: keepalive pings are held until the client gives up on them,
//     so the agent hears nothing from the worker.
//
// The proxy runs in the test process, so the agent reads the same peer
// credentials through it as it would from the client itself. Every release
// the agent answers is reported on releases.
type gateProxy struct {
	Path string

	holdFrames atomic.Bool
	holdPings  atomic.Bool
	held       chan heldFrame
	deliver    chan []byte
	releases   chan string // "<card> <status>" of each DELETE /v1/claims/{card}

	upstream *http.Client
}

// heldFrame is one watch-stream line the proxy held back.
type heldFrame struct {
	line []byte
	at   time.Time // when the proxy read it from the agent: after the agent wrote it
	f    apitype.Frame
}

func newGateProxy(t *testing.T, agentSocket string) *gateProxy {
	t.Helper()
	dir, err := os.MkdirTemp("", "lkp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p := &gateProxy{
		Path:     filepath.Join(dir, "proxy.sock"),
		held:     make(chan heldFrame, 1024),
		deliver:  make(chan []byte),
		releases: make(chan string, 64),
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", agentSocket)
	}
	p.upstream = &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	target := &url.URL{Scheme: "http", Host: "leasekeeper"}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: &http.Transport{DialContext: dial},
		ModifyResponse: func(resp *http.Response) error {
			if r := resp.Request; r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/v1/claims/") {
				p.releases <- strings.TrimPrefix(r.URL.Path, "/v1/claims/") + " " + resp.Status
			}
			return nil
		},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/watch", p.watch)
	mux.HandleFunc("POST /v1/keepalive", func(w http.ResponseWriter, r *http.Request) {
		if p.holdPings.Load() {
			<-r.Context().Done()
			return
		}
		rp.ServeHTTP(w, r)
	})
	mux.Handle("/", rp)
	ln, err := net.Listen("unix", p.Path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// watch relays one watch stream line by line, holding the lines back while
// holdFrames is set.
func (p *gateProxy) watch(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://leasekeeper"+r.URL.RequestURI(), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := p.upstream.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	write := func(b []byte) bool {
		_, err := w.Write(b)
		return err == nil && rc.Flush() == nil
	}
	if !write(nil) {
		return
	}
	lines := make(chan heldFrame)
	go func() {
		defer close(lines)
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return
			}
			hf := heldFrame{line: line, at: time.Now()}
			_ = json.Unmarshal(line, &hf.f)
			select {
			case lines <- hf:
			case <-r.Context().Done():
				return
			}
		}
	}()
	for {
		select {
		case hf, ok := <-lines:
			if !ok {
				return
			}
			if p.holdFrames.Load() {
				p.held <- hf
				continue
			}
			if !write(hf.line) {
				return
			}
		case b := <-p.deliver:
			if !write(b) {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// nextHeld returns the next held frame that match accepts, skipping (and
// never delivering) the others.
func (p *gateProxy) nextHeld(t *testing.T, what string, match func(apitype.Frame) bool) heldFrame {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case hf := <-p.held:
			if match(hf.f) {
				return hf
			}
		case <-timeout:
			t.Fatalf("the proxy held no %s within 20s", what)
		}
	}
}

// nextRelease waits for the agent's answer to a release of card.
func (p *gateProxy) nextRelease(t *testing.T, card string, within time.Duration) string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case r := <-p.releases:
			if strings.HasPrefix(r, card+" ") {
				return strings.TrimPrefix(r, card+" ")
			}
		case <-timeout:
			t.Fatalf("no release of card %s reached the agent within %v", card, within)
			return ""
		}
	}
}

// trustedIn returns the trusted time a ping frame gives card.
func trustedIn(f apitype.Frame, card string) (time.Duration, bool) {
	if f.Type != apitype.FramePing {
		return 0, false
	}
	for _, tc := range f.Claims {
		if tc.Card == card {
			return time.Duration(tc.TrustedMS) * time.Millisecond, true
		}
	}
	return 0, false
}
