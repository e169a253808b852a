package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestGeneratedFilesAreCurrent fails when a generated layer is not what
// storegen writes from today's board.Store: a verb added, reshaped or
// removed without `go generate ./...`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	for layer := range layers {
		path, want, err := generate("../..", layer)
		if err != nil {
			t.Fatalf("%s: %v", layer, err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./... and commit the result", path)
		}
	}
}

// TestEveryVerbHasTheShape reads the contract the generators read and
// checks that it lists every verb once, each in the one shape.
func TestEveryVerbHasTheShape(t *testing.T) {
	verbs, err := storeVerbs("../../board")
	if err != nil {
		t.Fatal(err)
	}
	if len(verbs) < 30 {
		t.Fatalf("found %d verbs in board.Store, want the whole contract", len(verbs))
	}
	seen := map[string]bool{}
	for _, v := range verbs {
		if seen[v.Name] {
			t.Errorf("verb %s listed twice", v.Name)
		}
		seen[v.Name] = true
		if v.Param != "" && !strings.HasSuffix(v.Param, "Params") {
			t.Errorf("%s takes %s; a verb's input is its <Verb>Params (or a family's shared Params)", v.Name, v.Param)
		}
	}
}

// TestShapeOfRefusesAnotherShape: a verb with positional arguments or
// with two answers is refused, naming the rule.
func TestShapeOfRefusesAnotherShape(t *testing.T) {
	src := `package board
type Store interface {
	Release(ctx context.Context, card, marker, actor string) error
	Claim(ctx context.Context, p ClaimParams) (Card, ClaimToken, error)
	GetCard(ctx context.Context, id string) (Card, error)
	SetStateFrom(ctx context.Context, p MoveParams) (bool, error)
	Close() error
}`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	it := f.Decls[0].(*ast.GenDecl).Specs[0].(*ast.TypeSpec).Type.(*ast.InterfaceType)
	types := map[string]bool{"ClaimParams": true, "Card": true, "ClaimToken": true, "MoveParams": true}
	for _, m := range it.Methods.List[:4] {
		_, err := shapeOf(m.Names[0].Name, m.Type.(*ast.FuncType), types)
		if err == nil || !strings.Contains(err.Error(), "DESIGN.md#verb-shape") {
			t.Errorf("%s: err = %v, want the verb-shape refusal", m.Names[0].Name, err)
		}
	}
}

// TestPluginSidesAreWrittenApart: the agent's side of each verb goes to
// the agent's package (plugins) and the plugin's handler to the plugin's
// (plugins/serve), each calling the conversions the two share through
// package wire; neither file holds the other side's code.
func TestPluginSidesAreWrittenApart(t *testing.T) {
	verbs, err := storeVerbs("../../board")
	if err != nil {
		t.Fatal(err)
	}
	sides := []struct {
		layer, pkg, own, other string
	}{
		{"host", "package plugins\n", "func (s *verbs) ", "func (s *server) "},
		{"serve", "package serve\n", "func (s *server) ", "func (s *verbs) "},
	}
	for _, side := range sides {
		path, out, err := generate("../..", side.layer)
		if err != nil {
			t.Fatalf("%s: %v", side.layer, err)
		}
		src := string(out)
		if !strings.Contains(src, side.pkg) {
			t.Errorf("%s: %s is not in %q", side.layer, path, strings.TrimSpace(side.pkg))
		}
		if n := strings.Count(src, side.own); n == 0 || n > len(verbs) {
			t.Errorf("%s: %s declares %d methods %q, want between 1 and %d", side.layer, path, n, side.own, len(verbs))
		}
		if strings.Contains(src, side.other) {
			t.Errorf("%s: %s declares %q, the other side's", side.layer, path, side.other)
		}
		if !strings.Contains(src, `"github.com/leasekeeper/leasekeeper/plugins/internal/wire"`) {
			t.Errorf("%s: %s does not convert through package wire", side.layer, path)
		}
		for _, bad := range []string{"\"github.com/leasekeeper/leasekeeper/plugins\"", "\"github.com/leasekeeper/leasekeeper/plugins/serve\""} {
			if strings.Contains(src, bad) {
				t.Errorf("%s: %s imports %s", side.layer, path, bad)
			}
		}
	}
}

// TestAFileTheBuildIgnoresIsNotHandWritten: a method in a file the build
// never compiles (a //go:build ignore sample) does not count as written
// by hand, or the generated one would be left out of every build.
func TestAFileTheBuildIgnoresIsNotHandWritten(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"instrument.go", "sample.go"} {
		src := "package agent\n\ntype meteredStore struct{}\n\nfunc (meteredStore) Claim() {}\n"
		if n == "sample.go" {
			src = "//go:build ignore\n\npackage agent\n\nfunc (meteredStore) ReleaseOwned() {}\n"
		}
		if err := os.WriteFile(dir+"/"+n, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hand, err := handWritten(dir, "meteredStore")
	if err != nil {
		t.Fatal(err)
	}
	if !hand["Claim"] || hand["ReleaseOwned"] {
		t.Errorf("hand-written = %v; want Claim only (sample.go is never compiled)", hand)
	}
}

// TestTheReadDirectiveMarksAVerbARead: a verb whose comment carries
// //storegen:read is a read, alone or after its prose; any other verb is
// not, nor one whose comment only mentions the directive in its prose.
func TestTheReadDirectiveMarksAVerbARead(t *testing.T) {
	dir := t.TempDir()
	src := `package board

import "context"

type Store interface {
	//storegen:read
	GetCard(ctx context.Context, p GetCardParams) (Card, error)
	// ListCards lists cards.
	//storegen:read
	ListCards(ctx context.Context, p ListCardsParams) ([]Card, error)
	// Claim is not a read, though this line names //storegen:read.
	Claim(ctx context.Context, p ClaimParams) (Card, error)
	Release(ctx context.Context, p ReleaseParams) error
}

type (
	Card            struct{}
	GetCardParams   struct{}
	ListCardsParams struct{}
	ClaimParams     struct{}
	ReleaseParams   struct{}
)
`
	if err := os.WriteFile(dir+"/store.go", []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	verbs, err := storeVerbs(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"GetCard": true, "ListCards": true, "Claim": false, "Release": false}
	if len(verbs) != len(want) {
		t.Fatalf("read %d verbs, want %d", len(verbs), len(want))
	}
	for _, v := range verbs {
		if v.Read != want[v.Name] {
			t.Errorf("%s: read = %v, want %v", v.Name, v.Read, want[v.Name])
		}
	}
}
