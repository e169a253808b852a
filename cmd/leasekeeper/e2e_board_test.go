package main

import (
	"bufio"
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// TestE2EBoardAdministration drives the board commands against a real
// agent process: label and state sweeps, the bulk-reopen refusal, and the
// warning an agent restarted on the changed store logs about its config.
func TestE2EBoardAdministration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	agent := e.Start()

	e.MustRun("card", "create", "a", "--state", "ready", "--label", "old", "--label", "keep")
	e.MustRun("card", "create", "b", "--state", "ready", "--label", "old")
	e.MustRun("card", "create", "c", "--state", "backlog", "--label", "other")

	out := e.MustRun("board", "label", "rename", "old", "new")
	for _, want := range []string{`label rename "old" → "new": 3 card(s) examined`, "changed:   2 (a, b)", "unchanged: 1", "contended: 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("label rename output does not contain %q:\n%s", want, out)
		}
	}
	if got := e.Card("a").Labels; !slices.Equal(got, []string{"new", "keep"}) {
		t.Errorf("labels of a = %q, want [new keep]", got)
	}

	var rep board.SweepReport
	if err := json.Unmarshal([]byte(e.MustRun("board", "label", "merge", "new", "other", "--into", "merged", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Changed, []string{"a", "b", "c"}) {
		t.Errorf("merge report changed %q, want [a b c]", rep.Changed)
	}

	seq := lastSeq(t, e)
	e.MustRun("board", "state", "rename", "ready", "queued")
	var shown apitype.BoardResponse
	if err := json.Unmarshal([]byte(e.MustRun("board", "show", "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	b := board.Board{States: shown.States}
	if st, ok := b.State("queued"); !ok || !st.Pool || !st.Launch || b.Has("ready") || shown.FirstPool != "queued" {
		t.Errorf("board after the rename = %s (first pool %q), want queued with ready's flags, ready gone", b, shown.FirstPool)
	}
	for _, id := range []string{"a", "b"} {
		if c := e.Card(id); c.State != "queued" || c.StateReason != board.ReasonStateRename {
			t.Errorf("card %s after the rename: state %q reason %q, want queued, state_rename", id, c.State, c.StateReason)
		}
	}
	var renames int
	for _, ev := range eventsAfter(t, e, seq) {
		if ev.Type == board.EventState {
			renames++
			if ev.Reason != board.ReasonStateRename || ev.Actor != "" {
				t.Errorf("state event %+v, want reason state_rename with no actor", ev)
			}
		}
	}
	if renames != 2 {
		t.Errorf("state events of the rename = %d, want one per card (2)", renames)
	}

	// A bulk reopen with a promoted dependent is refused and changes nothing,
	// and the refusal names the dependent and the way out.
	e.MustRun("card", "create", "p", "--state", "queued")
	e.MustRun("card", "create", "q", "--depends-on", "p")
	e.MustRun("card", "move", "p", "done")
	e.MustRun("card", "move", "p", "cancelled")
	_, errs, code := e.Run("board", "state", "delete", "cancelled", "--into", "backlog")
	if code != exitError || !strings.Contains(errs, `dependent "q"`) || !strings.Contains(errs, "move it back to waiting_deps") {
		t.Errorf("bulk reopen with a promoted dependent: exit %d, stderr %q; want 1 naming the dependent and waiting_deps", code, errs)
	}
	if c := e.Card("p"); c.State != "cancelled" {
		t.Errorf("card p after a refused delete is %q, want cancelled", c.State)
	}

	// Restarted on the changed store with the old config, the agent warns.
	_ = agent.Signal(syscall.SIGTERM)
	<-agent.Done()
	again := e.Start()
	agentproc.WaitFor(t, 10*time.Second, "the board drift warning", func() bool {
		return strings.Contains(again.Log(), "the configured states differ from the board stored")
	})
	if log := again.Log(); !strings.Contains(log, `state \"ready\" is only in the configured board`) && !strings.Contains(log, `state "ready" is only in the configured board`) {
		t.Errorf("drift warning does not name the renamed state:\n%s", log)
	}
}

func lastSeq(t *testing.T, e *env) int64 {
	t.Helper()
	evs := eventsAfter(t, e, 0)
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

func eventsAfter(t *testing.T, e *env, seq int64) []board.Event {
	t.Helper()
	var out []board.Event
	sc := bufio.NewScanner(strings.NewReader(e.MustRun("events", "--json")))
	for sc.Scan() {
		var ev board.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("events --json line %q: %v", sc.Text(), err)
		}
		if ev.Seq > seq {
			out = append(out, ev)
		}
	}
	return out
}
