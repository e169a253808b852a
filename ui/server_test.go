package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	"github.com/leasekeeper/leasekeeper/ui"
)

// These tests run the UI server in-process against a real agent process
// (a real socket and bbolt file), and talk to it over real loopback HTTP.

var binary string

func TestMain(m *testing.M) { agentproc.Main(m, map[string]*string{"./cmd/leasekeeper": &binary}) }

// fixture is an agent, a UI server in front of it and the server's
// address.
type fixture struct {
	t     testing.TB
	agent *agentproc.Agent
	srv   *ui.Server
	base  string // http://127.0.0.1:PORT
	token string
}

func start(t *testing.T, agentYAML string) *fixture {
	t.Helper()
	return startWith(t, agentYAML, nil)
}

// startWith is start with the UI server's config adjusted by edit.
func startWith(t *testing.T, agentYAML string, edit func(*ui.Config)) *fixture {
	t.Helper()
	a := agentproc.New(t, binary, "lease: 3s\n"+agentYAML)
	a.Start()
	return serveWith(t, a, a.Socket, edit)
}

// serve starts a UI server in front of agent a, reaching it at socket.
func serve(t testing.TB, a *agentproc.Agent, socket string) *fixture {
	t.Helper()
	return serveWith(t, a, socket, nil)
}

// serveWith is serve with the UI server's config adjusted by edit.
func serveWith(t testing.TB, a *agentproc.Agent, socket string, edit func(*ui.Config)) *fixture {
	t.Helper()
	cfg := ui.Config{Client: &client.Client{Socket: socket}, Listen: "127.0.0.1:0"}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := ui.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, agent: a, srv: srv, base: "http://" + u.Host, token: u.Query().Get("token")}
}

