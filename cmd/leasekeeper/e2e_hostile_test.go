package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	"github.com/leasekeeper/leasekeeper/internal/mongotest"
	"github.com/leasekeeper/leasekeeper/socketapi"
)

// These tests send hostile names to every route of a real agent whose store
// runs in its plugin child process, as in production, while a worker holds
// a live claim. Reads are open to any peer that can connect, so whatever a
// request carries, the answer must be the request's own 4xx, never a
// failure of the store: the plugin keeps its pid and the claim its epoch.

// heldCard is the card the live worker holds. No hostile request names it.
const heldCard = "held"

// hostileNames are names no store may be asked about: bytes that are not
// UTF-8 (a stray continuation byte, a truncated sequence, overlong
// encodings, an encoded surrogate, a code point past U+10FFFF), NUL and
// other control characters (C0, DEL, C1), surrounding whitespace, and
// lengths from just over the id limit to kilobytes. The empty name is only
// sent in bodies: in a path it is an empty segment (routing, not a name),
// and an empty query value is the parameter's own default.
var hostileNames = []string{
	"\xff", "\xc0", "\xc3", "a\xffb", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
	"\x00", "a\x00b", "\x01", "\x1b[2J", "\x7f", "\u0085", "line\nbreak", "\t",
	" lead", "trail ",
	strings.Repeat("x", board.MaxIDBytes+1), strings.Repeat("é", board.MaxIDBytes/2+1), strings.Repeat("x", 8<<10),
	"",
}

// routeInput says where a route takes names: its path wildcards (from the
// pattern), the query parameters in query (each with a well-formed value)
// and the JSON string slots of body, a template whose verbs %[1]s, %[2]s...
// take one JSON string each, well-formed ones in good.
type routeInput struct {
	query map[string]string
	body  string
	good  []string
}

// sweepQuery is the board routes' query, modes off: a hostile value in
// either is refused, and the sweep itself still runs for real.
var sweepQuery = map[string]string{"dry_run": "false", "progress": "false"}

// routeInputs covers every route of socketapi.Routes; a route missing here
// fails the tests, so a new route cannot go unexercised.
var routeInputs = map[string]routeInput{
	"POST /v1/claims":                      {body: `{"card":%[1]s}`, good: []string{`"nope"`}},
	"POST /v1/starts":                      {body: `{"card":%[1]s,"run_id":%[2]s,"checkpoint":%[3]s}`, good: []string{`"nope"`, `"r1"`, `"k"`}},
	"POST /v1/claims/{card}/finish":        {body: `{"epoch":1,"run_id":%[1]s,"status":%[2]s,"failure_code":%[3]s}`, good: []string{`"r1"`, `"finished"`, `"E1"`}},
	"DELETE /v1/claims/{card}":             {query: map[string]string{"epoch": "1"}},
	"PUT /v1/claims/{card}/state":          {body: `{"epoch":1,"to":%[1]s,"from":%[2]s,"reason":%[3]s}`, good: []string{`"done"`, `"in_progress"`, `"run_finished"`}},
	"PUT /v1/claims/{card}/last-run":       {body: `{"epoch":1,"run_id":%[1]s}`, good: []string{`"r1"`}},
	"PUT /v1/claims/{card}/awaiting-input": {body: `{"epoch":1,"awaiting_input":true}`},
	"PUT /v1/claims/{card}/gave-up":        {body: `{"epoch":1,"gave_up":{"reason":%[1]s,"run_id":%[2]s,"state":%[3]s}}`, good: []string{`"stuck"`, `"r1"`, `"failed"`}},
	"POST /v1/claims/{card}/runs":          {body: `{"epoch":1,"id":%[1]s,"status":%[2]s,"checkpoint":%[3]s}`, good: []string{`"r1"`, `"running"`, `"k"`}},
	"PATCH /v1/runs/{id}": {body: `{"if_status":%[1]s,"status":%[2]s,"continuation":%[3]s,"failure_code":%[4]s,"checkpoint":%[5]s}`,
		good: []string{`"running"`, `"finished"`, `"none"`, `"E1"`, `"k"`}},
	"POST /v1/keepalive":           {body: `{"unknown":%[1]s}`, good: []string{`"x"`}},
	"GET /v1/watch":                {query: map[string]string{"after": "0"}},
	"GET /v1/cards":                {query: map[string]string{"state": "backlog", "limit": "10", "claimed": "false"}},
	"GET /v1/cards/{id}":           {},
	"GET /v1/runs":                 {query: map[string]string{"card": "nope", "status": "finished", "limit": "10"}},
	"GET /v1/runs/{id}":            {},
	"GET /v1/status":               {},
	"GET /v1/board":                {},
	"GET /v1/events":               {query: map[string]string{"after": "0", "limit": "10", "follow": "false"}},
	"GET /v1/events/head":          {},
	"POST /v1/cards":               {body: `{"id":%[1]s,"title":%[2]s,"state":%[3]s,"labels":[%[4]s],"depends_on":[%[5]s]}`, good: []string{`"new"`, `"t"`, `"backlog"`, `"l"`, `"nope"`}},
	"PUT /v1/cards/{id}/state":     {body: `{"to":%[1]s,"reason":%[2]s}`, good: []string{`"ready"`, `""`}},
	"POST /v1/cards/{id}/reopen":   {body: `{"to":%[1]s,"reason":%[2]s}`, good: []string{`"ready"`, `""`}},
	"PATCH /v1/cards/{id}/labels":  {body: `{"add":[%[1]s],"remove":[%[2]s]}`, good: []string{`"a"`, `"b"`}},
	"PUT /v1/cards/{id}/labels":    {body: `{"labels":[%[1]s]}`, good: []string{`"a"`}},
	"DELETE /v1/cards/{id}/claim":  {},
	"DELETE /v1/cards/{id}":        {query: map[string]string{"force": "false"}},
	"POST /v1/prune":               {body: `{"dry_run":true,"unknown":%[1]s}`, good: []string{`"x"`}},
	"POST /v1/reaper/pass":         {query: map[string]string{"dry_run": "true"}},
	"POST /v1/board/states/rename": {query: sweepQuery, body: `{"from":%[1]s,"to":%[2]s}`, good: []string{`"nope"`, `"nope2"`}},
	"POST /v1/board/states/delete": {query: sweepQuery, body: `{"state":%[1]s,"into":%[2]s}`, good: []string{`"nope"`, `"backlog"`}},
	"POST /v1/board/labels/rename": {query: sweepQuery, body: `{"from":%[1]s,"to":%[2]s}`, good: []string{`"nope"`, `"nope2"`}},
	"POST /v1/board/labels/merge":  {query: sweepQuery, body: `{"from":[%[1]s],"into":%[2]s}`, good: []string{`"nope"`, `"nope2"`}},
	"POST /v1/board/labels/delete": {query: sweepQuery, body: `{"label":%[1]s}`, good: []string{`"nope"`}},
	"POST /v1/board/retry":         {body: `{"backoff":%[1]s}`, good: []string{`"1s"`}},
}

