package main

import (
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasekeeper/leasekeeper/board"
)

// TestE2ERunCommands: `run ls` and `run show` against a real agent, over
// runs that real `claim` processes recorded: a finished run, a failed one
// and a resumable one resumed and finished by a second claim.
func TestE2ERunCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "lease: 3s\n")
	e.Start()
	for _, id := range []string{"ok", "bad", "again"} {
		e.MustRun("card", "create", id)
	}
	if _, stderr, code := e.Run("claim", "ok", "--", "true"); code != 0 {
		t.Fatalf("claim ok: exit %d: %s", code, stderr)
	}
	if _, _, code := e.Run("claim", "bad", "--", "sh", "-c", "exit 3"); code != 3 {
		t.Fatalf("claim bad: exit %d, want 3", code)
	}
	if _, _, code := e.Run("claim", "again", "--resumable", "--", "sh", "-c", "exit 5"); code != 5 {
		t.Fatalf("claim again: exit %d, want 5", code)
	}
	resumable := e.Card("again").LastRunID
	// Each run is created after the one before, so newest first is known.
	var all []board.Run
	if err := json.Unmarshal([]byte(e.MustRun("run", "ls", "-o", "json")), &all); err != nil {
		t.Fatal(err)
	}
	ids := func(rs []board.Run) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Card+":"+string(r.Status))
		}
		return out
	}
	if got, want := strings.Join(ids(all), " "), "again:failed_resumable bad:failed ok:finished"; got != want {
		t.Fatalf("run ls -o json = %s, want %s (newest first)", got, want)
	}
	byCard := map[string]board.Run{}
	for _, r := range all {
		byCard[r.Card] = r
	}
	if r := byCard["bad"]; r.FailureCode != "EXIT_3" || r.Epoch != e.Card("bad").ClaimEpoch {
		t.Errorf("bad's run = %+v, want failure EXIT_3 at the card's epoch %d", r, e.Card("bad").ClaimEpoch)
	}

	// The table: a header and one row per run, the resumable run's
	// checkpoint, a finish time and a duration on every settled run.
	rows := tableCells(e.MustRun("run", "ls"))
	if len(rows) != 4 || strings.Join(rows[0], " ") != "RUN CARD EPOCH STATUS FAILURE CHECKPOINT CREATED FINISHED DURATION" {
		t.Fatalf("run ls = %q", rows)
	}
	for _, row := range rows[1:] {
		if len(row) != 9 {
			t.Fatalf("run ls row %q: want 9 cells", row)
		}
		r := byCard[row[1]]
		if row[0] != r.ID || row[3] != string(r.Status) || row[4] != orDash(r.FailureCode) || row[5] != orDash(r.Checkpoint) {
			t.Errorf("run ls row %q does not match the run %+v", row, r)
		}
		if row[6] != r.CreatedAt.UTC().Format(time.RFC3339) || row[7] != r.UpdatedAt.UTC().Format(time.RFC3339) {
			t.Errorf("run ls row %q: want created %s, finished %s", row, r.CreatedAt, r.UpdatedAt)
		}
		if d, err := time.ParseDuration(row[8]); err != nil || d < 0 || d > time.Minute {
			t.Errorf("run ls row %q: duration %q (%v)", row, row[8], err)
		}
	}
	if c := tableCells(e.MustRun("run", "ls", "-o", "wide")); len(c[0]) != 13 || c[0][9] != "OWNER" {
		t.Errorf("run ls -o wide header = %q", c[0])
	}

	// Filters, served by the agent.
	if got := tableCells(e.MustRun("run", "ls", "--card", "bad")); len(got) != 2 || got[1][1] != "bad" {
		t.Errorf("run ls --card bad = %q", got)
	}
	if got := tableCells(e.MustRun("run", "ls", "--status", "finished")); len(got) != 2 || got[1][1] != "ok" {
		t.Errorf("run ls --status finished = %q", got)
	}
	if got := tableCells(e.MustRun("run", "ls", "--limit", "1")); len(got) != 2 || got[1][1] != "again" {
		t.Errorf("run ls --limit 1 = %q, want the newest run only", got)
	}
	var ys []board.Run
	if err := yaml.Unmarshal([]byte(e.MustRun("run", "ls", "-o", "yaml", "--card", "ok")), &ys); err != nil || len(ys) != 1 {
		t.Errorf("run ls -o yaml: %v, %d runs", err, len(ys))
	}

	// A resumed run keeps its id and created time; while it runs it is
	// open: no finish time, a duration still counting.
	p := e.startClaim("again", "--", "sleep", "600")
	e.WaitFor(10*time.Second, "the resumable run to be resumed", func() bool {
		return e.GetRun(resumable).Status == board.RunRunning
	})
	show := e.MustRun("run", "show", resumable)
	for _, want := range []string{"id:", resumable, "card:", "again", "status:", "running", "checkpoint:", "restart-cmd", "created_at:", "duration:"} {
		if !strings.Contains(show, want) {
			t.Errorf("run show lacks %q:\n%s", want, show)
		}
	}
	if strings.Contains(show, "finished_at:") {
		t.Errorf("run show of an open run has a finish time:\n%s", show)
	}
	if !strings.Contains(show, "+\n") {
		t.Errorf("run show of an open run: want its duration marked still counting (+):\n%s", show)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 30*time.Second)
	var one board.Run
	if err := json.Unmarshal([]byte(e.MustRun("run", "show", byCard["ok"].ID, "--json")), &one); err != nil || one.ID != byCard["ok"].ID || one.Card != "ok" {
		t.Errorf("run show --json = %+v (%v)", one, err)
	}

	// Completion: run ids from the agent, newest first; --status from the
	// statuses, --card from the cards.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "show", ""}, []string{byCard["again"].ID, byCard["bad"].ID, byCard["ok"].ID}},
		{[]string{"run", "ls", "--status", "fail"}, []string{"failed", "failed_resumable"}},
		{[]string{"run", "ls", "--card", "a"}, []string{"again"}},
	} {
		if got, _, _ := e.complete(nil, tc.args...); !slices.Equal(got, tc.want) {
			t.Errorf("complete %q = %q, want %q", tc.args, got, tc.want)
		}
	}

	// Refusals: an unknown status or negative limit is a usage error; an
	// unknown run or card is an error naming it.
	for _, bad := range [][]string{{"run", "ls", "--status", "done"}, {"run", "ls", "--limit", "-1"}, {"run", "show"}} {
		if _, stderr, code := e.Run(bad...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d: %s", bad, code, exitUsage, stderr)
		}
	}
	for _, bad := range [][]string{{"run", "show", "no-such-run"}, {"run", "ls", "--card", "no-such-card"}} {
		if _, stderr, code := e.Run(bad...); code != exitError || !strings.Contains(stderr, "no-such") {
			t.Errorf("%v: exit %d, want %d naming it: %s", bad, code, exitError, stderr)
		}
	}
}

// tableCells is a table's output split into rows of whitespace-separated
// cells, the header first.
func tableCells(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}
