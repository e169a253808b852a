package designdoc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Root finds the repository root: the nearest directory at or above dir
// holding a go.mod that declares the leasekeeper module.
func Root(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/leasekeeper/leasekeeper\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no leasekeeper go.mod above the working directory")
		}
		dir = parent
	}
}

// SelfDir is this package's directory: it holds the rewrite's mapping from
// the old citation forms, so it is the one place they may be spelled.
const SelfDir = "internal/designdoc"

// TextFiles lists the .go and .md files of the repository rooted at root,
// nested modules included, as slash-separated paths relative to root.
// Hidden directories, vendor and node_modules are skipped.
func TextFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the repository's files: %w", err)
	}
	return out, nil
}

// Exempt reports the files that may still name the old documents: a
// CHANGELOG, which is history, and this package, which holds the mapping.
func Exempt(path string) bool {
	return filepath.Base(path) == "CHANGELOG.md" || strings.HasPrefix(path, SelfDir+"/")
}

// stale matches what a file may no longer cite: the old record (by name or
// by section sign), the parking-brake record, the three documents that are
// not in the repository (PITFALLS, PRODUCT, STYLE and its numbered
// "habits"), and "the brief".
var stale = regexp.MustCompile(`ADR-\d+|§\d|\bthe ADR\b|\bPITFALLS\b|\bPRODUCT\b|\bSTYLE\b|(?i:\bthe (?:product )?brief\b)`)

// mayCiteStale reports whether text holds a word every match of stale
// needs; false means no line of it matches.
func mayCiteStale(text string) bool {
	for _, w := range []string{"ADR", "§", "PITFALLS", "PRODUCT", "STYLE"} {
		if strings.Contains(text, w) {
			return true
		}
	}
	return strings.Contains(strings.ToLower(text), "brief")
}

// Stale is one line that still cites a document the repository lacks.
type Stale struct {
	Path string
	Line int
	Text string
}

func (s Stale) String() string {
	return fmt.Sprintf("%s:%d: %s", s.Path, s.Line, strings.TrimSpace(s.Text))
}

// StaleLines lists the lines of text (the file at path) that cite a
// document the repository lacks.
func StaleLines(path, text string) []Stale {
	// Almost every file has no such line, and the expression is slow on a
	// whole repository: look for the words it needs first.
	if !mayCiteStale(text) {
		return nil
	}
	var out []Stale
	for i, line := range strings.Split(text, "\n") {
		if stale.MatchString(line) {
			out = append(out, Stale{Path: path, Line: i + 1, Text: line})
		}
	}
	return out
}

// docName matches a document cited by its file name in capitals, the way
// the repository names its own (README.md, DESIGN.md, BOARD-ADMIN.md).
var docName = regexp.MustCompile(`\b[A-Z][A-Z0-9_-]*\.md\b`)

// MissingDocs lists the lines of text (the file at path) that name a
// NAME.md document for which have reports false: a document the
// repository does not have, whatever it is called.
func MissingDocs(path, text string, have func(name string) bool) []Stale {
	if !strings.Contains(text, ".md") {
		return nil
	}
	var out []Stale
	for i, line := range strings.Split(text, "\n") {
		for _, name := range docName.FindAllString(line, -1) {
			if !have(name) {
				out = append(out, Stale{Path: path, Line: i + 1, Text: name + ": " + strings.TrimSpace(line)})
			}
		}
	}
	return out
}
