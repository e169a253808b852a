package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// TestUsageErrorsPointAtTheCommandsHelp: a usage error ends with a hint
// naming the help of the command that refused it, not the root's, and that
// help exists.
func TestUsageErrorsPointAtTheCommandsHelp(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "absent.sock")
	for _, tc := range []struct {
		args []string
		help string
	}{
		{[]string{"claim", "--bogus"}, "leasekeeper claim --help"},
		{[]string{"claim", "c1"}, "leasekeeper claim --help"},
		{[]string{"card", "move", "c1"}, "leasekeeper card move --help"},
		{[]string{"card", "release", "c1"}, "leasekeeper card release --help"},
		{[]string{"card", "frob"}, "leasekeeper card --help"},
		{[]string{"card", "--bogus"}, "leasekeeper card --help"},
		{[]string{"board", "state", "frob"}, "leasekeeper board state --help"},
		{[]string{"status", "--jsn"}, "leasekeeper status --help"},
		{[]string{"frobnicate"}, "leasekeeper --help"},
		{[]string{"--bogus"}, "leasekeeper --help"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"--socket", sock}, tc.args...), strings.NewReader(""), &out, &errb)
		if code != exitUsage && code != claimExitUsage {
			t.Errorf("%v: exit %d, want a usage error; stderr: %s", tc.args, code, errb.String())
			continue
		}
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if got, want := lines[len(lines)-1], "Run '"+tc.help+"' for usage."; got != want {
			t.Errorf("%v: last line %q, want %q", tc.args, got, want)
		}
		out.Reset()
		errb.Reset()
		helpArgs := strings.Fields(strings.TrimPrefix(tc.help, "leasekeeper "))
		if code := run(helpArgs, strings.NewReader(""), &out, &errb); code != exitOK || !strings.Contains(out.String(), "Usage:") {
			t.Errorf("%s: exit %d, stdout %q: want its usage", tc.help, code, out.String())
		}
	}
}

// TestUsageErrors runs the command line in-process on invocations that must
// be refused before any agent is contacted (the socket named here does not
// exist, so reaching for it would fail differently).
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "absent.sock")
	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"claim without a command", []string{"claim", "c1"}, claimExitUsage, "needs a command after --"},
		{"claim with an empty command", []string{"claim", "c1", "--"}, claimExitUsage, "needs a command after --"},
		{"claim with id and --next", []string{"claim", "c1", "--next", "--", "true"}, claimExitUsage, "not both"},
		{"claim with id and --label", []string{"claim", "c1", "--label", "gpu", "--", "true"}, claimExitUsage, "--label routes --next"},
		{"claim with an empty label", []string{"claim", "--next", "--label", " ", "--", "true"}, claimExitUsage, "empty label"},
		{"claim with a label not UTF-8", []string{"claim", "--next", "--label", "g\xff", "--", "true"}, claimExitUsage, "--label"},
		{"claim with neither id nor --next", []string{"claim", "--", "true"}, claimExitUsage, "exactly one card ID"},
		{"claim with two ids", []string{"claim", "c1", "c2", "--", "true"}, claimExitUsage, "exactly one card ID"},
		{"claim with a bad flag value", []string{"claim", "c1", "--grace", "soon", "--", "true"}, claimExitUsage, "invalid duration"},
		{"claim with a negative grace", []string{"claim", "c1", "--grace", "-1s", "--", "true"}, claimExitUsage, "must not be negative"},
		{"claim with an exit code out of range", []string{"claim", "c1", "--lost-exit", "256", "--", "true"}, claimExitUsage, "between 1 and 255"},
		{"release without --force", []string{"card", "release", "c1"}, exitUsage, "--force"},
		{"label --set with --add", []string{"card", "label", "c1", "--set", "a,b", "--add", "c"}, exitUsage, "cannot be combined"},
		{"label with nothing to do", []string{"card", "label", "c1"}, exitUsage, "nothing to do"},
		{"move with one argument", []string{"card", "move", "c1"}, exitUsage, "ID STATE"},
		{"unknown flag", []string{"status", "--jsn"}, exitUsage, "unknown flag"},
		{"agent with a stray argument", []string{"agent", "extra"}, exitUsage, `leasekeeper agent takes no arguments, got 1 ("extra")`},
		{"unknown command", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate" for "leasekeeper"`},
		{"unknown subcommand", []string{"card", "frob"}, exitUsage, `unknown command "frob" for "leasekeeper card"`},
		{"unknown subcommand, suggested", []string{"card", "shwo"}, exitUsage, `did you mean "show"?`},
		{"unknown board subcommand", []string{"board", "state", "frob"}, exitUsage, `unknown command "frob" for "leasekeeper board state"`},
		{"show without its id", []string{"card", "show"}, exitUsage, "leasekeeper card show needs ID, got none"},
		{"unknown flag of a group", []string{"card", "--bogus"}, exitUsage, "unknown flag"},
		{"unreachable agent is an error, not usage", []string{"status"}, exitError, "cannot reach the agent"},
		{"ui on every interface", []string{"ui", "--listen", "0.0.0.0:8080"}, exitUsage, "loopback address only"},
		{"ui on a host's address", []string{"ui", "--listen", "192.0.2.1:8080"}, exitUsage, "loopback address only"},
		{"ui without a port", []string{"ui", "--listen", "127.0.0.1"}, exitUsage, "missing port"},
		{"ui with no agent", []string{"ui", "--listen", "127.0.0.1:0"}, exitError, "cannot reach the agent"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			code := run(append([]string{"--socket", sock}, tc.args...), strings.NewReader(""), &out, &errb)
			if code != tc.wantCode {
				t.Errorf("exit = %d, want %d; stderr: %s", code, tc.wantCode, errb.String())
			}
			if !strings.Contains(errb.String(), tc.wantErr) {
				t.Errorf("stderr %q does not contain %q", errb.String(), tc.wantErr)
			}
		})
	}
}

func TestHelpDocumentsExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"2  usage error", "claim and card wait have codes of their own"}},
		{[]string{"claim", "--help"}, []string{
			"CMD's status", "3    the card is held by someone else", "4    the claim was lost", "120  usage error",
			"122  --next found no claimable card", "123  the card is in a terminal state", "125  leasekeeper failed",
			"130  interrupted (SIGINT; 143 for SIGTERM) while waiting",
		}},
		{[]string{"card", "wait", "--help"}, []string{
			"0    the card is in STATE", "3    the card rests in another terminal state", "4    the card does not exist",
			"124  --timeout passed first",
		}},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, strings.NewReader(""), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errb.String())
		}
		for _, want := range tc.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v help does not document %q", tc.args, want)
			}
		}
	}
}

func TestEveryDocumentedCommandExists(t *testing.T) {
	t.Parallel()
	root := newRoot(&cli{})
	for _, path := range [][]string{
		{"agent"}, {"card", "create"}, {"card", "ls"}, {"card", "show"}, {"card", "move"}, {"card", "reopen"},
		{"card", "label"}, {"card", "release"}, {"card", "wait"}, {"claim"}, {"status"}, {"events"}, {"reaper", "pass"}, {"health"},
		{"board", "show"}, {pluginCmdName},
	} {
		c, rest, err := root.Find(path)
		if err != nil || len(rest) != 0 || c.Name() != path[len(path)-1] {
			t.Errorf("command %v not found (got %v, rest %v, err %v)", path, c.Name(), rest, err)
		}
	}
	flags := map[string][]string{
		"agent":   {"config"},
		"claim":   {"next", "resumable", "fresh", "grace", "held-exit", "lost-exit", "wait"},
		"wait":    {"for", "timeout"},
		"status":  {"json", "output"},
		"events":  {"follow", "json", "output", "card", "type", "since"},
		"ls":      {"state", "label", "claimed", "limit", "json", "output"},
		"show":    {"json", "output"},
		"create":  {"title", "state", "depends-on", "label"},
		"label":   {"add", "remove", "set"},
		"release": {"force"},
		"pass":    {"dry-run"},
	}
	for _, path := range [][]string{{"agent"}, {"claim"}, {"status"}, {"events"}, {"card", "ls"}, {"card", "show"},
		{"card", "create"}, {"card", "label"}, {"card", "release"}, {"card", "wait"}, {"reaper", "pass"}, {"board", "show"}} {
		c, _, _ := root.Find(path)
		for _, f := range flags[c.Name()] {
			if c.Flags().Lookup(f) == nil {
				t.Errorf("%v has no --%s", path, f)
			}
		}
		if c.InheritedFlags().Lookup("socket") == nil && c.Flags().Lookup("socket") == nil {
			t.Errorf("%v has no --socket", path)
		}
	}
}

// TestAgentHelpListsEveryLiveKey checks `agent --help` against the keys
// docs/CONFIG.md marks live, and both against agent.LiveKeys.
func TestAgentHelpListsEveryLiveKey(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "CONFIG.md"))
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, l := range strings.Split(string(doc), "\n") {
		cells := strings.Split(l, "|")
		if len(cells) > 4 && strings.TrimSpace(cells[3]) == "**live**" {
			documented = append(documented, strings.Trim(strings.TrimSpace(cells[1]), "`"))
		}
	}
	if got, want := strings.Join(sorted(documented), ","), strings.Join(sorted(agent.LiveKeys), ","); got != want {
		t.Errorf("docs/CONFIG.md marks %s live, agent.LiveKeys is %s", got, want)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"agent", "--help"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("agent --help: exit %d: %s", code, errb.String())
	}
	for _, k := range documented {
		if !strings.Contains(out.String(), k) {
			t.Errorf("agent --help does not name the live key %s:\n%s", k, out.String())
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestE2EAgentSocketFlag: `agent --socket X` serves on X, over the
// config file's socket.
func TestE2EAgentSocketFlag(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	other := filepath.Join(e.Dir, "flag.sock")
	cmd := exec.Command(binary, "agent", "--config", e.Config, "--socket", other)
	cmd.Env, cmd.Dir = e.Environ(), e.Dir
	logs := &agentproc.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	agentproc.WaitFor(t, 30*time.Second, "the agent to serve on --socket", func() bool {
		_, _, code := e.Run("--socket", other, "health")
		return code == 0
	})
	if _, err := os.Stat(e.Socket); !os.IsNotExist(err) {
		t.Errorf("the config's socket %s exists (stat: %v): --socket must replace it", e.Socket, err)
	}
}
