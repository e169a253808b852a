package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/client"
)

// complete runs the binary's hidden __complete command (what the shell
// scripts call on TAB) with extraEnv and returns the candidates' names, the
// directive cobra appends, and stderr.
func (e *env) complete(extraEnv []string, args ...string) (names []string, directive string, stderr string) {
	e.t.Helper()
	cmd := exec.Command(binary, append([]string{"__complete"}, args...)...)
	cmd.Env = e.Environ(extraEnv...)
	cmd.Dir = e.Dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("__complete %v: %v\n%s", args, err, errb.String())
	}
	for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		if strings.HasPrefix(line, ":") {
			directive = line
			continue
		}
		name, _, _ := strings.Cut(line, "\t")
		names = append(names, name)
	}
	return names, directive, errb.String()
}

// TestE2ECompletionFromAgent: card ids and state names complete from a real
// agent, filtered by what the argument accepts; with no agent, or one that
// does not answer, the shell gets no candidates and no message.
func TestE2ECompletionFromAgent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	e.Start()
	e.MustRun("card", "create", "c-one", "--title", "first one")
	e.MustRun("card", "create", "c-two")
	e.MustRun("card", "create", "other")
	e.MustRun("card", "move", "other", "done")
	e.MustRun("card", "create", "gated", "--depends-on", "c-one") // waits in waiting_deps

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := (&client.Client{Socket: e.Socket}).Claim(ctx, "c-two")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.Release(context.Background()) }()

	var bd apitype.BoardResponse
	if err := json.Unmarshal([]byte(e.MustRun("board", "show", "--json")), &bd); err != nil {
		t.Fatal(err)
	}
	var allStates, working, bStates []string
	for _, s := range bd.States {
		allStates = append(allStates, s.Name)
		if !s.Terminal {
			working = append(working, s.Name)
		}
		if strings.HasPrefix(s.Name, "b") {
			bStates = append(bStates, s.Name)
		}
	}
	if len(working) == len(allStates) || len(bStates) == 0 {
		t.Fatalf("the default board should have terminal states and states starting with b: %v", allStates)
	}

	for _, tc := range []struct {
		name string
		args []string
		want []string // exactly these, in this order
	}{
		{"show: every card", []string{"card", "show", ""}, []string{"c-one", "c-two", "other", "gated"}},
		{"show: by prefix", []string{"card", "show", "c-"}, []string{"c-one", "c-two"}},
		{"move: the card", []string{"card", "move", "o"}, []string{"other"}},
		{"move: the state", []string{"card", "move", "c-one", ""}, allStates},
		{"move: nothing third", []string{"card", "move", "c-one", "done", ""}, nil},
		{"reopen: working states only", []string{"card", "reopen", "other", ""}, working},
		{"release: held cards only", []string{"card", "release", ""}, []string{"c-two"}},
		{"label", []string{"card", "label", "c-o"}, []string{"c-one"}},
		{"create: no existing id", []string{"card", "create", ""}, nil},
		{"create --state", []string{"card", "create", "new", "--state", ""}, allStates},
		{"ls --state by prefix", []string{"card", "ls", "--state", "b"}, bStates},
		{"board state delete", []string{"board", "state", "delete", "b"}, bStates},
		{"board state delete --into", []string{"board", "state", "delete", "backlog", "--into", ""}, allStates},
		// claim: only what a claim by id would take — free, not in a sink
		// (other is done), not waiting on its blockers (gated).
		{"claim: claimable cards only", []string{"claim", ""}, []string{"c-one"}},
		{"claim: a sink card by prefix", []string{"claim", "o"}, nil},
		{"claim --next: no id", []string{"claim", "--next", ""}, nil},
		// claim --wait: a held card (c-two) and one waiting on its
		// blockers are waited for; a sink still is not.
		{"claim --wait: held and gated too", []string{"claim", "--wait", ""}, []string{"c-one", "c-two", "gated"}},
		{"card wait: every card", []string{"card", "wait", "c-"}, []string{"c-one", "c-two"}},
		{"card wait --for", []string{"card", "wait", "c-one", "--for", ""}, allStates},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, directive, _ := e.complete(nil, tc.args...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("__complete %q = %q, want %q", tc.args, got, tc.want)
			}
			if directive != ":4" { // ShellCompDirectiveNoFileComp
				t.Errorf("__complete %q directive %s, want :4 (no file names)", tc.args, directive)
			}
		})
	}

	// The description is the state and the title.
	cmd := exec.Command(binary, "__complete", "card", "show", "c-one")
	cmd.Env = e.Environ()
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "c-one\t" + e.Card("c-one").State + ": first one"
	if line, _, _ := strings.Cut(string(out), "\n"); line != want {
		t.Errorf("candidate line %q, want %q", line, want)
	}

	// After -- the shell completes the command itself (directive 0).
	if got, directive, _ := e.complete(nil, "claim", "c-one", "--", ""); got != nil || directive != ":0" {
		t.Errorf("claim c-one -- : candidates %q directive %s, want none and :0", got, directive)
	}

	// --socket is honoured over LEASEKEEPER_SOCKET.
	elsewhere := []string{apitype.SocketEnv + "=" + filepath.Join(e.Dir, "nobody.sock")}
	if got, _, _ := e.complete(elsewhere, "card", "show", "c-"); got != nil {
		t.Errorf("LEASEKEEPER_SOCKET with no agent offered %q", got)
	}
	if got, _, _ := e.complete(elsewhere, "--socket", e.Socket, "card", "show", "c-"); !slices.Equal(got, []string{"c-one", "c-two"}) {
		t.Errorf("--socket %s offered %q", e.Socket, got)
	}

	// An agent that accepts and never answers costs one completionTimeout.
	hung := filepath.Join(e.Dir, "hung.sock")
	ln, err := net.Listen("unix", hung)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, unanswered, until the test ends
		}
	}()
	start := time.Now()
	got, directive, stderr := e.complete(nil, "--socket", hung, "card", "show", "")
	if took := time.Since(start); took > completionTimeout+5*time.Second {
		t.Errorf("completion against a silent agent took %s", took)
	}
	if got != nil || directive != ":4" || strings.Contains(stderr, "agent") {
		t.Errorf("silent agent: candidates %q directive %s stderr %q, want none, :4, no message", got, directive, stderr)
	}

	// No agent at all: no candidates, no message.
	e.Stop()
	for _, args := range [][]string{{"card", "show", ""}, {"card", "move", "c-one", ""}, {"card", "ls", "--state", ""}} {
		got, directive, stderr := e.complete(nil, args...)
		if got != nil || directive != ":4" || strings.Contains(stderr, "agent") || strings.Contains(stderr, "leasekeeper:") {
			t.Errorf("no agent, __complete %q: candidates %q directive %s stderr %q, want none, :4, no message", args, got, directive, stderr)
		}
	}
}
