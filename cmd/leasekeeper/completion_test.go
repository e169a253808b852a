package main

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestCompletionScripts: each shell gets a script for this command tree,
// and the script's callback (cobra's hidden __complete) offers the real
// subcommands.
func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		shell string
		want  string // a line only that shell's script carries
		check []string
	}{
		{"bash", "__start_leasekeeper", []string{"bash", "-n"}},
		{"zsh", "#compdef leasekeeper", []string{"zsh", "-n"}},
		{"fish", "complete -c leasekeeper", []string{"fish", "--no-execute"}},
	} {
		t.Run(tc.shell, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			if code := run([]string{"completion", tc.shell}, strings.NewReader(""), &out, &errb); code != exitOK {
				t.Fatalf("completion %s: exit %d: %s", tc.shell, code, errb.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Fatalf("completion %s output lacks %q", tc.shell, tc.want)
			}
			// When the shell is installed, it must accept the script.
			if sh, err := exec.LookPath(tc.check[0]); err == nil {
				cmd := exec.Command(sh, tc.check[1:]...)
				cmd.Stdin = bytes.NewReader(out.Bytes())
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s rejects the script: %v\n%s", tc.shell, err, b)
				}
			}
		})
	}
}

func TestCompletionCandidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"top level", []string{"__complete", ""}, []string{"agent", "card", "claim", "completion", "reaper", "status"}},
		{"card verbs", []string{"__complete", "card", ""}, []string{"create", "ls", "move", "reopen", "release", "wait"}},
		{"shells", []string{"__complete", "completion", ""}, []string{"bash", "zsh", "fish"}},
		{"flags", []string{"__complete", "reaper", "pass", "--"}, []string{"--dry-run", "--json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tc.args, strings.NewReader(""), &out, &errb); code != exitOK {
				t.Fatalf("%v: exit %d: %s", tc.args, code, errb.String())
			}
			var got []string
			for _, line := range strings.Split(out.String(), "\n") {
				name, _, _ := strings.Cut(line, "\t")
				got = append(got, name)
			}
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("%v offers %q, missing %q", tc.args, got, w)
				}
			}
		})
	}
}

func TestCompletionUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		var out, errb bytes.Buffer
		if code := run(args, strings.NewReader(""), &out, &errb); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
