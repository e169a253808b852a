package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// manHeader is the .TH line of every page. Source and Manual name the
// project, not the build, so pages generated from the same command tree are
// the same whatever binary wrote them; the date is the day they were
// written (SOURCE_DATE_EPOCH when set, for reproducible packages).
func manHeader() *doc.GenManHeader {
	return &doc.GenManHeader{Section: "1", Source: "leasekeeper", Manual: "leasekeeper manual"}
}

func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "man DIR",
		Short: "Write a man page for every command into DIR",
		Long: `Write a roff man page (section 1) for every command into DIR, generated
from the command tree: leasekeeper.1, leasekeeper-card-move.1 and so on.
The repository keeps them in docs/man; a packager installs them under
/usr/share/man/man1.`,
		Args: exactArgs(1, "DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeManPages(cmd.Root(), args[0])
		},
	}
}

// writeManPages writes the pages of root's tree into dir, creating it.
func writeManPages(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// No "auto generated" trailer: it carries a second date and says
	// nothing a reader needs.
	root.DisableAutoGenTag = true
	manText(root)
	h := manHeader()
	if os.Getenv("SOURCE_DATE_EPOCH") == "" {
		now := time.Now()
		h.Date = &now
	}
	if err := doc.GenManTree(root, h, dir); err != nil {
		return fmt.Errorf("writing man pages into %s: %w", dir, err)
	}
	return nil
}

// manText readies the help text of cmd and its subcommands for the man
// page generator, which reads it as Markdown: the indented blocks of the
// help (tables of exit codes, of outcomes, example commands) become
// preformatted blocks, which is how --help shows them, instead of being
// run together as one paragraph.
func manText(cmd *cobra.Command) {
	cmd.Long = preformatIndented(cmd.Long)
	for _, sub := range cmd.Commands() {
		manText(sub)
	}
}

// preformatIndented fences every run of indented lines of s (blank lines
// inside a run belong to it) as a Markdown code block.
func preformatIndented(s string) string {
	lines := strings.Split(s, "\n")
	indented := func(l string) bool { return strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") }
	var out []string
	for i := 0; i < len(lines); {
		if !indented(lines[i]) {
			out = append(out, lines[i])
			i++
			continue
		}
		end := i
		for j := i; j < len(lines); j++ {
			if indented(lines[j]) {
				end = j + 1
			} else if lines[j] != "" {
				break
			}
		}
		if len(out) > 0 && out[len(out)-1] != "" {
			out = append(out, "")
		}
		out = append(out, "```")
		out = append(out, lines[i:end]...)
		out = append(out, "```")
		i = end
	}
	return strings.Join(out, "\n")
}
