package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
	"github.com/leasekeeper/leasekeeper/ui"
)

// seedBoard writes n cards into a new bbolt file at path before an agent
// opens it, from several goroutines so the group committer shares fsyncs
// (the store's own bulk path). state(i) is card i's state; a card in
// in_progress is claimed by a worker of another host, with a lease of an
// hour. extra, when set, runs on the store afterwards.
func seedBoard(t testing.TB, path string, n int, state func(i int) string, extra func(ctx context.Context, s *boltstore.Store)) {
	t.Helper()
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const workers = 32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				id := fmt.Sprintf("card-%05d", i)
				st := state(i)
				nc := board.CreateCardParams{ID: id, Title: fmt.Sprintf("task %d of the nightly batch", i), State: st, Labels: []string{"team-" + strconv.Itoa(i%7)}}
				if _, err := s.CreateCard(ctx, nc); err != nil {
					errs <- err
					return
				}
				if st == board.StateInProgress {
					if _, err := s.Claim(ctx, board.ClaimParams{Card: id, Marker: board.WorkerMarker("elsewhere", 1000+i), Lease: time.Hour}); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("seed: %v", err)
	}
	if extra != nil {
		extra(ctx, s)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// spread puts 10,000 cards in the default board's columns: 2,000 in the
// backlog, 4,000 ready, 2,000 claimed in progress, 1,000 done, 1,000
// failed.
func spread(i int) string {
	switch {
	case i%10 < 2:
		return board.StateBacklog
	case i%10 < 6:
		return board.StateReady
	case i%10 < 8:
		return board.StateInProgress
	case i%10 == 8:
		return board.StateDone
	}
	return board.StateFailed
}

// updateAnswer is the JSON of GET /board/parts.
type updateAnswer struct {
	Now   int64 `json:"now"`
	Parts []struct {
		K, In, H, HTML string
	} `json:"parts"`
	Error string `json:"error"`
	Down  *struct {
		Message, Detail string
	} `json:"down"`
}

func (f *fixture) update(c *http.Client, path string, have []string) (updateAnswer, int) {
	f.t.Helper()
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	got := f.do(c, "GET", path+sep+"have="+strings.Join(have, "."), nil)
	var a updateAnswer
	if err := json.Unmarshal([]byte(got.body), &a); err != nil {
		f.t.Fatalf("GET %s: %d, not an update: %v\n%.2000s", path, got.code, err, got.body)
	}
	if got.code != http.StatusOK {
		f.t.Fatalf("GET %s: %d %s", path, got.code, a.Error)
	}
	return a, len(got.body)
}

func hashes(a updateAnswer) []string {
	var out []string
	for _, p := range a.Parts {
		out = append(out, p.H)
	}
	return out
}

// sent lists the keys of the parts an update carried the HTML of.
func sent(a updateAnswer) []string {
	var out []string
	for _, p := range a.Parts {
		if p.HTML != "" {
			out = append(out, p.K)
		}
	}
	return out
}

// TestTenThousandCardBoard builds a 10,000-card board in a real bbolt file
// and reads it through the UI as the page does: the page and its first
// update are a page of cards per column, not every card, and an update
// after one card moved carries the columns that changed, not the board.
func TestTenThousandCardBoard(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, binary, "lease: 3s\n")
	seedBoard(t, filepath.Join(a.Dir, "board.db"), 10_000, spread, nil)
	a.Start()
	f := serve(t, a, a.Socket)
	b := browser(t)
	f.login(b)

	start := time.Now()
	page := f.do(b, "GET", "/", nil)
	took := time.Since(start)
	if page.code != http.StatusOK || !strings.Contains(page.body, "10000 of 10000 cards") {
		t.Fatalf("GET /: %d\n%.3000s", page.code, page.body)
	}
	fragment := f.do(b, "GET", "/board", nil)
	t.Logf("10,000 cards: the page %d bytes (%s), the whole live region (GET /board) %d bytes", len(page.body), took.Round(time.Millisecond), len(fragment.body))
	// Each column shows a page of cards, and says how many more.
	for _, want := range []string{`data-state="ready"`, `3950 more (showing 50 of 4000)`, `1950 more (showing 50 of 2000)`} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(page.body, `<article class="card`); n > 7*50 {
		t.Errorf("the page renders %d cards, want at most a page (50) a column", n)
	}
	const budget = 100 << 10
	if len(page.body) > 2*budget || len(fragment.body) > budget {
		t.Errorf("the page is %d bytes and the live region %d: want under %d and %d", len(page.body), len(fragment.body), 2*budget, budget)
	}

	start = time.Now()
	full, fullSize := f.update(b, "/board/parts", nil)
	t.Logf("an update read and rendered in %s", time.Since(start).Round(time.Millisecond))
	idle, idleSize := f.update(b, "/board/parts", hashes(full))
	t.Logf("first update %d bytes, an update with nothing changed %d bytes (parts sent: %v)", fullSize, idleSize, sent(idle))
	if fullSize > budget {
		t.Errorf("the first update is %d bytes, want under %d", fullSize, budget)
	}
	if idleSize > 8<<10 {
		t.Errorf("an update with nothing changed is %d bytes (parts %v); want only hashes and what moves (health)", idleSize, sent(idle))
	}

	// One card moves from ready to done: the update carries those two
	// columns (and the lines that count), not the board.
	c := &client.Client{Socket: a.Socket}
	if _, err := c.MoveCard(context.Background(), "card-00002", board.StateDone); err != nil {
		t.Fatal(err)
	}
	// The page asks when the event stream says the card moved: once the
	// server's feed has read the event.
	var moved updateAnswer
	var movedSize int
	agentproc.WaitFor(t, 20*time.Second, "an update that shows card-00002 moved", func() bool {
		moved, movedSize = f.update(b, "/board/parts", hashes(idle))
		return strings.Contains(strings.Join(sent(moved), " "), "col:done")
	})
	t.Logf("an update after one card moved: %d bytes, parts sent: %v", movedSize, sent(moved))
	if movedSize > budget {
		t.Errorf("the update after one move is %d bytes, want under %d", movedSize, budget)
	}
	got := map[string]bool{}
	for _, k := range sent(moved) {
		got[k] = true
	}
	if !got["col:ready"] || !got["col:done"] {
		t.Errorf("the update after card-00002 moved ready→done sent %v; want col:ready and col:done", sent(moved))
	}
	for _, k := range []string{"col:backlog", "col:in_progress", "col:failed"} {
		if got[k] {
			t.Errorf("the update sent %s, which did not change", k)
		}
	}

	// "more" shows the next page of a column.
	more := f.do(b, "GET", "/board?show="+url.QueryEscape("ready:100"), nil)
	if !strings.Contains(more.body, `3899 more (showing 100 of 3999)`) {
		t.Errorf("show=ready:100 does not show 100 ready cards")
	}
}

func TestSearchFiltersByIDAndTitle(t *testing.T) {
	t.Parallel()
	f := start(t, "")
	f.agent.MustRun("card", "create", "build-1", "--title", "Nightly build")
	f.agent.MustRun("card", "create", "deploy-1", "--title", "ship the BUILD")
	f.agent.MustRun("card", "create", "docs-1", "--title", "write the docs")
	b := browser(t)
	f.login(b)
	for _, tc := range []struct {
		q          string
		want, none []string
	}{
		{"build", []string{"build-1", "deploy-1"}, []string{"docs-1"}}, // id, and title in another case
		{"DOCS", []string{"docs-1"}, []string{"build-1", "deploy-1"}},
		{"nightly", []string{"build-1"}, []string{"deploy-1", "docs-1"}},
		{"nothing-matches", nil, []string{"build-1", "deploy-1", "docs-1"}},
	} {
		got := f.do(b, "GET", "/board?q="+url.QueryEscape(tc.q), nil)
		for _, id := range tc.want {
			if !strings.Contains(got.body, `data-card="`+id+`"`) {
				t.Errorf("q=%s: %s missing", tc.q, id)
			}
		}
		for _, id := range tc.none {
			if strings.Contains(got.body, `data-card="`+id+`"`) {
				t.Errorf("q=%s: %s shown", tc.q, id)
			}
		}
		if want := fmt.Sprintf("%d of 3 cards", len(tc.want)); !strings.Contains(got.body, want) {
			t.Errorf("q=%s: the count does not read %q", tc.q, want)
		}
	}
}

// proxy stands between the UI server and the agent on a socket of its
// own, and counts what the UI reads from the agent's log.
type proxy struct {
	socket string
	mu     sync.Mutex
	reads  []string // the /v1/events requests, follow streams left out
	events int      // events those requests returned
}

func newProxy(t *testing.T, agentSocket, socket string) *proxy {
	t.Helper()
	p := &proxy{socket: socket}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "leasekeeper"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", agentSocket)
		}},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			r := resp.Request
			if r.URL.Path != "/v1/events" || r.URL.Query().Get("follow") == "true" || resp.StatusCode != http.StatusOK {
				return nil
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			resp.Body = io.NopCloser(strings.NewReader(string(body)))
			var er apitype.EventsResponse
			if err := json.Unmarshal(body, &er); err != nil {
				return err
			}
			p.mu.Lock()
			p.reads = append(p.reads, r.URL.RawQuery)
			p.events += len(er.Events)
			p.mu.Unlock()
			return nil
		},
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: rp}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return p
}

