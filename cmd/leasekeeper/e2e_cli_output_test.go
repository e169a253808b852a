package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mattn/go-runewidth"
	"go.yaml.in/yaml/v3"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// lsRows is `card ls` output split into rows of whitespace-separated
// cells (the title, last, may hold spaces: it is the rest of the row).
func lsRows(out string) (header string, rows map[string]string) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	rows = map[string]string{}
	for _, l := range lines[1:] {
		rows[strings.Fields(l)[0]] = l
	}
	return lines[0], rows
}

func lsIDs(out string) []string {
	var ids []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n")[1:] {
		ids = append(ids, strings.Fields(l)[0])
	}
	return ids
}

// TestE2ECardLsFilters: `card ls` narrows by --state, --label (all of
// them), --claimed and --limit against a real agent, shows each card's
// blockers in DEPS, and truncates titles to a fixed display width that
// keeps the columns aligned when a cell (a label, a title) holds wide
// (CJK, emoji) characters.
func TestE2ECardLsFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "a1", "--label", "gpu", "--label", "x86", "--title", "plain")
	e.MustRun("card", "create", "b2", "--label", "gpu", "--depends-on", "a1", "--title", "blocked")
	e.MustRun("card", "create", "c3", "--label", "x86", "--label", "夜間", "--depends-on", "a1,b2",
		"--title", "夜間ビルドと統合テストとデプロイの全部をまとめて走らせる長いタイトル🚀🚀")
	e.MustRun("card", "create", "d4", "--title", "held")

	claim := e.startClaim("d4", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(e.Dir, "finish"), nil, 0o600) })
	e.WaitFor(10*time.Second, "d4 claimed", func() bool { return e.Card("d4").Claim != "" })
	_ = claim

	check := func(args []string, want ...string) {
		t.Helper()
		got := lsIDs(e.MustRun(append([]string{"card", "ls"}, args...)...))
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("card ls %v = %v, want %v", args, got, want)
		}
	}
	check(nil, "a1", "b2", "c3", "d4")
	check([]string{"--label", "gpu"}, "a1", "b2")
	check([]string{"--label", "gpu", "--label", "x86"}, "a1")
	check([]string{"--label", "x86", "--limit", "1"}, "a1")
	check([]string{"--label", "gpu", "--state", "waiting_deps"}, "b2")
	check([]string{"--claimed"}, "d4")
	check([]string{"--limit", "2"}, "a1", "b2")
	check([]string{"--label", "nope"})
	check([]string{"--label", " gpu ", "--label", ""}, "a1", "b2") // labels as the store keeps them

	out := e.MustRun("card", "ls")
	header, rows := lsRows(out)
	if !strings.Contains(header, "DEPS") {
		t.Fatalf("no DEPS column:\n%s", out)
	}
	if f := strings.Fields(rows["c3"]); !containsCell(f, "a1,b2") {
		t.Errorf("c3's row does not name its blockers a1,b2: %q", rows["c3"])
	}
	if f := strings.Fields(rows["d4"]); !containsCell(f, "-") {
		t.Errorf("d4's row does not say it has no blockers (-): %q", rows["d4"])
	}
	// Titles are cut to titleWidth display cells (an ellipsis marks the
	// cut), and every TITLE starts at the same display column.
	col := runewidth.StringWidth(header[:strings.Index(header, "TITLE")])
	for id, row := range rows {
		i := strings.Index(row, map[string]string{"a1": "plain", "b2": "blocked", "c3": "夜間ビルド", "d4": "held"}[id])
		if i < 0 {
			t.Fatalf("row %s has no title: %q", id, row)
		}
		if got := runewidth.StringWidth(row[:i]); got != col {
			t.Errorf("row %s: title at display column %d, header TITLE at %d:\n%s", id, got, col, out)
		}
		if w := runewidth.StringWidth(row[i:]); w > titleWidth {
			t.Errorf("row %s: title %d cells wide, want at most %d: %q", id, w, titleWidth, row[i:])
		}
	}
	if !strings.HasSuffix(rows["c3"], "…") {
		t.Errorf("c3's long title is not cut with an ellipsis: %q", rows["c3"])
	}

	if _, stderr, code := e.Run("card", "ls", "--limit", "-1"); code != exitUsage {
		t.Errorf("card ls --limit -1: exit %d, want %d: %s", code, exitUsage, stderr)
	}
}

