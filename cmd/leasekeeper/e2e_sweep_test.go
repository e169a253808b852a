package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
)

// TestE2ESweepDryRunWritesNothing: every board sweep takes --dry-run,
// which prints what it would change (a count and the first ids) and
// writes nothing: no event, no card, no board change. Its refusals are
// the real command's.
func TestE2ESweepDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &client.Client{Socket: e.Socket}
	var gpu []string
	for i := range 25 {
		id := fmt.Sprintf("g%02d", i)
		gpu = append(gpu, id)
		if _, err := c.CreateCard(ctx, board.CreateCardParams{ID: id, State: board.StateBacklog, Labels: []string{"gpu", "x86"}}); err != nil {
			t.Fatal(err)
		}
	}
	e.MustRun("card", "create", "plain", "--label", "arm")
	boardBefore := e.MustRun("board", "show", "--json")
	cardsBefore := e.MustRun("card", "ls", "--json")
	seqBefore := len(e.Events())

	for _, tc := range []struct {
		args []string
		want []string // in the printed report
	}{
		{[]string{"board", "label", "rename", "gpu", "cuda"}, []string{
			`label rename "gpu" → "cuda" (dry run: nothing written): 26 card(s) examined`,
			"would change: 25 (g00, g01,", "g19, and 5 more)", "unchanged:    1"}},
		{[]string{"board", "label", "merge", "x86", "arm", "--into", "cpu"}, []string{"would change: 26 (", "unchanged:    0"}},
		{[]string{"board", "label", "delete", "arm"}, []string{"would change: 1 (plain)", "unchanged:    25"}},
		{[]string{"board", "state", "rename", "backlog", "icebox"}, []string{"would change: 25 (", "board afterwards:", "icebox"}},
		{[]string{"board", "state", "delete", "backlog", "--into", "ready"}, []string{"would change: 25 (", "board afterwards:"}},
	} {
		out := e.MustRun(append(tc.args, "--dry-run")...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v --dry-run lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
	// The JSON report says it was a dry run and lists every card.
	var rep board.SweepReport
	if err := json.Unmarshal([]byte(e.MustRun("board", "label", "rename", "gpu", "cuda", "--dry-run", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.DryRun || !slices.Equal(rep.Changed, gpu) || rep.Unchanged != 1 {
		t.Errorf("--dry-run --json = %+v, want dry_run and every gpu card", rep)
	}
	// A refusal is the real command's: into a completion state.
	if _, stderr, code := e.Run("board", "state", "delete", "backlog", "--into", "done", "--dry-run"); code != exitError || !strings.Contains(stderr, "completion state") {
		t.Errorf("dry run of a refused delete: exit %d: %s", code, stderr)
	}

	if got := len(e.Events()); got != seqBefore {
		t.Errorf("the dry runs logged %d events", got-seqBefore)
	}
	if got := e.MustRun("card", "ls", "--json"); got != cardsBefore {
		t.Errorf("the dry runs changed cards:\nbefore %s\nafter  %s", cardsBefore, got)
	}
	if got := e.MustRun("board", "show", "--json"); got != boardBefore {
		t.Errorf("the dry runs changed the board:\nbefore %s\nafter  %s", boardBefore, got)
	}

	// The real command then does what the dry run said.
	e.MustRun("board", "label", "rename", "gpu", "cuda")
	for _, cd := range listAll(t, c) {
		if slices.Contains(cd.Labels, "gpu") {
			t.Errorf("%s still carries gpu after the rename: %v", cd.ID, cd.Labels)
		}
	}
}

// TestE2ESweepProgress: --progress prints how far the walk got on stderr,
// every 100 cards and at the last, and the summary on stdout as without
// it; without --progress and with stderr not a terminal it prints none.
func TestE2ESweepProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &client.Client{Socket: e.Socket}
	const n = 205
	for i := range n {
		if _, err := c.CreateCard(ctx, board.CreateCardParams{ID: fmt.Sprintf("p%03d", i), Labels: []string{"old"}}); err != nil {
			t.Fatal(err)
		}
	}
	stdout, stderr, code := e.Run("board", "label", "rename", "old", "new", "--progress")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := "leasekeeper board label rename: 100 of 205 card(s)\nleasekeeper board label rename: 200 of 205 card(s)\nleasekeeper board label rename: 205 of 205 card(s)\n"
	if stderr != want {
		t.Errorf("progress on stderr = %q, want %q", stderr, want)
	}
	if !strings.Contains(stdout, `label rename "old" → "new": 205 card(s) examined`) || !strings.Contains(stdout, "changed:   205 (") || !strings.Contains(stdout, "and 185 more)") {
		t.Errorf("summary = %q", stdout)
	}
	for _, cd := range listAll(t, c) {
		if !slices.Equal(cd.Labels, []string{"new"}) {
			t.Fatalf("%s labels = %v after the rename, want [new]", cd.ID, cd.Labels)
		}
	}
	// Without --progress, stderr a pipe: no progress.
	if _, stderr, code := e.Run("board", "label", "delete", "new"); code != 0 || stderr != "" {
		t.Errorf("without --progress: exit %d, stderr %q", code, stderr)
	}
	// A dry run reports its progress too.
	if _, stderr, code := e.Run("board", "state", "rename", "ready", "queued", "--dry-run", "--progress"); code != 0 || !strings.HasSuffix(stderr, "205 of 205 card(s)\n") {
		t.Errorf("dry run with --progress: exit %d, stderr %q", code, stderr)
	}
}

func listAll(t *testing.T, c *client.Client) []board.Card {
	t.Helper()
	cards, err := c.ListCards(context.Background(), board.ListCardsParams{})
	if err != nil {
		t.Fatal(err)
	}
	return cards
}