// hostileRequest is one request of a sweep. inputless marks the one request
// sent to a route that takes no input at all (its hostile query parameter
// is not one it reads): it must simply answer.
type hostileRequest struct {
	method, target string
	body           []byte
	inputless      bool
}

func (r hostileRequest) String() string {
	b := r.body
	if len(b) > 120 {
		b = append(b[:120:120], "..."...)
	}
	t := r.target
	if len(t) > 160 {
		t = t[:160] + "..."
	}
	return fmt.Sprintf("%s %s %q", r.method, t, b)
}

// jsonString quotes s as a JSON string but keeps bytes that are not UTF-8
// as they are, so the raw body carries them (json.Marshal would replace
// them with U+FFFD before the agent could see them). Quotes, backslashes
// and C0 controls are escaped, so those reach the agent as the characters
// themselves.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// hostileRequests are the requests that put name into rt: in each path
// wildcard, each query parameter and each body slot, one place at a time,
// every other place well-formed (and naming cards and runs that do not
// exist, so nothing a request could do touches the held card).
func hostileRequests(rt socketapi.Route, name string) ([]hostileRequest, error) {
	in, ok := routeInputs[rt.Method+" "+rt.Pattern]
	if !ok {
		return nil, fmt.Errorf("no hostile inputs for %s %s: add the route to routeInputs", rt.Method, rt.Pattern)
	}
	path := func(seg string) string {
		p := rt.Pattern
		for _, w := range []string{"{card}", "{id}"} {
			p = strings.ReplaceAll(p, w, seg)
		}
		return p
	}
	query := func(param, v string) string {
		q := url.Values{}
		for k, good := range in.query {
			q.Set(k, good)
		}
		if param != "" {
			q.Set(param, v)
		}
		if len(q) == 0 {
			return ""
		}
		return "?" + q.Encode()
	}
	body := func(slot int, v string) []byte {
		if in.body == "" {
			return nil
		}
		args := make([]any, len(in.good))
		for i, g := range in.good {
			args[i] = g
			if i == slot {
				args[i] = jsonString(v)
			}
		}
		return []byte(fmt.Sprintf(in.body, args...))
	}

	var out []hostileRequest
	if strings.Contains(rt.Pattern, "{") && name != "" {
		out = append(out, hostileRequest{rt.Method, path(url.PathEscape(name)) + query("", ""), body(-1, ""), false})
	}
	if name != "" {
		for param := range in.query {
			out = append(out, hostileRequest{rt.Method, path("nope") + query(param, name), body(-1, ""), false})
		}
	}
	for slot := range in.good {
		out = append(out, hostileRequest{rt.Method, path("nope") + query("", ""), body(slot, name), false})
	}
	if !strings.Contains(rt.Pattern, "{") && len(in.query) == 0 && in.body == "" && name != "" {
		out = append(out, hostileRequest{rt.Method, path("") + "?" + url.Values{"x": {name}}.Encode(), nil, true})
	}
	return out, nil
}