func containsCell(fields []string, cell string) bool {
	for _, f := range fields {
		if f == cell {
			return true
		}
	}
	return false
}

// TestE2EEventsFilters: `events` narrows by --card, --type (repeatable)
// and --since (a duration or an RFC 3339 time), also while following;
// its times have a fixed width, and a labels event names what was added
// and removed.
func TestE2EEventsFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	e.MustRun("card", "create", "e1", "--label", "x86")
	e.MustRun("card", "create", "e2")
	e.MustRun("card", "label", "e1", "--add", "gpu", "--remove", "x86")
	e.MustRun("card", "move", "e2", "backlog")

	lines := func(out string) []string { return strings.Split(strings.TrimRight(out, "\n"), "\n") }
	jsonEvents := func(args ...string) []board.Event {
		t.Helper()
		var evs []board.Event
		for _, l := range lines(e.MustRun(append([]string{"events", "--json"}, args...)...)) {
			if l == "" {
				continue
			}
			var ev board.Event
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("events line %q: %v", l, err)
			}
			evs = append(evs, ev)
		}
		return evs
	}
	all := jsonEvents()
	if len(all) < 4 {
		t.Fatalf("want at least 4 events, got %d", len(all))
	}
	for _, ev := range jsonEvents("--card", "e1") {
		if ev.Card != "e1" {
			t.Errorf("--card e1 printed an event of %q", ev.Card)
		}
	}
	got := jsonEvents("--type", "labels", "--type", "state")
	if len(got) != 2 || got[0].Type != board.EventLabels || got[1].Type != board.EventState {
		t.Errorf("--type labels --type state = %+v, want the labels event then the state event", got)
	}
	if got := jsonEvents("--card", "e2", "--type", "state"); len(got) != 1 || got[0].Data.To != "backlog" {
		t.Errorf("--card e2 --type state = %+v, want e2's move to backlog", got)
	}
	if got := jsonEvents("--since", "1h"); len(got) != len(all) {
		t.Errorf("--since 1h printed %d events, want all %d", len(got), len(all))
	}
	last := all[len(all)-1]
	if got := jsonEvents("--since", last.At.Format(time.RFC3339Nano)); len(got) == 0 || got[0].At.Before(last.At) {
		t.Errorf("--since %s = %+v, want the events from then on", last.At.Format(time.RFC3339Nano), got)
	}
	if got := jsonEvents("--since", time.Now().Add(time.Hour).Format(time.RFC3339)); len(got) != 0 {
		t.Errorf("--since an hour ahead printed %d events", len(got))
	}

	// Text: every time the same width; the labels event names the change.
	text := lines(e.MustRun("events"))
	width := -1
	for _, l := range text {
		f := strings.Fields(l)
		if width >= 0 && len(f[1]) != width {
			t.Errorf("event time %q is %d wide, others %d", f[1], len(f[1]), width)
		}
		width = len(f[1])
	}
	lbl := lines(e.MustRun("events", "--type", "labels"))
	if len(lbl) != 1 || !strings.Contains(lbl[0], "+gpu") || !strings.Contains(lbl[0], "-x86") {
		t.Errorf("labels event does not name +gpu and -x86: %q", lbl)
	}

	for _, bad := range [][]string{{"--type", "nonsense"}, {"--since", "yesterday"}} {
		if _, stderr, code := e.Run(append([]string{"events"}, bad...)...); code != exitUsage {
			t.Errorf("events %v: exit %d, want %d: %s", bad, code, exitUsage, stderr)
		}
	}

	// --follow applies the same filters to the stream.
	f := e.startFollow("--card", "e2", "--type", "labels")
	e.MustRun("card", "label", "e1", "--add", "late")
	e.MustRun("card", "label", "e2", "--add", "late")
	e.WaitFor(10*time.Second, "the follower prints e2's labels event", func() bool {
		return strings.Contains(f.stdout.String(), `"late"`)
	})
	e.MustRun("card", "create", "e3")
	e.MustRun("card", "label", "e2", "--add", "later")
	e.WaitFor(10*time.Second, "the follower prints e2's second labels event", func() bool {
		return strings.Contains(f.stdout.String(), `"later"`)
	})
	for _, l := range lines(f.stdout.String()) {
		var ev board.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("follow line %q: %v", l, err)
		}
		if ev.Card != "e2" || ev.Type != board.EventLabels {
			t.Errorf("follower printed %s of %s, want only e2's labels events", ev.Type, ev.Card)
		}
	}
}