// browser is an HTTP client that keeps cookies and does not follow
// redirects, so a test sees each answer.
func browser(t testing.TB) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{
		Jar:           jar,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// login opens the printed URL with c and checks the token is traded for a
// cookie.
func (f *fixture) login(c *http.Client) {
	f.t.Helper()
	resp, err := c.Get(f.srv.URL())
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		f.t.Fatalf("GET the printed URL: %d to %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// sessionCookie trades the printed URL's token for the session cookie and
// returns it.
func (f *fixture) sessionCookie() *http.Cookie {
	f.t.Helper()
	resp, err := browser(f.t).Get(f.srv.URL())
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	cs := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cs) != 1 {
		f.t.Fatalf("GET the printed URL: %d with cookies %v, want 303 and one cookie", resp.StatusCode, cs)
	}
	return cs[0]
}

type answer struct {
	code int
	body string
	hdr  http.Header
}

func (f *fixture) do(c *http.Client, method, path string, hdr map[string]string) answer {
	f.t.Helper()
	req, err := http.NewRequest(method, f.base+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return answer{resp.StatusCode, string(b), resp.Header}
}

func TestListenRefusesNonLoopback(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0", "192.0.2.1:0"} {
		srv, err := ui.Listen(ui.Config{Client: &client.Client{}, Listen: addr})
		if !errors.Is(err, ui.ErrNotLoopback) {
			if srv != nil {
				srv.Serve(canceled())
			}
			t.Errorf("Listen(%q) = %v, want ErrNotLoopback", addr, err)
		}
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestTokenIsRequired(t *testing.T) {
	t.Parallel()
	f := start(t, "")
	f.agent.MustRun("card", "create", "c1")
	anon := browser(t)
	for _, path := range []string{"/", "/board", "/cards/c1", "/cards/c1/fragment", "/events", "/static/app.js"} {
		if got := f.do(anon, "GET", path, nil); got.code != http.StatusUnauthorized {
			t.Errorf("GET %s without the cookie: %d, want 401", path, got.code)
		}
	}
	if got := f.do(anon, "GET", "/?token=wrong", nil); got.code != http.StatusUnauthorized {
		t.Errorf("GET /?token=wrong: %d, want 401", got.code)
	}
	if got := f.do(anon, "GET", "/?token="+f.token[:len(f.token)-1], nil); got.code != http.StatusUnauthorized {
		t.Errorf("GET with the token less a character: %d, want 401", got.code)
	}
	// A cookie of another port's UI (another token) is no entry either.
	forged := &http.Cookie{Name: "leasekeeper_ui_1", Value: f.token}
	if got := f.do(anon, "GET", "/", map[string]string{"Cookie": forged.String()}); got.code != http.StatusUnauthorized {
		t.Errorf("GET / with the token under another port's cookie name: %d, want 401", got.code)
	}

	b := browser(t)
	resp, err := b.Get(f.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("GET the printed URL: %d, want 303", resp.StatusCode)
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies set: %v, want one", cookies)
	}
	if c := cookies[0]; !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Value == "" || c.Path != "/" {
		t.Errorf("cookie = %+v, want a value, HttpOnly, SameSite=Strict, Path=/", c)
	}
	if c := cookies[0]; c.Value == f.token {
		t.Errorf("the cookie's value is the URL's token; want a secret of its own")
	}
	// The URL's token under the cookie's own name is no entry: only the
	// secret minted at the trade is.
	asToken := &http.Cookie{Name: cookies[0].Name, Value: f.token}
	if got := f.do(anon, "GET", "/", map[string]string{"Cookie": asToken.String()}); got.code != http.StatusUnauthorized {
		t.Errorf("GET / with the URL's token as the cookie: %d, want 401", got.code)
	}
	if loc := resp.Header.Get("Location"); strings.Contains(loc, "token") {
		t.Errorf("redirect to %q keeps the token in the address", loc)
	}
	got := f.do(b, "GET", "/", nil)
	if got.code != http.StatusOK || !strings.Contains(got.body, `data-card="c1"`) {
		t.Fatalf("GET / with the cookie: %d, want 200 and card c1:\n%s", got.code, got.body)
	}
	for _, h := range []string{"Content-Security-Policy", "X-Frame-Options", "Referrer-Policy"} {
		if got.hdr.Get(h) == "" {
			t.Errorf("GET / answered without %s", h)
		}
	}
	if v := got.hdr.Get("Access-Control-Allow-Origin"); v != "" {
		t.Errorf("Access-Control-Allow-Origin = %q, want none", v)
	}
}

func TestWrongHostIsRefused(t *testing.T) {
	t.Parallel()
	f := start(t, "")
	b := browser(t)
	port := strings.TrimPrefix(f.base, "http://127.0.0.1:")
	tests := []struct {
		host string
		want int
	}{
		{"127.0.0.1:" + port, http.StatusOK},
		{"localhost:" + port, http.StatusOK},
		{"LOCALHOST:" + port, http.StatusOK},
		{"rebind.attacker.example:" + port, http.StatusForbidden},
		{"localhost.attacker.example:" + port, http.StatusForbidden},
		{"127.0.0.1", http.StatusForbidden},
		{"localhost:1", http.StatusForbidden},
		{"[::1]:" + port, http.StatusForbidden}, // not the address it listens on
	}
	// The cookie jar files cookies by host name; set the cookie by hand
	// so every Host below carries it.
	cookie := f.sessionCookie().String()
	for _, tc := range tests {
		if got := f.do(b, "GET", "/board", map[string]string{"Host": tc.host, "Cookie": cookie}); got.code != tc.want {
			t.Errorf("GET /board with Host %q: %d, want %d", tc.host, got.code, tc.want)
		}
	}
	// A rebinding page carries the token only if it stole it, and is
	// refused even then.
	if got := f.do(browser(t), "GET", "/?token="+f.token, map[string]string{"Host": "rebind.attacker.example:" + port}); got.code != http.StatusForbidden {
		t.Errorf("GET the token URL with a foreign Host: %d, want 403", got.code)
	}
}

// workerScript loops until killed, recording its pid.
const workerScript = `echo $$ > "$1"; while :; do sleep 0.05; done`

// deadClaim leaves card claimed by a `leasekeeper claim` killed with
// SIGKILL, CMD and all; with the watchdog's gate off nothing decides it,
// so the claim stays, its lease expired once the agent sees the pid gone.
func deadClaim(t *testing.T, a *agentproc.Agent, card string) {
	t.Helper()
	cmd := exec.Command(a.Binary, "claim", card, "--", "sh", "-c", workerScript, "sh", "worker.pid")
	cmd.Env, cmd.Dir = a.Environ(), a.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(a.Dir, "worker.pid")
	agentproc.WaitFor(t, 20*time.Second, "the claim's command to start", func() bool {
		_, err := os.Stat(pidFile)
		return err == nil
	})
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	// The supervisor kills CMD's tree when claim dies; the agent expires
	// the lease at its next tick, once it sees the claimer's pid gone.
	agentproc.WaitFor(t, 20*time.Second, "the dead claim's lease to expire", func() bool {
		c := a.Card(card)
		return c.Claimed() && time.Until(c.ClaimLeaseUntil) < 0
	})
}

// decisionCells are a decision row's action and table row, as the preview
// renders them.
var decisionCells = regexp.MustCompile(`<td class="decision">[a-z_]+</td><td class="row">[0-9]+</td>`)

func TestNoWriteRouteIsReachable(t *testing.T) {
	t.Parallel()
	// The gate off: the dead claim must stay for the preview and the
	// Needs-attention lane to show it (deadClaim).
	f := start(t, "reaper: {enabled: false}\n")
	f.agent.MustRun("card", "create", "c1")
	f.agent.MustRun("card", "create", "c2")
	deadClaim(t, f.agent, "c1")
	before := f.agent.Events()
	c1 := f.agent.Card("c1")

	b := browser(t)
	f.login(b)
	origin := map[string]string{"Origin": f.base}
	paths := []string{"/", "/board", "/cards/c1", "/cards/c1/fragment", "/cards/c1/claim", "/events", "/preview",
		"/static/app.js", "/v1/cards", "/v1/cards/c1", "/v1/cards/c1/claim", "/v1/cards/c1/state", "/v1/claims",
		"/v1/claims/c1", "/v1/reaper/pass", "/v1/board/states/rename"}
	for _, p := range paths {
		for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
			if m == "POST" && p == "/preview" {
				continue
			}
			got := f.do(b, m, p, origin)
			if got.code != http.StatusMethodNotAllowed && got.code != http.StatusNotFound {
				t.Errorf("%s %s: %d, want 405 or 404", m, p, got.code)
			}
		}
	}
	// The preview is a POST only from the page itself.
	if got := f.do(b, "POST", "/preview", nil); got.code != http.StatusForbidden {
		t.Errorf("POST /preview without Origin: %d, want 403", got.code)
	}
	if got := f.do(b, "POST", "/preview", map[string]string{"Origin": "http://attacker.example"}); got.code != http.StatusForbidden {
		t.Errorf("POST /preview from a foreign origin: %d, want 403", got.code)
	}
	got := f.do(b, "POST", "/preview", origin)
	if got.code != http.StatusOK || !strings.Contains(got.body, `id="preview-result"`) {
		t.Fatalf("POST /preview: %d, want 200 with a result:\n%s", got.code, got.body)
	}
	if !strings.Contains(got.body, `<tr data-card="c1">`) || !decisionCells.MatchString(got.body) {
		t.Errorf("preview shows no decision row for the expired claim on c1:\n%s", got.body)
	}

	after := f.agent.Events()
	if len(after) != len(before) {
		t.Errorf("the agent's log grew from %d to %d events; the UI wrote: %v", len(before), len(after), after[len(before):])
	}
	if now := f.agent.Card("c1"); now.Claim != c1.Claim || now.ClaimEpoch != c1.ClaimEpoch || now.State != c1.State || now.LastRunID != c1.LastRunID {
		t.Errorf("c1 after the UI's requests: %s@%d in %s run %s; before: %s@%d in %s run %s",
			now.Claim, now.ClaimEpoch, now.State, now.LastRunID, c1.Claim, c1.ClaimEpoch, c1.State, c1.LastRunID)
	}
	// The board shows the kept claim in the Needs-attention lane, with why.
	page := f.do(b, "GET", "/", nil)
	if !strings.Contains(page.body, `class="att att-expired" data-card="c1"`) || !strings.Contains(page.body, "gate is off") {
		t.Errorf("the Needs-attention lane lacks the expired claim on c1 and why it stays:\n%s", page.body)
	}
}

func TestHostileNamesRenderAsText(t *testing.T) {
	t.Parallel()
	f := start(t, "")
	const (
		title = `<script>alert(1)</script>`
		label = `"><img src=x onerror=alert(2)>`
		id    = `<i>x</i>`
	)
	f.agent.MustRun("card", "create", id, "--title", title, "--label", label)
	f.agent.MustRun("card", "create", "dep", "--depends-on", id, "--title", `</article><script>alert(3)</script>`)
	b := browser(t)
	f.login(b)
	for _, path := range []string{"/", "/board", "/board/parts", "/cards/" + url.PathEscape(id), "/cards/" + url.PathEscape(id) + "/fragment",
		"/cards/" + url.PathEscape(id) + "/parts", "/cards/dep"} {
		got := f.do(b, "GET", path, nil)
		if got.code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, got.code, got.body)
		}
		for _, raw := range []string{"<script>alert", "<img", "<i>x</i>", "</article><script>"} {
			if strings.Contains(got.body, raw) {
				t.Errorf("GET %s renders %q unescaped", path, raw)
			}
		}
		if !strings.Contains(got.body, "&lt;i&gt;x&lt;/i&gt;") {
			t.Errorf("GET %s does not show the card id as text", path)
		}
	}
	board := f.do(b, "GET", "/", nil).body
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;", `href="/cards/%3Ci%3Ex%3C%2Fi%3E"`} {
		if !strings.Contains(board, want) {
			t.Errorf("board page lacks %q", want)
		}
	}
}

