// Command citedesign rewrites the repository's citations of the old design
// record and of documents the repository lacks into pointers at the
// DESIGN.md anchor of each rule (see designdoc.Rewrite), then lists the
// lines that still need a hand-written rewording. It is idempotent: run it
// again after a merge. docs/tools/cite-design.sh runs it from the
// repository root.
//
// Usage: go run ./internal/designdoc/citedesign [-n] [-v]
//
//	-n  write nothing; print what would change
//	-v  print every rewritten citation
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leasekeeper/leasekeeper/internal/designdoc"
)

func main() {
	dry := flag.Bool("n", false, "write nothing; print what would change")
	verbose := flag.Bool("v", false, "print every rewritten line")
	flag.Parse()
	if err := run(*dry, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "citedesign:", err)
		os.Exit(1)
	}
}

func run(dry, verbose bool) error {
	root, err := designdoc.Root(".")
	if err != nil {
		return err
	}
	files, err := designdoc.TextFiles(root)
	if err != nil {
		return err
	}
	changed := 0
	var left []designdoc.Stale
	for _, f := range files {
		if designdoc.Exempt(f) {
			continue
		}
		path := filepath.Join(root, filepath.FromSlash(f))
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		old := string(b)
		text, edits := designdoc.Rewrite(f, old)
		if text != old {
			changed++
			if verbose || dry {
				for _, e := range edits {
					fmt.Printf("%s:%d: %q → %s\n", f, e.Line, e.Old, e.New)
				}
			}
			if !dry {
				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
					return err
				}
			}
		}
		left = append(left, designdoc.StaleLines(f, text)...)
	}
	verb := "rewrote"
	if dry {
		verb = "would rewrite"
	}
	fmt.Printf("citedesign: %s %d file(s)\n", verb, changed)
	if len(left) > 0 {
		fmt.Printf("citedesign: %d line(s) still cite a document the repository lacks; reword them by hand:\n", len(left))
		for _, s := range left {
			fmt.Println("  " + s.String())
		}
		os.Exit(3)
	}
	return nil
}