// socketClient speaks HTTP to the agent's socket, one connection per
// request, so no request inherits a connection another one left behind.
func socketClient(sock string) *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// answer is what the agent said to one request.
type answer struct {
	status int
	ctype  string
	body   []byte
	err    apitype.ErrorBody
}

func send(hc *http.Client, r hostileRequest) (answer, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequest(r.method, "http://leasekeeper"+r.target, body)
	if err != nil {
		return answer{}, err
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type")}
	if resp.StatusCode < 300 {
		// A 2xx may be a stream (watch, events follow): do not wait on it.
		return a, nil
	}
	if a.body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20)); err != nil {
		return a, err
	}
	if err := json.Unmarshal(a.body, &a.err); err != nil {
		return a, fmt.Errorf("status %d with a body that is not a JSON error (%v): %q", a.status, err, a.body)
	}
	return a, nil
}

// judge returns what is wrong with the answer to r, or "". strict: every
// place r fills is hostile, so the request must be refused.
func judge(r hostileRequest, a answer, strict bool) string {
	switch {
	case r.inputless && a.status != http.StatusOK:
		return fmt.Sprintf("status %d (%s), want 200: the route takes no input", a.status, a.body)
	case r.inputless:
		return ""
	case a.err.Code == apitype.CodeOutcomeUnknown:
		return fmt.Sprintf("answered %s (%d): the request, not the store, was at fault: %s", a.err.Code, a.status, a.err.Error)
	case a.status >= 500:
		return fmt.Sprintf("status %d %s: %s", a.status, a.err.Code, a.err.Error)
	case a.status >= 300 && (a.ctype != "application/json" || a.err.Code == ""):
		return fmt.Sprintf("status %d with Content-Type %q and body %q: want a JSON error", a.status, a.ctype, a.body)
	case strict && (a.status < 400 || a.status >= 500):
		return fmt.Sprintf("status %d, want a 4xx refusal", a.status)
	}
	return ""
}

// liveClaim is the held claim as the agent reports it, and the store
// plugin process behind it.
type liveClaim struct {
	epoch     int64
	trusted   int64
	pluginPID int
	restarts  int
}

func claimIn(st apitype.Status) (liveClaim, error) {
	if st.Store.Plugin == nil {
		return liveClaim{}, fmt.Errorf("status shows no store plugin (backend %s): the store must run in its plugin process here", st.Backend)
	}
	lc := liveClaim{epoch: -1, pluginPID: st.Store.Plugin.PID, restarts: st.Store.Plugin.Restarts}
	for _, h := range st.Claims {
		if h.Card == heldCard {
			lc.epoch, lc.trusted = h.Epoch, h.TrustedMS
		}
	}
	return lc, nil
}