// sse reads the UI's event stream until want accepts a message or the
// bound passes.
type sse struct {
	t    testing.TB
	body io.ReadCloser
	msgs chan map[string]string
}

func (f *fixture) events(c *http.Client) *sse {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", f.base+"/events", nil)
	stream := *c
	stream.Timeout = 0
	resp, err := stream.Do(req)
	if err != nil {
		cancel()
		f.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		f.t.Fatalf("GET /events: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sse{t: f.t, body: resp.Body, msgs: make(chan map[string]string, 64)}
	f.t.Cleanup(func() { cancel(); resp.Body.Close() })
	go func() {
		defer close(s.msgs)
		sc := bufio.NewScanner(resp.Body)
		msg := map[string]string{}
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				if len(msg) > 0 {
					s.msgs <- msg
				}
				msg = map[string]string{}
				continue
			}
			if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, ":") {
				msg[k] = v
			}
		}
	}()
	return s
}

func (s *sse) await(bound time.Duration, what string, want func(event string, data map[string]any) bool) {
	s.t.Helper()
	timeout := time.After(bound)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				s.t.Fatalf("the event stream ended before %s", what)
			}
			var data map[string]any
			_ = json.Unmarshal([]byte(m["data"]), &data)
			if want(m["event"], data) {
				return
			}
		case <-timeout:
			s.t.Fatalf("no %s within %s", what, bound)
		}
	}
}