func (p *proxy) reset() {
	p.mu.Lock()
	p.reads, p.events = nil, 0
	p.mu.Unlock()
}

func (p *proxy) counts() ([]string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.reads...), p.events
}

// logWithCard seeds a log of about 4,400 events where card "target" has an
// event near the start, in the middle and at the end.
func logWithCard(t testing.TB, path string) {
	seedBoard(t, path, 4_400, func(int) string { return board.StateReady }, func(ctx context.Context, s *boltstore.Store) {
		for _, l := range []string{"first", "second", "third"} {
			if l == "second" {
				for i := range 200 {
					if _, err := s.AdjustLabels(ctx, board.AdjustLabelsParams{Card: fmt.Sprintf("card-%05d", i), Add: []string{"x"}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := s.AdjustLabels(ctx, board.AdjustLabelsParams{Card: "card-00007", Add: []string{l}}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestCardPageReadsItsEventsThroughTheIndex: a card's page reads the
// card's events, not the log. The UI reaches the agent through a proxy
// that counts the events it reads.
func TestCardPageReadsItsEventsThroughTheIndex(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, binary, "lease: 3s\n")
	logWithCard(t, filepath.Join(a.Dir, "board.db"))
	a.Start()
	p := newProxy(t, a.Socket, filepath.Join(a.Dir, "proxy.sock"))
	f := serve(t, a, p.socket)
	b := browser(t)
	f.login(b)
	all := a.Events()
	var mine []board.Event
	for _, ev := range all {
		if ev.Card == "card-00007" {
			mine = append(mine, ev)
		}
	}
	// The feed has read the log once (its index) when the health line
	// follows at the last event.
	last := all[len(all)-1].Seq
	agentproc.WaitFor(t, 30*time.Second, "the UI to follow the log at its end", func() bool {
		return strings.Contains(f.do(b, "GET", "/board", nil).body, fmt.Sprintf("following</b> at #%d", last))
	})

	p.reset()
	got := f.do(b, "GET", "/cards/card-00007", nil)
	reads, read := p.counts()
	t.Logf("the card page of a card with %d events in a log of %d read %d events in %d requests: %v", len(mine), len(all), read, len(reads), reads)
	if got.code != http.StatusOK {
		t.Fatalf("GET /cards/card-00007: %d\n%s", got.code, got.body)
	}
	for _, ev := range mine {
		if !strings.Contains(got.body, fmt.Sprintf("<tr><td>%d</td>", ev.Seq)) {
			t.Errorf("the card page lacks event #%d (%s)", ev.Seq, ev.Type)
		}
	}
	if n := strings.Count(got.body, "<tr><td>"); n != len(mine) {
		t.Errorf("the card page lists %d events, want the card's %d", n, len(mine))
	}
	if read > 16*len(mine) {
		t.Errorf("the card page read %d events of a %d-event log for a card that has %d: a scan, not the index", read, len(all), len(mine))
	}

	// An event written after the index was read shows too.
	if _, err := (&client.Client{Socket: a.Socket}).AdjustLabels(context.Background(), "card-00007", []string{"fourth"}, nil); err != nil {
		t.Fatal(err)
	}
	agentproc.WaitFor(t, 10*time.Second, "the card page to list the fourth label's event", func() bool {
		return strings.Contains(f.do(b, "GET", "/cards/card-00007", nil).body, "fourth")
	})
}

// BenchmarkCardPage serves the page of a card in a 4,400-event log.
//
//	go test -run '^$' -bench CardPage ./ui/
func BenchmarkCardPage(b *testing.B) {
	a := agentproc.New(b, binary, "lease: 3s\n")
	logWithCard(b, filepath.Join(a.Dir, "board.db"))
	a.Start()
	f := serve(b, a, a.Socket)
	c := browser(b)
	f.login(c)
	last := a.Events()
	agentproc.WaitFor(b, 30*time.Second, "the UI to follow the log at its end", func() bool {
		resp, err := c.Get(f.base + "/board")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(body), fmt.Sprintf("following</b> at #%d", last[len(last)-1].Seq))
	})
	for b.Loop() {
		resp, err := c.Get(f.base + "/cards/card-00007")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET /cards/card-00007: %d", resp.StatusCode)
		}
	}
}

// noExternal matches what would make the page fetch from elsewhere: an
// absolute or scheme-relative URL; in a style, an import or a url().
var (
	noExternal    = regexp.MustCompile(`(?i)(https?:|wss?:|//[a-z0-9-]+\.[a-z])`)
	noExternalCSS = regexp.MustCompile(`(?i)(@import|url\()`)
)

// TestPagesFetchNothingElsewhere: the pages, the script and the style
// name no other origin, so the board works offline and leaks nothing.
func TestPagesFetchNothingElsewhere(t *testing.T) {
	t.Parallel()
	f := start(t, "")
	f.agent.MustRun("card", "create", "c1", "--title", "a card")
	b := browser(t)
	f.login(b)
	for _, path := range []string{"/", "/board", "/board/parts", "/cards/c1", "/cards/c1/parts", "/static/app.js", "/static/style.css"} {
		got := f.do(b, "GET", path, nil)
		if got.code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, got.code)
		}
		body := got.body
		if strings.HasSuffix(path, ".js") {
			// Comments may say anything; code may not.
			body = regexp.MustCompile(`(?m)^\s*//.*$`).ReplaceAllString(body, "")
		}
		m := noExternal.FindString(body)
		if m == "" && strings.HasSuffix(path, ".css") {
			m = noExternalCSS.FindString(body)
		}
		if m != "" {
			i := strings.Index(body, m)
			t.Errorf("GET %s names another origin: %q in %q", path, m, body[max(i-60, 0):min(i+60, len(body))])
		}
	}
}

// leaseUntil reads a card's data-lease-until from an update's parts.
var leaseUntilRe = regexp.MustCompile(`data-card="held"[^>]*>(?s:.*?)data-lease-until="(\d+)"`)

// TestRenewalShowsWithoutAnEvent: a renewal writes no event, and the
// server reuses its listing of the cards while no event arrives; the
// update still carries the lease as renewed.
func TestRenewalShowsWithoutAnEvent(t *testing.T) {
	t.Parallel()
	f := start(t, "")
	f.agent.MustRun("card", "create", "held")
	held, err := (&client.Client{Socket: f.agent.Socket}).Claim(context.Background(), "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	b := browser(t)
	f.login(b)
	last := func() int64 { evs := f.agent.Events(); return evs[len(evs)-1].Seq }
	seq := last()
	agentproc.WaitFor(t, 30*time.Second, "the UI to follow the log at its end", func() bool {
		return strings.Contains(f.do(b, "GET", "/board", nil).body, fmt.Sprintf("following</b> at #%d", seq))
	})
	until := func() string {
		a, _ := f.update(b, "/board/parts", nil)
		for _, p := range a.Parts {
			if m := leaseUntilRe.FindStringSubmatch(p.HTML); m != nil {
				return m[1]
			}
		}
		t.Fatalf("no lease on card held in the update")
		return ""
	}
	first := until()
	agentproc.WaitFor(t, 20*time.Second, "the update to show the renewed lease", func() bool { return until() != first })
	if now := last(); now != seq {
		t.Logf("the log grew from #%d to #%d meanwhile: the test proves less than it says", seq, now)
	}
}

// TestAgentUnreachableIsSaidAndRecovers stops the agent under a running
// UI: the event stream says the agent is down, an update answers with a
// message in words (not the transport's "dial unix"), the page opened
// meanwhile says the same and keeps its place, and all of it comes back
// when the agent does.
func TestAgentUnreachableIsSaidAndRecovers(t *testing.T) {
	t.Parallel()
	f := start(t, "")
	f.agent.MustRun("card", "create", "c1")
	b := browser(t)
	f.login(b)
	s := f.events(b)
	s.await(10*time.Second, "hello", func(ev string, _ map[string]any) bool { return ev == "hello" })
	if a, _ := f.update(b, "/board/parts", nil); len(a.Parts) == 0 {
		t.Fatal("no parts in the update")
	}

	f.agent.Stop()
	s.await(30*time.Second, "the agent reported down", func(ev string, d map[string]any) bool {
		down, _ := d["down"].(string)
		return ev == "change" && strings.Contains(down, "not running")
	})
	got := f.do(b, "GET", "/board/parts", nil)
	var a updateAnswer
	if err := json.Unmarshal([]byte(got.body), &a); err != nil || got.code != http.StatusBadGateway || a.Down == nil {
		t.Fatalf("update with the agent stopped: %d %v, want 502 with down:\n%s", got.code, err, got.body)
	}
	if !strings.Contains(a.Down.Message, "not running") || strings.Contains(a.Down.Message, "dial unix") || !strings.Contains(a.Down.Detail, "dial unix") {
		t.Errorf("down = %+v: want words in the message and the error in the detail", a.Down)
	}
	page := f.do(b, "GET", "/", nil)
	msg := regexp.MustCompile(`<span class="msg">([^<]*)</span>`).FindStringSubmatch(page.body)
	if page.code != http.StatusOK || !strings.Contains(page.body, `class="status down"`) || msg == nil || strings.Contains(msg[1], "dial unix") ||
		!strings.Contains(page.body, `data-src="/board/parts"`) {
		t.Errorf("GET / with the agent stopped: %d, want the board page saying the agent is unreachable in words, and updating:\n%.3000s", page.code, page.body)
	}
	if frag := f.do(b, "GET", "/board", nil); frag.code != http.StatusBadGateway || !strings.Contains(frag.body, "Agent unreachable.") {
		t.Errorf("GET /board with the agent stopped: %d, want 502 saying so:\n%s", frag.code, frag.body)
	}
	card := f.do(b, "GET", "/cards/c1", nil)
	if card.code != http.StatusBadGateway || !strings.Contains(card.body, "Agent unreachable.") || !strings.Contains(card.body, `data-src="/cards/c1/parts"`) {
		t.Errorf("GET /cards/c1 with the agent stopped: %d, want 502 saying so and updating:\n%.3000s", card.code, card.body)
	}

	f.agent.Start()
	s.await(30*time.Second, "a resync after the agent came back", func(ev string, d map[string]any) bool {
		return ev == "change" && d["resync"] == true
	})
	agentproc.WaitFor(t, 20*time.Second, "an update to answer again", func() bool {
		return f.do(b, "GET", "/board/parts", nil).code == http.StatusOK
	})
	if page := f.do(b, "GET", "/", nil); strings.Contains(page.body, `class="status down"`) || !strings.Contains(page.body, `data-card="c1"`) {
		t.Errorf("GET / after the agent came back still says it is down, or lacks c1")
	}
}

// TestTimelineAndCharts: a card's page draws its history on a time axis,
// and the board draws throughput, queue depth and lease health, all as
// inline SVG rendered by the server.
func TestTimelineAndCharts(t *testing.T) {
	t.Parallel()
	// The throughput chart's last point is the current minute's. The UI's
	// clock stops at c1's completion once the test has read it, so a
	// minute that turns while the test runs does not empty that point.
	var stopped atomic.Pointer[time.Time]
	f := startWith(t, "", func(c *ui.Config) {
		c.Now = func() time.Time {
			if at := stopped.Load(); at != nil {
				return *at
			}
			return time.Now()
		}
	})
	f.agent.MustRun("card", "create", "c1")
	f.agent.MustRun("card", "create", "c2")
	f.agent.MustRun("card", "move", "c1", board.StateInProgress)
	f.agent.MustRun("card", "move", "c1", board.StateDone)
	for _, ev := range f.agent.Events() {
		if ev.Card == "c1" && ev.Type == board.EventState && ev.Data.To == board.StateDone {
			at := ev.At
			stopped.Store(&at)
		}
	}
	if stopped.Load() == nil {
		t.Fatal("c1's move into done is not in the log")
	}
	b := browser(t)
	f.login(b)
	evs := 0
	for _, ev := range f.agent.Events() {
		if ev.Card == "c1" {
			evs++
		}
	}
	page := f.do(b, "GET", "/cards/c1", nil).body
	tl := regexp.MustCompile(`(?s)<svg class="tl".*?</svg>`).FindString(page)
	if tl == "" {
		t.Fatalf("the card page has no timeline:\n%s", page)
	}
	if n := strings.Count(tl, `<rect class="st`); n != 3 {
		t.Errorf("the timeline draws %d state bars, want 3 (ready, in_progress, done)", n)
	}
	if n := strings.Count(tl, `<rect class="ev ev-`); n != evs {
		t.Errorf("the timeline draws %d event ticks, want c1's %d events", n, evs)
	}
	for _, want := range []string{`<rect class="st st-completion"`, `<rect class="st st-running"`, "<title>done since ", "<title>ready from "} {
		if !strings.Contains(tl, want) {
			t.Errorf("the timeline lacks %q", want)
		}
	}
	// The feed counts the move into done once it has read the log.
	agentproc.WaitFor(t, 20*time.Second, "the throughput chart to count c1's completion", func() bool {
		return strings.Contains(f.do(b, "GET", "/board", nil).body, `<b>throughput</b> <span class="last">1</span>`)
	})
	page = f.do(b, "GET", "/board", nil).body
	for _, want := range []string{`<b>queue depth</b> <span class="last">1</span>`, `<b>claims held</b> <span class="last">0</span>`, `<polyline points="`} {
		if !strings.Contains(page, want) {
			t.Errorf("the board's charts lack %q", want)
		}
	}
}
