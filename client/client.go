// Package client is the Go client of the leasekeeper agent: workers claim
// cards and write through it, and the command line drives the operator
// verbs through it. It uses the standard library only (plus the project's
// wire and domain types), which a test enforces (TestImportsStdlibOnly), so
// linking it into a worker costs nothing: no third-party module, no other
// package of the project.
//
// The zero value is ready to use:
//
//	var c client.Client
//	cl, err := c.Claim(ctx, "card-1")
//	if err != nil { ... }
//	defer cl.Release(context.WithoutCancel(ctx))
//	doWork(cl.Context())
//
// A Claim's Context is cancelled when the agent reports the claim lost and,
// on the client's own clock, when the agent has been silent for as long as
// it trusted the lease; a claim given up that way is also handed back to
// the agent: see Claim.Context.
//
// A worker that would rather wait than poll uses ClaimWait, ClaimNextWait
// or StartOptions.Wait, and a script WaitCard: they are woken by the
// agent's event log, read from its head before each wait's first try so no
// change is missed (DESIGN.md#waiting).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
)

// Errors of the socket, re-exported so callers need only this package.
// Store errors come back as the board sentinels: errors.Is(err,
// board.ErrClaimConflict), board.AsClaimConflict and friends work.
var (
	ErrForbidden    = apitype.ErrForbidden
	ErrUnauthorized = apitype.ErrUnauthorized
	ErrBadRequest   = apitype.ErrBadRequest
	ErrTooLarge     = apitype.ErrTooLarge
	ErrUnavailable  = apitype.ErrUnavailable
	ErrInternal     = apitype.ErrInternal
)

// Client talks to the agent over its Unix socket. The zero value dials
// Socket if set, else $LEASEKEEPER_SOCKET, else apitype.DefaultSocketPath().
// A Client must not be copied after first use.
type Client struct {
	// Socket is the agent's socket path; empty means the default lookup.
	Socket string

	once sync.Once
	// hc carries the short requests. Its transport is used directly
	// (send), not through an http.Client: the agent never redirects and
	// sets no cookies, and http.Client's redirect bookkeeping copies every
	// request's headers, one more allocation per request on the hot path.
	hc     *http.Transport
	stream *http.Client // long-lived streams (watch, events follow)
	self   string       // "<host>-<pid>" as this process sees itself
	// selfHeader is self as the value of the worker header.
	selfHeader []string

	mu     sync.Mutex
	claims map[string]*Claim // open claims by card
	// lost remembers recent claim_lost frames by card and epoch, for a
	// frame that arrives between the agent's grant and the Claim's
	// registration here.
	lost map[string]int64
	// handingBack holds, by card, the release in flight of a claim this
	// process gave up on by itself; closed when it is done.
	handingBack map[string]chan struct{}
	link        *link // watch stream + keepalive, while claims are open

	// waitBackstop is the safety re-try of a wait (0: DefaultWaitBackstop);
	// waitAfterTry runs between a wait's first try and its follow of the
	// log. Tests set both (export_test.go).
	waitBackstop time.Duration
	waitAfterTry func()
}

func (c *Client) init() {
	c.once.Do(func() {
		path := apitype.SocketPath(c.Socket)
		dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		c.hc = &http.Transport{
			DialContext: dial, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second,
			// The agent never compresses its answers; asking for gzip only
			// costs a header per request and a check per answer.
			DisableCompression: true,
		}
		c.stream = &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
		host, _ := os.Hostname()
		c.self = host + "-" + strconv.Itoa(os.Getpid())
		c.selfHeader = []string{c.self}
		c.claims = map[string]*Claim{}
		c.lost = map[string]int64{}
		c.handingBack = map[string]chan struct{}{}
	})
}

var (
	workerHeaderKey = http.CanonicalHeaderKey(apitype.WorkerHeader)
	jsonContentType = []string{"application/json"}
)

// SocketPath is the path this client dials.
func (c *Client) SocketPath() string { return apitype.SocketPath(c.Socket) }

// request builds a request to the agent. The host part is a placeholder:
// the transport always dials the socket.
func (c *Client) request(ctx context.Context, method, path string, query url.Values, body any) (*http.Request, error) {
	c.init()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := "http://leasekeeper" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header["Content-Type"] = jsonContentType
	}
	// The agent reads this only when it cannot see our pid (a foreign pid
	// namespace) and runs in keepalive mode. One value shared by every
	// request (the transport only reads it), set under its canonical key.
	req.Header[workerHeaderKey] = c.selfHeader
	return req, nil
}

// do sends a request and decodes a JSON answer into out (nil: discard).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	req, err := c.request(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return fmt.Errorf("leasekeeper agent at %s: %w", c.SocketPath(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return decodeError(resp)
	}
	// The whole answer is read before it is decoded: the connection goes
	// back to the idle pool as soon as its body is drained, and one
	// pooled buffer replaces a json.Decoder's own per request.
	buf := answerBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledAnswer {
			buf.Reset()
			answerBufs.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return fmt.Errorf("decoding agent answer to %s %s: %w", method, path, err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(buf.Bytes(), out); err != nil {
		return fmt.Errorf("decoding agent answer to %s %s: %w", method, path, err)
	}
	return nil
}

// answerBufs holds the buffers answers are read into; one larger than
// maxPooledAnswer (a long card list) is left to the collector.
var answerBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledAnswer = 64 << 10

// send is http.Client.Do without the client: the transport's round trip,
// its error wrapped as http.Client wraps it (a *url.Error naming the
// method and URL), so callers that tell a refused connection from an
// answer see the same error either way.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.RoundTrip(req)
	if err != nil {
		m := req.Method
		return nil, &url.Error{Op: m[:1] + strings.ToLower(m[1:]), URL: req.URL.String(), Err: err}
	}
	return resp, nil
}

// decodeError turns an error response into an *apitype.Error, which
// unwraps to the sentinel of its code.
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &apitype.Error{Status: resp.StatusCode}
	if err := json.Unmarshal(b, &e.Body); err != nil || e.Body.Code == "" {
		e.Body = apitype.ErrorBody{Error: string(bytes.TrimSpace(b))}
	}
	return e
}

// stream opens a long-lived NDJSON response.
func (c *Client) openStream(ctx context.Context, path string, query url.Values) (*http.Response, error) {
	req, err := c.request(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.stream.Do(req)
	if err != nil {
		return nil, fmt.Errorf("leasekeeper agent at %s: %w", c.SocketPath(), err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// Watch reads the watch stream from after (-1: from now) and calls fn for
// each frame until ctx ends, the stream breaks or fn returns an error. It is
// the raw stream; Claims follow it on their own.
func (c *Client) Watch(ctx context.Context, after int64, fn func(apitype.Frame) error) error {
	q := url.Values{}
	if after >= 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	resp, err := c.openStream(ctx, "/v1/watch", q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var f apitype.Frame
		if err := dec.Decode(&f); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if err := fn(f); err != nil {
			return err
		}
	}
}