func TestEventStreamFollowsTheAgentAcrossARestart(t *testing.T) {
	t.Parallel()
	f := start(t, "")
	b := browser(t)
	f.login(b)
	s := f.events(b)
	s.await(10*time.Second, "hello", func(ev string, _ map[string]any) bool { return ev == "hello" })
	f.agent.MustRun("card", "create", "c1")
	s.await(10*time.Second, "the card_created event of c1", func(ev string, d map[string]any) bool {
		return ev == "change" && d["type"] == string(board.EventCardCreated) && d["card"] == "c1"
	})

	// The agent goes away and comes back on the same store: the server's
	// follower reconnects, tells the page to re-read, and resumes after
	// the last event it read.
	f.agent.Stop()
	f.agent.Start()
	s.await(30*time.Second, "a resync after the agent came back", func(ev string, d map[string]any) bool {
		return ev == "change" && d["resync"] == true
	})
	f.agent.MustRun("card", "create", "c2")
	s.await(10*time.Second, "the card_created event of c2", func(ev string, d map[string]any) bool {
		return ev == "change" && d["card"] == "c2"
	})
	if got := f.do(b, "GET", "/board", nil); !strings.Contains(got.body, `data-card="c2"`) || !strings.Contains(got.body, "following") {
		t.Errorf("board after the restart lacks c2 or the live link:\n%s", got.body)
	}
}
