package socketapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	"github.com/leasekeeper/leasekeeper/pidprobe/pidprobetest"
	"github.com/leasekeeper/leasekeeper/socketapi"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
)

// raw speaks HTTP to the socket with no client library in between, one
// connection per request.
type raw struct {
	t    *testing.T
	path string
	hc   *http.Client
}

func newRaw(t *testing.T, path string) *raw {
	return &raw{t: t, path: path, hc: &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}}
}

type reply struct {
	status int
	body   []byte
	err    apitype.ErrorBody
}

func (r *raw) do(method, path string, hdr http.Header, body io.Reader) reply {
	r.t.Helper()
	req, err := http.NewRequest(method, "http://leasekeeper"+path, body)
	if err != nil {
		r.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	rep := reply{status: resp.StatusCode, body: b}
	if resp.StatusCode >= 300 {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			r.t.Errorf("%s %s: error Content-Type = %q, want application/json (body %q)", method, path, ct, b)
		}
		if err := json.Unmarshal(b, &rep.err); err != nil {
			r.t.Errorf("%s %s: error body %q is not JSON: %v", method, path, b, err)
		}
	}
	return rep
}

func (r *raw) json(method, path string, body string) reply {
	r.t.Helper()
	return r.do(method, path, http.Header{"Content-Type": {"application/json"}}, strings.NewReader(body))
}

// mustAnswer proves the server is still healthy.
func (r *raw) mustAnswer() {
	r.t.Helper()
	if got := r.do("GET", "/v1/status", nil, nil); got.status != http.StatusOK {
		r.t.Fatalf("GET /v1/status after a bad request: status %d, want 200 (%s)", got.status, got.body)
	}
}