// TestE2EOutputFormats: card ls, card show, events, status and board
// show take
// -o json|yaml|wide; --json stays an alias of -o json; YAML carries the
// JSON field names; wide adds columns to card ls.
func TestE2EOutputFormats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	long := strings.Repeat("a long title ", 6)
	e.MustRun("card", "create", "o1", "--label", "gpu", "--title", long)
	e.MustRun("card", "create", "o2", "--depends-on", "o1")

	// -o json is --json.
	for _, args := range [][]string{{"card", "ls"}, {"card", "show", "o1"}, {"events"}, {"board", "show"}} {
		a, b := e.MustRun(append(args, "--json")...), e.MustRun(append(args, "-o", "json")...)
		if a != b {
			t.Errorf("%v: -o json differs from --json:\n%s\n---\n%s", args, b, a)
		}
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(e.MustRun("status", "-o", "json")), &st); err != nil || st["pid"] == nil {
		t.Errorf("status -o json: %v %v", st, err)
	}

	// YAML: the same documents under the same (JSON) field names.
	var cards []map[string]any
	if err := yaml.Unmarshal([]byte(e.MustRun("card", "ls", "-o", "yaml")), &cards); err != nil {
		t.Fatalf("card ls -o yaml: %v", err)
	}
	if len(cards) != 2 || cards[0]["id"] != "o1" || cards[1]["depends_on"] == nil || cards[0]["claim_epoch"] == nil {
		t.Errorf("card ls -o yaml = %v, want o1 and o2 under the board field names", cards)
	}
	var card map[string]any
	if err := yaml.Unmarshal([]byte(e.MustRun("card", "show", "o1", "-o", "yaml")), &card); err != nil || card["title"] != long {
		t.Errorf("card show -o yaml = %v (%v), want o1 with its title", card, err)
	}
	if err := yaml.Unmarshal([]byte(e.MustRun("status", "-o", "yaml")), &st); err != nil || st["pid"] == nil || st["marker"] == nil {
		t.Errorf("status -o yaml = %v (%v)", st, err)
	}
	var bd map[string]any
	if err := yaml.Unmarshal([]byte(e.MustRun("board", "show", "-o", "yaml")), &bd); err != nil || bd["states"] == nil || bd["first_pool"] == nil {
		t.Errorf("board show -o yaml = %v (%v)", bd, err)
	}
	dec := yaml.NewDecoder(strings.NewReader(e.MustRun("events", "-o", "yaml")))
	n := 0
	for {
		var ev map[string]any
		if err := dec.Decode(&ev); err != nil {
			break
		}
		if ev["seq"] == nil || ev["type"] == nil {
			t.Errorf("events -o yaml document %d = %v", n, ev)
		}
		n++
	}
	if want := len(strings.Split(strings.TrimSpace(e.MustRun("events", "--json")), "\n")); n != want {
		t.Errorf("events -o yaml printed %d documents, want %d", n, want)
	}

	// wide: more columns, the whole title.
	out := e.MustRun("card", "ls", "-o", "wide")
	header, rows := lsRows(out)
	for _, col := range []string{"EPOCH", "LEASE-UNTIL", "LAST-RUN", "UPDATED", "DEPS", "TITLE"} {
		if !containsCell(strings.Fields(header), col) {
			t.Errorf("card ls -o wide has no %s column:\n%s", col, out)
		}
	}
	if !strings.Contains(rows["o1"], strings.TrimSpace(long)) {
		t.Errorf("card ls -o wide cut o1's title: %q", rows["o1"])
	}
	if _, narrow := lsRows(e.MustRun("card", "ls")); strings.Contains(narrow["o1"], strings.TrimSpace(long)) {
		t.Errorf("card ls (not wide) did not cut o1's title: %q", narrow["o1"])
	}
	for _, args := range [][]string{{"card", "show", "o1"}, {"events"}, {"status"}} {
		if _, stderr, code := e.Run(append(args, "-o", "wide")...); code != 0 {
			t.Errorf("%v -o wide: exit %d: %s", args, code, stderr)
		}
	}

	// -o and events --type complete without an agent's help.
	if out := e.MustRun("__complete", "card", "ls", "-o", ""); !strings.Contains(out, "json\nyaml\nwide\n") {
		t.Errorf("-o completes to:\n%s", out)
	}
	if out := e.MustRun("__complete", "events", "--type", "la"); !strings.Contains(out, "labels\nlast_run\n") {
		t.Errorf("events --type la completes to:\n%s", out)
	}

	for _, bad := range [][]string{{"card", "ls", "-o", "xml"}, {"card", "ls", "--json", "-o", "yaml"}, {"status", "-o", "csv"}} {
		if _, stderr, code := e.Run(bad...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d: %s", bad, code, exitUsage, stderr)
		}
	}
}