// statusOver reads /v1/status through hc, as `leasekeeper status --json`
// does, for the loops that must not spawn a process per check.
func statusOver(hc *http.Client) (apitype.Status, error) {
	resp, err := hc.Get("http://leasekeeper/v1/status")
	if err != nil {
		return apitype.Status{}, err
	}
	defer resp.Body.Close()
	var st apitype.Status
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status: HTTP %d", resp.StatusCode)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// holdCard creates heldCard and starts `leasekeeper claim heldCard -- sleep
// 600` in a's sandbox, and returns the claim once the agent renews it.
func holdCard(t testing.TB, a *agentproc.Agent) (liveClaim, <-chan struct{}) {
	t.Helper()
	a.MustRun("card", "create", heldCard)
	cmd := exec.Command(binary, "claim", heldCard, "--", "sleep", "600")
	cmd.Env, cmd.Dir = a.Environ(), a.Dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	var lc liveClaim
	agentproc.WaitFor(t, 30*time.Second, "the worker's claim to be held", func() bool {
		var err error
		if lc, err = claimIn(a.Status()); err != nil {
			t.Fatal(err)
		}
		return lc.epoch > 0 && lc.trusted > 0
	})
	return lc, done
}

// checkClaimSurvived fails t unless the worker still holds its claim at the
// same epoch, the agent still trusts it, and the plugin is the same
// process, never restarted.
func checkClaimSurvived(t testing.TB, before, now liveClaim, worker <-chan struct{}) {
	t.Helper()
	select {
	case <-worker:
		t.Errorf("the claiming worker exited")
	default:
	}
	if now.epoch != before.epoch || now.trusted <= 0 {
		t.Errorf("held claim: epoch %d trusted %dms, want epoch %d still trusted", now.epoch, now.trusted, before.epoch)
	}
	if now.pluginPID != before.pluginPID || now.restarts != before.restarts {
		t.Errorf("store plugin: pid %d after %d restarts, want pid %d after %d: a request was taken for a broken plugin",
			now.pluginPID, now.restarts, before.pluginPID, before.restarts)
	}
}

func TestE2EHostileNamesLeaveClaimsAndThePluginAlone(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"bolt", "mongo"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			if backend == "mongo" {
				cfg := fmt.Sprintf("socket: %s\nstore: {backend: mongo, uri: %q, database: %s}\n",
					e.Socket, mongotest.URI(t), mongotest.Database(t))
				if err := os.WriteFile(e.Config, []byte(cfg), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			e.Start()
			before, worker := holdCard(t, e.Agent)
			heldBefore := e.Card(heldCard)

			hc := socketClient(e.Socket)
			var sent int
			for _, rt := range socketapi.Routes() {
				for _, name := range hostileNames {
					reqs, err := hostileRequests(rt, name)
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range reqs {
						sent++
						a, err := send(hc, r)
						if err != nil {
							t.Errorf("%s: %v", r, err)
							continue
						}
						if bad := judge(r, a, true); bad != "" {
							t.Errorf("%s: %s", r, bad)
						}
					}
				}
			}
			t.Logf("sent %d hostile requests to %d routes", sent, len(socketapi.Routes()))

			now, err := claimIn(e.Status())
			if err != nil {
				t.Fatal(err)
			}
			checkClaimSurvived(t, before, now, worker)
			if c := e.Card(heldCard); c.Claim != heldBefore.Claim || c.ClaimEpoch != heldBefore.ClaimEpoch {
				t.Errorf("stored claim on %s: %s@%d, want %s@%d", heldCard, c.Claim, c.ClaimEpoch, heldBefore.Claim, heldBefore.ClaimEpoch)
			}
			if ids := e.MustRun("card", "ls", "--json"); strings.Contains(ids, "\ufffd") {
				t.Errorf("a card was stored with U+FFFD in place of bytes that were not UTF-8:\n%s", ids)
			}
		})
	}
}

// FuzzSocketNames drives a running agent's socket with arbitrary names on
// every route (the seeds put every hostile name on some route and some
// hostile name on every route, and run as a normal test). Whatever the
// name, no answer is a 5xx or outcome_unknown, errors are JSON, a name the
// store would refuse is refused, and the live claim and the store plugin
// survive every input:
//
//	go test -run '^$' -fuzz FuzzSocketNames ./cmd/leasekeeper
func FuzzSocketNames(f *testing.F) {
	routes := socketapi.Routes()
	for i := range max(len(routes), len(hostileNames)) {
		f.Add(uint8(i%len(routes)), hostileNames[i%len(hostileNames)])
	}
	a := agentproc.New(f, binary, "")
	a.Start()
	before, worker := holdCard(f, a)
	hc := socketClient(a.Socket)
	boardResp, err := hc.Get("http://leasekeeper/v1/board")
	if err != nil {
		f.Fatal(err)
	}
	var shown apitype.BoardResponse
	err = json.NewDecoder(boardResp.Body).Decode(&shown)
	boardResp.Body.Close()
	if err != nil {
		f.Fatal(err)
	}
	stateNames := board.Board{States: shown.States}

	f.Fuzz(func(t *testing.T, route uint8, name string) {
		if name == heldCard || stateNames.Has(name) {
			// A well-formed request naming the held card or a column may
			// rightly change them (an operator may force-release, rename).
			t.Skip()
		}
		rt := routes[int(route)%len(routes)]
		reqs, err := hostileRequests(rt, name)
		if err != nil {
			t.Fatal(err)
		}
		strict := board.ValidateName("name", name) != nil
		for _, r := range reqs {
			a, err := send(hc, r)
			if err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			if bad := judge(r, a, strict); bad != "" {
				t.Errorf("%s: %s", r, bad)
			}
		}
		st, err := statusOver(hc)
		if err != nil {
			t.Fatal(err)
		}
		now, err := claimIn(st)
		if err != nil {
			t.Fatal(err)
		}
		checkClaimSurvived(t, before, now, worker)
	})
}
