package designdoc

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repo is the repository as the tests read it.
type repo struct {
	root   string
	design string
	files  []string
}

func load(t *testing.T) repo {
	t.Helper()
	root, err := Root(".")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := TextFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	return repo{root: root, design: string(b), files: files}
}

func (r repo) read(t *testing.T, f string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(f)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDesignDoc checks the design record against the repository: every
// DESIGN.md#<anchor> cited in a .go or .md file exists in docs/DESIGN.md,
// every link inside DESIGN.md to one of its own anchors exists, no anchor
// is defined twice, and every code reference DESIGN.md makes names a
// declaration of the module (parsed with go/parser).
func TestDesignDoc(t *testing.T) {
	t.Parallel()
	r := load(t)
	anchors := Anchors(r.design)

	t.Run("CitedAnchorsExist", func(t *testing.T) {
		t.Parallel()
		cited := 0
		for _, f := range r.files {
			text := r.read(t, f)
			for i, line := range strings.Split(text, "\n") {
				for _, a := range Citations(line) {
					cited++
					if !anchors[a] {
						t.Errorf("%s:%d cites DESIGN.md#%s, which docs/DESIGN.md does not define", f, i+1, a)
					}
				}
			}
		}
		if cited == 0 {
			t.Error("no file cites a DESIGN.md anchor: the scan found nothing to check")
		}
	})

	t.Run("InternalLinksExist", func(t *testing.T) {
		t.Parallel()
		for _, doc := range codeRefDocs {
			text := r.read(t, doc.path)
			own := Anchors(text)
			for _, a := range internalLinks(text) {
				if !own[a] {
					t.Errorf("%s links to #%s, which it does not define", doc.path, a)
				}
			}
		}
	})

	t.Run("AnchorsAreUnique", func(t *testing.T) {
		t.Parallel()
		seen := map[string]bool{}
		for _, m := range explicitAnchor.FindAllStringSubmatch(r.design, -1) {
			if seen[m[1]] {
				t.Errorf("DESIGN.md defines anchor %q twice", m[1])
			}
			seen[m[1]] = true
		}
	})

	t.Run("EveryRowHasAnAnchor", func(t *testing.T) {
		t.Parallel()
		// The decision table's rows, as the watchdog numbers them.
		for row := 1; row <= 12; row++ {
			if a := "row-" + itoa(row); !anchors[a] {
				t.Errorf("DESIGN.md has no #%s", a)
			}
		}
		if !anchors["lifecycle"] {
			t.Error("DESIGN.md has no #lifecycle section")
		}
	})

	t.Run("CodeReferencesResolve", func(t *testing.T) {
		t.Parallel()
		syms, err := LoadSymbols(r.root)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range codeRefDocs {
			refs := CodeRefs(r.read(t, doc.path), syms.HasDir)
			if len(refs) < doc.atLeast {
				t.Errorf("%s makes %d code references; the scan is not reading them", doc.path, len(refs))
			}
			for _, ref := range refs {
				if !syms.Has(ref) {
					t.Errorf("%s names `%s`, which package directory %s does not declare", doc.path, ref, ref.Dir)
				}
			}
		}
	})

	t.Run("PathsExist", func(t *testing.T) {
		t.Parallel()
		for _, doc := range codeRefDocs {
			for _, p := range PathRefs(r.read(t, doc.path)) {
				if _, err := os.Stat(filepath.Join(r.root, filepath.FromSlash(p))); err != nil {
					t.Errorf("%s names `%s`, which the repository does not have", doc.path, p)
				}
			}
		}
	})
}

// codeRefDocs are the documents whose backticked code references
// (`dir.Name`) must resolve and whose backticked paths must exist: the
// design record and the maps of the code for its next engineer. atLeast
// is how many references each makes at the least, so a scan that reads
// nothing fails.
var codeRefDocs = []struct {
	path    string
	atLeast int
}{
	{"docs/DESIGN.md", 100},
	{"docs/ARCHITECTURE.md", 100},
	{"CONTRIBUTING.md", 10},
}

// TestNoStaleCitations fails while any .go or .md file outside a CHANGELOG
// still cites the old design record or a document the repository does not
// have, and names each line. Most are fixed by running
// docs/tools/cite-design.sh; it lists what needs a hand-written rewording.
func TestNoStaleCitations(t *testing.T) {
	t.Parallel()
	r := load(t)
	var stale []string
	for _, f := range r.files {
		if Exempt(f) {
			continue
		}
		for _, s := range StaleLines(f, r.read(t, f)) {
			stale = append(stale, s.String())
		}
	}
	if len(stale) > 0 {
		t.Errorf("%d line(s) cite a document the repository lacks; run docs/tools/cite-design.sh, then reword what it lists:\n%s",
			len(stale), strings.Join(stale, "\n"))
	}
}

// TestCitedDocumentsExist fails while a .go or .md file outside a
// CHANGELOG names a NAME.md document (in capitals, as the repository names
// its own) that no file of the repository is called, and names each line:
// a pointer into a document a reader cannot open. Cite a DESIGN.md anchor
// or state the rule instead.
func TestCitedDocumentsExist(t *testing.T) {
	t.Parallel()
	r := load(t)
	have := map[string]bool{}
	for _, f := range r.files {
		if strings.HasSuffix(f, ".md") {
			have[filepath.Base(f)] = true
		}
	}
	if !have["DESIGN.md"] || !have["README.md"] {
		t.Fatalf("the repository's documents were not found (%d .md files)", len(have))
	}
	var missing []string
	for _, f := range r.files {
		if Exempt(f) {
			continue
		}
		for _, s := range MissingDocs(f, r.read(t, f), func(name string) bool { return have[name] }) {
			missing = append(missing, s.String())
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d line(s) name a document the repository does not have:\n%s", len(missing), strings.Join(missing, "\n"))
	}
}

func TestMissingDocs(t *testing.T) {
	t.Parallel()
	have := func(name string) bool { return name == "DESIGN.md" || name == "BOARD-ADMIN.md" }
	for _, s := range []string{"see STY" + "LE.md", "(TEST" + "ING.md, the race run)", "docs/DESIGN.md#fence and PIT" + "FALLS.md"} {
		if got := MissingDocs("x.go", s, have); len(got) != 1 {
			t.Errorf("MissingDocs(%q) = %v, want the line once", s, got)
		}
	}
	for _, s := range []string{"see docs/DESIGN.md#fence", "[BOARD-ADMIN.md](docs/BOARD-ADMIN.md)", "store.proto", "readme.md"} {
		if got := MissingDocs("x.go", s, have); len(got) != 0 {
			t.Errorf("MissingDocs(%q) = %v, want none", s, got)
		}
	}
}

func TestPathRefs(t *testing.T) {
	t.Parallel()
	doc := "`plugins/gen.sh`, `plugins/storepb/`, `store/bolt.Store.Start`, `/v1/cards`, `cmd/leasekeeper`, `docs/DESIGN.md`\n```\n`in/a/fence.go`\n```\n"
	got := PathRefs(doc)
	want := []string{"plugins/gen.sh", "plugins/storepb/", "docs/DESIGN.md"}
	if !slices.Equal(got, want) {
		t.Errorf("PathRefs = %q, want %q", got, want)
	}
}

// TestRewriteIsIdempotent runs the rewrite over the repository as it is: a
// tree the test above passes on must come out unchanged, so the merger can
// re-run it after every merge.
func TestRewriteIsIdempotent(t *testing.T) {
	t.Parallel()
	r := load(t)
	for _, f := range r.files {
		if Exempt(f) {
			continue
		}
		text := r.read(t, f)
		if got, edits := Rewrite(f, text); got != text {
			t.Errorf("%s: the rewrite changes a file with no stale citation: %+v", f, edits)
		}
	}
}

func TestRewrite(t *testing.T) {
	t.Parallel()
	rec := oldRecord
	tests := []struct {
		name, path, in, want string
	}{
		{"section in parentheses", "a/b.go",
			"// every owner write is fenced (" + rec + " §2).\n",
			"// every owner write is fenced (DESIGN.md#fence).\n"},
		{"context refines the section", "a/b.go",
			"// the sweep's write is a compare-and-set on the labels (" + rec + " §9).\n",
			"// the sweep's write is a compare-and-set on the labels (DESIGN.md#label-sweeps).\n"},
		{"a section list wrapped across comment lines", "a/b.go",
			"\t// sweepRecovery releases abandoned recovery claims (" + rec + "\n\t// §8, §9). It is fenced.\n",
			"\t// sweepRecovery releases abandoned recovery claims (DESIGN.md#recovery-sweep). It is fenced.\n"},
		{"consequences wrapped", "a/b.go",
			"// a launch-column target never fires (" + rec + "\n// Consequences).\n",
			"// a launch-column target never fires (DESIGN.md#verdict-provenance).\n"},
		{"a bare section sign", "a/b.go",
			"// nobody else writes its file (§7).\n",
			"// nobody else writes its file (DESIGN.md#twin-unleased).\n"},
		{"the parking brake", "a/b.go",
			"// a paused run keeps its claim (ADR" + "-014's parking brake).\n",
			"// a paused run keeps its claim (DESIGN.md#row-6 parking brake).\n"},
		{"markdown links relative to the file", "README.md",
			"differ on purpose (" + rec + " §7), each",
			"differ on purpose ([DESIGN.md#twins](docs/DESIGN.md#twins)), each"},
		{"markdown under docs", "docs/CONFIG.md",
			"a plain counter (" + rec + " §7).",
			"a plain counter ([DESIGN.md#twin-epoch](DESIGN.md#twin-epoch))."},
		{"nothing to rewrite", "a/b.go",
			"// (DESIGN.md#fence) stays as it is.\n",
			"// (DESIGN.md#fence) stays as it is.\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _ := Rewrite(tc.path, tc.in)
			if got != tc.want {
				t.Errorf("Rewrite(%q) =\n%q\nwant\n%q", tc.in, got, tc.want)
			}
			if again, _ := Rewrite(tc.path, got); again != got {
				t.Errorf("a second rewrite changed %q to %q", got, again)
			}
			if len(StaleLines(tc.path, got)) != 0 {
				t.Errorf("the rewrite left a stale citation: %q", got)
			}
		})
	}
}

func TestStaleLinesNamesEachForm(t *testing.T) {
	t.Parallel()
	stale := []string{
		"see " + oldRecord, "ADR" + "-014's brake", "(§5)", "as in the " + "ADR's release",
		"(PIT" + "FALLS)", "PRO" + "DUCT.md", `(PRO` + `DUCT "Command line")`,
		"the way the " + "brief allows", "the product " + "brief",
		"stays small (STY" + "LE habit 10)", "see STY" + "LE.md",
	}
	for _, s := range stale {
		if got := StaleLines("x.go", s); len(got) != 1 {
			t.Errorf("StaleLines(%q) = %v, want the line", s, got)
		}
	}
	for _, s := range []string{"see DESIGN.md#fence", "a brief pause", "production"} {
		if got := StaleLines("x.go", s); len(got) != 0 {
			t.Errorf("StaleLines(%q) = %v, want none", s, got)
		}
	}
}

func TestAnchors(t *testing.T) {
	t.Parallel()
	doc := "# The claim family\n<a id=\"fence\"></a>\n## Sinks and Reopen\n```\n# not a heading\n```\n## Sinks and Reopen\n"
	got := Anchors(doc)
	var names []string
	for a := range got {
		names = append(names, a)
	}
	slices.Sort(names)
	want := []string{"fence", "sinks-and-reopen", "sinks-and-reopen-1", "the-claim-family"}
	if !slices.Equal(names, want) {
		t.Errorf("Anchors = %v, want %v", names, want)
	}
}

func TestCodeRefs(t *testing.T) {
	t.Parallel()
	isDir := func(d string) bool { return d == "watchdog" || d == "store/bolt" }
	doc := "`watchdog.DecideStuckCard`, `store/bolt.Store.Claim`, `reaper.enabled`, `docs/CONFIG.md`, `watchdog.a.b.c`"
	got := CodeRefs(doc, isDir)
	want := []Ref{{"watchdog", "DecideStuckCard"}, {"store/bolt", "Store.Claim"}}
	if !slices.Equal(got, want) {
		t.Errorf("CodeRefs = %v, want %v", got, want)
	}
}

func TestLoadSymbols(t *testing.T) {
	t.Parallel()
	root, err := Root(".")
	if err != nil {
		t.Fatal(err)
	}
	syms, err := LoadSymbols(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []Ref{
		{"watchdog", "DecideStuckCard"},           // function
		{"watchdog", "Reaper.RunOnce"},            // method on a pointer
		{"board", "Store.ReclaimExpired"},         // interface method, promoted from Recovery
		{"board", "Recovery.ReclaimExpired"},      // interface method, declared
		{"board", "Store.LoadBoard"},              // promoted through two embeddings
		{"watchdog", "Config.Workers"},            // struct field
		{"internal/designdoc", "TestLoadSymbols"}, // test
	} {
		if !syms.Has(ref) {
			t.Errorf("LoadSymbols misses %s", ref)
		}
	}
	for _, ref := range []Ref{{"watchdog", "NoSuchThing"}, {"bench", "main"}, {"board", "Claimer.Start"}} {
		if syms.Has(ref) {
			t.Errorf("LoadSymbols has %s, which the module's packages do not declare", ref)
		}
	}
}
