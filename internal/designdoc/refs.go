package designdoc

import (
	"regexp"
	"strings"
)

// Ref is a code reference of DESIGN.md: a package directory and a name in
// it ("Func", "Type", "Type.Method", "TestName").
type Ref struct {
	Dir  string
	Name string
}

func (r Ref) String() string { return r.Dir + "." + r.Name }

// codeSpan is the shape of a code reference inside backticks: a package
// directory (lowercase path segments), a dot, and one identifier or
// Type.Method.
var codeSpan = regexp.MustCompile("`((?:[a-z][a-z0-9_]*/)*[a-z][a-z0-9_]*)\\.([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)?)`")

// CodeRefs lists the code references of doc: every backticked span of the
// form dir.Name or dir.Type.Method whose dir is a package directory of the
// module (isDir). A span whose first part is not a package directory —
// `docs/CONFIG.md`, `reaper.enabled` — is not a code reference.
func CodeRefs(doc string, isDir func(string) bool) []Ref {
	var out []Ref
	for _, m := range codeSpan.FindAllStringSubmatch(doc, -1) {
		if isDir(m[1]) {
			out = append(out, Ref{Dir: m[1], Name: m[2]})
		}
	}
	return out
}

var (
	explicitAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"\s*>`)
	heading        = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	fence          = regexp.MustCompile("(?ms)^```.*?^```")
	slugDrop       = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)
)

// Anchors lists the anchors doc defines: explicit <a id="..."> anchors and
// the GitHub slug of every heading (lowercased, punctuation but '-' and '_'
// dropped, spaces as '-', a repeated slug numbered -1, -2 …). Code blocks
// define none.
func Anchors(doc string) map[string]bool {
	out := map[string]bool{}
	for _, m := range explicitAnchor.FindAllStringSubmatch(doc, -1) {
		out[m[1]] = true
	}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(doc, ""), -1) {
		title := explicitAnchor.ReplaceAllString(m[1], "")
		title = strings.ReplaceAll(title, "</a>", "")
		slug := Slug(title)
		if n := seen[slug]; n > 0 {
			out[slug+"-"+itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// Slug is GitHub's anchor for a heading title.
func Slug(title string) string {
	s := strings.ToLower(strings.TrimSpace(title))
	s = slugDrop.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}

// citation is a pointer into the design record from anywhere in the tree:
// DESIGN.md#<anchor>, with or without a path before it.
var citation = regexp.MustCompile(`DESIGN\.md#([A-Za-z0-9_-]+)`)

// Citations lists the anchors text cites as DESIGN.md#<anchor>.
func Citations(text string) []string {
	var out []string
	for _, m := range citation.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// internalLink is a Markdown link to an anchor of the same document.
var internalLink = regexp.MustCompile(`\]\(#([A-Za-z0-9_-]+)\)`)

// internalLinks lists the anchors doc links to within itself.
func internalLinks(doc string) []string {
	var out []string
	for _, m := range internalLink.FindAllStringSubmatch(doc, -1) {
		out = append(out, m[1])
	}
	return out
}

// pathSpan is a backticked path relative to the repository root: segments
// joined by '/', ending in a file with an extension or in '/' (a
// directory). `/v1/cards`, `$HOME/x` and `~/x` are not such paths, nor
// is a code reference (`store/bolt.Store.Start`: no extension of a file).
var pathSpan = regexp.MustCompile("`((?:[A-Za-z0-9_][A-Za-z0-9_.-]*/)+(?:[A-Za-z0-9_.-]*\\.(?:go|sh|proto|md|yaml|png|py|service|conf|env))?)`")

// PathRefs lists the repository paths doc names in backticks.
func PathRefs(doc string) []string {
	var out []string
	for _, m := range pathSpan.FindAllStringSubmatch(fence.ReplaceAllString(doc, ""), -1) {
		out = append(out, m[1])
	}
	return out
}
