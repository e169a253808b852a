package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// manRegenerate is how a contributor brings docs/man up to date.
const manRegenerate = "rm -f docs/man/*.1 && go run ./cmd/leasekeeper man docs/man"

// manDate is the date field of a page's .TH line: the day the page was
// written, the one part of a page that does not come from the command tree.
var manDate = regexp.MustCompile(`(?m)^(\.TH "[^"]*" "[^"]*") "[^"]*"`)

func readManPages(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.1"))
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pages[filepath.Base(f)] = manDate.ReplaceAllString(string(b), `$1 "DATE"`)
	}
	return pages
}

// TestManPagesCurrent: docs/man holds exactly the pages `leasekeeper man`
// writes for this command tree, one per visible command, each valid roff.
func TestManPagesCurrent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"man", dir}, strings.NewReader(""), &out, &errb); code != exitOK {
		t.Fatalf("leasekeeper man: exit %d: %s", code, errb.String())
	}
	fresh := readManPages(t, dir)
	committed := readManPages(t, filepath.Join("..", "..", "docs", "man"))

	// A page for every visible command, found independently of cobra/doc.
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.Hidden || cmd.Name() == "help" {
			return
		}
		name := strings.ReplaceAll(cmd.CommandPath(), " ", "-") + ".1"
		if _, ok := fresh[name]; !ok {
			t.Errorf("leasekeeper man wrote no %s", name)
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&cli{}))

	var stale []string
	for name, page := range fresh {
		if committed[name] != page {
			stale = append(stale, name)
		}
	}
	for name := range committed {
		if _, ok := fresh[name]; !ok {
			stale = append(stale, name+" (no such command any more)")
		}
	}
	slices.Sort(stale)
	if len(stale) > 0 {
		t.Errorf("docs/man is stale: %s\nregenerate from the repository root with:\n\t%s", strings.Join(stale, ", "), manRegenerate)
	}

	// The pages are valid roff where groff is installed.
	if groff, err := exec.LookPath("groff"); err == nil {
		for name := range fresh {
			cmd := exec.Command(groff, "-man", "-z", "-ww", "-Tutf8", filepath.Join(dir, name))
			if b, err := cmd.CombinedOutput(); err != nil || len(b) > 0 {
				t.Errorf("groff on %s: %v\n%s", name, err, b)
			}
		}
	}
}

func TestPreformatIndented(t *testing.T) {
	t.Parallel()
	in := "Exit codes:\n  0  ok\n\n  1  error\nAfter.\n\n  tail"
	want := "Exit codes:\n\n```\n  0  ok\n\n  1  error\n```\nAfter.\n\n```\n  tail\n```"
	if got := preformatIndented(in); got != want {
		t.Errorf("preformatIndented:\n%q\nwant\n%q", got, want)
	}
}
