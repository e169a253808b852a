package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"
)

// TestStoreOpsNameEveryCountedVerb keeps storeOps, the op labels
// leasekeeper_store_errors_total starts with at 0, equal to the ops
// meteredStore actually counts: every string literal its files (the
// hand-written instrument.go and the generated metered_gen.go) pass to
// read, done, owned or acquired.
func TestStoreOpsNameEveryCountedVerb(t *testing.T) {
	counted := map[string]bool{}
	for _, name := range []string{"instrument.go", "metered_gen.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		countedIn(t, f, counted)
	}
	if len(counted) == 0 {
		t.Fatal("found no counted ops in instrument.go and metered_gen.go")
	}
	for op := range counted {
		if !slices.Contains(storeOps, op) {
			t.Errorf("meteredStore counts op %q, which storeOps does not list", op)
		}
	}
	for _, op := range storeOps {
		if !counted[op] {
			t.Errorf("storeOps lists %q, which meteredStore never counts", op)
		}
	}
}

// countedIn adds to counted the op labels f passes to read, done, owned or
// acquired.
func countedIn(t *testing.T, f *ast.File, counted map[string]bool) {
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !slices.Contains([]string{"read", "done", "owned", "acquired"}, sel.Sel.Name) {
			return true
		}
		if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			op, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			counted[op] = true
		}
		return true
	})
}