// TestE2EReadsMatchTheCLI: the tests observe an agent through the client
// package (agentproc.Agent.Card, Status, Events) rather than a CLI process
// per look; this pins that the CLI's JSON says the same: `card show
// --json` and `events --json` decode to what the client reads, and
// `status --json` to the same agent and claims.
func TestE2EReadsMatchTheCLI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 30s\n")
	e.Start()
	e.MustRun("card", "create", "r1", "--label", "gpu", "--title", "a card")
	e.MustRun("card", "create", "r2", "--depends-on", "r1")
	claim := e.startClaim("r1", "--", "sleep", "60")
	e.WaitFor(20*time.Second, "the claim of r1", func() bool { return holds(e.Status(), "r1") })

	var shown board.Card
	if err := json.Unmarshal([]byte(e.MustRun("card", "show", "r1", "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	if got := e.Card("r1"); !reflect.DeepEqual(shown, got) {
		t.Errorf("card show --json:\n%+v\nclient:\n%+v", shown, got)
	}
	var logged []board.Event
	dec := json.NewDecoder(strings.NewReader(e.MustRun("events", "--json")))
	for dec.More() {
		var ev board.Event
		if err := dec.Decode(&ev); err != nil {
			t.Fatal(err)
		}
		logged = append(logged, ev)
	}
	if got := e.Events(); len(logged) == 0 || !reflect.DeepEqual(logged, got) {
		t.Errorf("events --json (%d):\n%+v\nclient (%d):\n%+v", len(logged), logged, len(got), got)
	}
	var st apitype.Status
	if err := json.Unmarshal([]byte(e.MustRun("status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	got := e.Status()
	cards := func(s apitype.Status) (out []string) {
		for _, h := range s.Claims {
			out = append(out, h.Card)
		}
		return out
	}
	if st.PID != got.PID || st.Host != got.Host || !st.StartedAt.Equal(got.StartedAt) || !slices.Equal(cards(st), cards(got)) || len(st.Claims) != 1 {
		t.Errorf("status --json: pid %d host %q started %s claims %q; client: pid %d host %q started %s claims %q",
			st.PID, st.Host, st.StartedAt, cards(st), got.PID, got.Host, got.StartedAt, cards(got))
	}
	e.MustRun("card", "release", "r1", "--force")
	claim.wait(t, 20*time.Second)
}