func TestSocketFileModeAndRemoval(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	fi, err := os.Stat(a.Path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Mode().Perm(), os.FileMode(0o660); got != want {
		t.Errorf("socket mode = %v, want %v", got, want)
	}
	if fi.Mode().Type() != os.ModeSocket {
		t.Errorf("socket file type = %v, want a socket", fi.Mode().Type())
	}
	a.Stop()
	if _, err := os.Lstat(a.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file after shutdown: Lstat err = %v, want not exist", err)
	}
}

func TestListenerDialsFirst(t *testing.T) {
	t.Parallel()
	t.Run("live agent refused", func(t *testing.T) {
		t.Parallel()
		first := socketapitest.Start(t, socketapitest.Options{})
		s, err := socketapi.New(socketapi.Config{
			Path: first.Path, Store: first.Store, Claims: first.Loop, Prober: stubProber{}, Host: "h",
			Lease: func() time.Duration { return time.Second },
		})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Start(context.Background())
		if !errors.Is(err, socketapi.ErrAgentRunning) {
			t.Fatalf("second agent on a live socket: err = %v, want ErrAgentRunning", err)
		}
		if !strings.Contains(err.Error(), first.Path) {
			t.Errorf("error %q does not name the socket %s", err, first.Path)
		}
		// The first agent still serves.
		newRaw(t, first.Path).mustAnswer()
	})
	t.Run("stale socket removed", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(shortDir(t), "leasekeeper.sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close() // the file stays, nobody answers: a crashed agent's leftover
		if _, err := os.Lstat(path); err != nil {
			t.Fatalf("stale socket not left behind: %v", err)
		}
		a := socketapitest.Start(t, socketapitest.Options{Path: path})
		newRaw(t, a.Path).mustAnswer()
	})
	t.Run("non-socket file kept", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(shortDir(t), "leasekeeper.sock")
		if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
			t.Fatal(err)
		}
		a := socketapitest.Start(t, socketapitest.Options{})
		s, err := socketapi.New(socketapi.Config{
			Path: path, Store: a.Store, Claims: a.Loop, Prober: stubProber{}, Host: "h",
			Lease: func() time.Duration { return time.Second },
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err == nil {
			s.Shutdown(context.Background())
			t.Fatal("Start over a regular file succeeded, want refusal")
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "precious" {
			t.Errorf("regular file after refused start: %q, %v; want it untouched", b, err)
		}
	})
}

type stubProber struct{}

func (stubProber) Identify(context.Context, int) (pidprobe.Identity, error) {
	return pidprobetest.ID(1), nil
}

func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "lk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestBrowserHeadersRefused(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	r := newRaw(t, a.Path)
	for _, tc := range []struct {
		name string
		hdr  http.Header
	}{
		{"origin", http.Header{"Origin": {"http://evil.example"}}},
		{"referer", http.Header{"Referer": {"http://evil.example/page"}}},
		{"origin null", http.Header{"Origin": {"null"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Reads and writes alike.
			for _, req := range []struct{ method, path, body string }{
				{"GET", "/v1/status", ""}, {"GET", "/v1/cards", ""}, {"POST", "/v1/claims", `{"next":true}`},
			} {
				hdr := tc.hdr.Clone()
				hdr.Set("Content-Type", "application/json")
				got := r.do(req.method, req.path, hdr, strings.NewReader(req.body))
				if got.status != http.StatusForbidden || got.err.Code != apitype.CodeForbidden {
					t.Errorf("%s %s: status, code = %d, %q; want 403, forbidden", req.method, req.path, got.status, got.err.Code)
				}
			}
		})
	}
	r.mustAnswer()
}

func TestBadRequestsAreRefusedAndServerSurvives(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	a.Card(t, "c1")
	r := newRaw(t, a.Path)
	huge := `{"card":"` + strings.Repeat("x", 2<<20) + `"}`
	for _, tc := range []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantCode   apitype.Code
	}{
		{"malformed json", "POST", "/v1/claims", `{"card":`, 400, apitype.CodeBadRequest},
		{"not an object", "POST", "/v1/claims", `[1,2,3]`, 400, apitype.CodeBadRequest},
		{"unknown field", "POST", "/v1/claims", `{"card":"c1","marker":"evil-42"}`, 400, apitype.CodeBadRequest},
		{"trailing garbage", "POST", "/v1/claims", `{"card":"c1"} {"card":"c2"}`, 400, apitype.CodeBadRequest},
		{"trailing text", "POST", "/v1/claims", `{"card":"c1"}xyz`, 400, apitype.CodeBadRequest},
		{"wrong type", "POST", "/v1/claims", `{"card":42}`, 400, apitype.CodeBadRequest},
		{"neither card nor next", "POST", "/v1/claims", `{}`, 400, apitype.CodeInvalidArgument},
		{"both card and next", "POST", "/v1/claims", `{"card":"c1","next":true}`, 400, apitype.CodeInvalidArgument},
		{"oversized body", "POST", "/v1/claims", huge, 413, apitype.CodeTooLarge},
		{"oversized operator body", "POST", "/v1/cards", `{"id":"` + strings.Repeat("y", 2<<20) + `"}`, 413, apitype.CodeTooLarge},
		{"unknown route", "GET", "/v1/nope", "", 404, apitype.CodeNotFound},
		{"no version", "GET", "/status", "", 404, apitype.CodeNotFound},
		{"wrong method", "DELETE", "/v1/status", "", 405, apitype.CodeBadRequest},
		{"bad query int", "GET", "/v1/events?after=abc", "", 400, apitype.CodeBadRequest},
		{"bad query bool", "GET", "/v1/events?follow=maybe", "", 400, apitype.CodeBadRequest},
		{"release zero epoch", "DELETE", "/v1/claims/c1?epoch=0", "", 400, apitype.CodeInvalidArgument},
		{"missing card", "GET", "/v1/cards/nope", "", 404, apitype.CodeNotFound},
		{"machine reason from operator", "PUT", "/v1/cards/c1/state", `{"to":"backlog","reason":"watchdog"}`, 400, apitype.CodeInvalidArgument},
		{"set labels without labels", "PUT", "/v1/cards/c1/labels", `{}`, 400, apitype.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := r.json(tc.method, tc.path, tc.body)
			if got.status != tc.wantStatus || got.err.Code != tc.wantCode {
				t.Errorf("status, code = %d, %q; want %d, %q (error %q)", got.status, got.err.Code, tc.wantStatus, tc.wantCode, got.err.Error)
			}
			r.mustAnswer()
		})
	}
	// None of it touched the card.
	c, err := a.Store.GetCard(context.Background(), board.GetCardParams{ID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Claimed() {
		t.Errorf("card claimed by %q after refused requests", c.Claim)
	}
}

func TestGarbageBytesOnSocket(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"binary", []byte{0x00, 0xff, 0x13, 0x37, '\r', '\n', '\r', '\n'}},
		{"not http", []byte("HELLO THERE\r\n\r\n")},
		{"bad request line", []byte("GET\r\n\r\n")},
		{"bad header", []byte("GET /v1/status HTTP/1.1\r\nno colon here\r\n\r\n")},
		{"huge header", append([]byte("GET /v1/status HTTP/1.1\r\nHost: x\r\nX: "), append(bytes.Repeat([]byte("a"), 128<<10), "\r\n\r\n"...)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("unix", a.Path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(tc.payload); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			var code int
			if _, err := fmtSscanf(line, &code); err != nil || code < 400 || code >= 500 {
				t.Errorf("status line %q, want a 4xx", strings.TrimSpace(line))
			}
			newRaw(t, a.Path).mustAnswer()
		})
	}
}

func TestShutdownStopsGrantingKeepsFences(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	a.Card(t, "held")
	a.Card(t, "free")
	r := newRaw(t, a.Path)
	got := r.json("POST", "/v1/claims", `{"card":"held"}`)
	if got.status != 200 {
		t.Fatalf("claim: %d %s", got.status, got.body)
	}
	var cr apitype.ClaimResponse
	if err := json.Unmarshal(got.body, &cr); err != nil {
		t.Fatal(err)
	}
	a.Server.StopGranting()
	got = r.json("POST", "/v1/claims", `{"card":"free"}`)
	if got.status != http.StatusServiceUnavailable || got.err.Code != apitype.CodeUnavailable || !strings.Contains(got.err.Error, "shutting down") {
		t.Errorf("claim while draining: %d %q %q; want 503 unavailable naming the shutdown", got.status, got.err.Code, got.err.Error)
	}
	// A stale epoch is still fenced off, the right one still writes.
	got = r.json("PUT", "/v1/claims/held/state", `{"epoch":`+itoa(cr.Token.Epoch+1)+`,"to":"in_progress"}`)
	if got.status != http.StatusConflict || got.err.Code != apitype.CodeClaimConflict {
		t.Errorf("stale epoch write while draining: %d %q, want 409 claim_conflict", got.status, got.err.Code)
	}
	got = r.json("PUT", "/v1/claims/held/state", `{"epoch":`+itoa(cr.Token.Epoch)+`,"to":"in_progress"}`)
	if got.status != 200 {
		t.Errorf("owner write while draining: %d %s, want 200", got.status, got.body)
	}
	got = r.do("DELETE", "/v1/claims/held?epoch="+itoa(cr.Token.Epoch), nil, nil)
	if got.status != http.StatusNoContent {
		t.Errorf("release while draining: %d %s, want 204", got.status, got.body)
	}
	c, err := a.Store.GetCard(context.Background(), board.GetCardParams{ID: "held"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Claimed() || c.State != board.StateInProgress {
		t.Errorf("card after drain writes: claim %q state %q; want free, in_progress", c.Claim, c.State)
	}
}

func TestEventsFollow(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	r := newRaw(t, a.Path)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://leasekeeper/v1/events?after=0&follow=true", nil)
	resp, err := r.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := r.json("POST", "/v1/cards", `{"id":"followed","title":"t"}`); got.status != http.StatusCreated {
		t.Fatalf("create: %d %s", got.status, got.body)
	}
	dec := json.NewDecoder(resp.Body)
	var ev board.Event
	if err := dec.Decode(&ev); err != nil {
		t.Fatalf("reading the followed stream: %v", err)
	}
	if ev.Type != board.EventCardCreated || ev.Card != "followed" || !strings.HasPrefix(ev.Actor, "uid:") {
		t.Errorf("first followed event = %+v; want card_created for followed by uid:N", ev)
	}
}

func TestWatchResume(t *testing.T) {
	t.Parallel()
	a := socketapitest.Start(t, socketapitest.Options{})
	for _, card := range []string{"a", "b", "c"} {
		a.Server.Notify(apitype.Frame{Type: apitype.FrameLaunch, Card: card, State: board.StateReady})
	}
	// A claim_lost for some other worker must not reach this one.
	a.Server.Notify(apitype.Frame{Type: apitype.FrameClaimLost, Card: "x", Epoch: 1, Marker: "elsewhere-77"})
	a.Server.Notify(apitype.Frame{Type: apitype.FrameLaunch, Card: "d", State: board.StateReady})
	for _, tc := range []struct {
		name      string
		after     string
		wantHello int64
		missed    bool
		wantCards string
	}{
		{"resume mid buffer", "1", 1, false, "b,c,d"},
		{"from the start", "0", 0, false, "a,b,c,d"},
		{"ahead of this agent", "99", 5, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r := newRaw(t, a.Path)
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://leasekeeper/v1/watch?after="+tc.after, nil)
			resp, err := r.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			dec := json.NewDecoder(resp.Body)
			var hello apitype.Frame
			if err := dec.Decode(&hello); err != nil {
				t.Fatal(err)
			}
			if hello.Type != apitype.FrameHello || hello.Seq != tc.wantHello || hello.Missed != tc.missed {
				t.Errorf("hello = %+v; want seq %d missed %v", hello, tc.wantHello, tc.missed)
			}
			var cards []string
			for {
				var f apitype.Frame
				if err := dec.Decode(&f); err != nil {
					t.Fatal(err)
				}
				if f.Type == apitype.FramePing {
					if f.Seq != hello.Seq {
						t.Errorf("first ping seq %d, want the hello position %d", f.Seq, hello.Seq)
					}
					if tc.wantCards == "" {
						break
					}
					continue
				}
				cards = append(cards, f.Card)
				if f.Card == "d" {
					break
				}
			}
			if got := strings.Join(cards, ","); got != tc.wantCards {
				t.Errorf("frames for cards %q, want %q", got, tc.wantCards)
			}
		})
	}
}
