package board_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
)

// Exempt on purpose: fault injectors that override the one verb they
// break and embed the store for the rest — the suite's mutants, the test
// plugin's hanging store, and the test doubles of _test files that embed
// (a _test file's type is checked when it names its store field or claims
// to be a board.Store). The plugin's gRPC server holds a store and serves
// its verbs as RPCs with their own signatures; Close is not one of them
// (the plugin process closes its store itself).
var exempt = map[string]bool{
	"board/boardtest/mutant_test.go":      true,
	"plugins/internal/testplugin/main.go": true,
}

const rpcServer = "plugins/serve.server"

// TestStoreWrappersImplementEveryVerb walks the repository's Go files and
// finds every type that wraps a board.Store (a struct with a board.Store
// field that declares verbs of the contract) or claims to be one (var _
// board.Store = T). Each must declare every verb of board.Store itself: an
// embedded store would forward a verb added to the contract later without
// the wrapper's own handling (counting it, converting it, injecting faults
// into it), and the compiler would not say a word.
func TestStoreWrappersImplementEveryVerb(t *testing.T) {
	root := moduleRoot(t)
	st := reflect.TypeFor[board.Store]()
	verbs := make([]string, st.NumMethod())
	for i := range verbs {
		verbs[i] = st.Method(i).Name
	}

	type typeInfo struct {
		file      string
		embeds    bool // embeds board.Store
		hasField  bool // holds a board.Store field
		asserted  bool // var _ board.Store = T
		methods   map[string]bool
		isStruct  bool
		declPlace string
		// promoted names the struct types it embeds (same package): their
		// methods are its own, declared once for several wrappers.
		promoted []string
	}
	types := map[string]*typeInfo{} // dir + "." + name
	get := func(dir, name string) *typeInfo {
		k := dir + "." + name
		if types[k] == nil {
			types[k] = &typeInfo{methods: map[string]bool{}}
		}
		return types[k]
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == "storepb" || strings.HasPrefix(n, ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if exempt[filepath.ToSlash(rel)] {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.Dir(rel)
		inBoard := f.Name.Name == "board"
		isStore := func(e ast.Expr) bool {
			switch x := e.(type) {
			case *ast.SelectorExpr:
				id, ok := x.X.(*ast.Ident)
				return ok && id.Name == "board" && x.Sel.Name == "Store"
			case *ast.Ident:
				return inBoard && x.Name == "Store"
			}
			return false
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						stt, ok := s.Type.(*ast.StructType)
						if !ok {
							continue
						}
						ti := get(dir, s.Name.Name)
						ti.isStruct, ti.file = true, filepath.ToSlash(rel)
						ti.declPlace = fset.Position(s.Pos()).String()
						for _, fld := range stt.Fields.List {
							if isStore(fld.Type) {
								ti.hasField = true
								ti.embeds = ti.embeds || len(fld.Names) == 0
								continue
							}
							if len(fld.Names) == 0 {
								et := fld.Type
								if p, ok := et.(*ast.StarExpr); ok {
									et = p.X
								}
								if id, ok := et.(*ast.Ident); ok {
									ti.promoted = append(ti.promoted, id.Name)
								}
							}
						}
					case *ast.ValueSpec:
						if s.Type == nil || !isStore(s.Type) {
							continue
						}
						for _, v := range s.Values {
							if name := assertedType(v); name != "" {
								get(dir, name).asserted = true
							}
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					continue
				}
				rt := d.Recv.List[0].Type
				if p, ok := rt.(*ast.StarExpr); ok {
					rt = p.X
				}
				if id, ok := rt.(*ast.Ident); ok {
					get(dir, id.Name).methods[d.Name.Name] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A verb promoted from an embedded struct of the same package is
	// declared (once, for every wrapper that embeds it); an embedded
	// board.Store is not: it forwards verbs nobody wrote.
	for key, ti := range types {
		dir := key[:strings.LastIndex(key, ".")]
		for _, name := range ti.promoted {
			if et := types[dir+"."+name]; et != nil && et.isStruct {
				for m := range et.methods {
					ti.methods[m] = true
				}
			}
		}
	}
	checked := 0
	for key, ti := range types {
		if !ti.isStruct {
			continue
		}
		declared := 0
		for _, v := range verbs {
			if ti.methods[v] {
				declared++
			}
		}
		wrapper := ti.asserted || ti.embeds || (ti.hasField && declared >= 3)
		if strings.HasSuffix(ti.file, "_test.go") && ti.embeds && !ti.asserted {
			wrapper = false // a test double overriding the verbs it fakes
		}
		if !wrapper || key == rpcServer {
			continue
		}
		checked++
		t.Logf("checked %s", key)
		if ti.embeds {
			t.Errorf("%s (%s) embeds board.Store: name the field and declare every verb, so a new verb cannot pass through it unhandled", key, ti.declPlace)
		}
		var missing []string
		for _, v := range verbs {
			if !ti.methods[v] {
				missing = append(missing, v)
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			t.Errorf("%s (%s) wraps board.Store but does not declare %s", key, ti.declPlace, strings.Join(missing, ", "))
		}
	}
	// The walk must have found the wrappers it exists for (the metered
	// store, the plugin proxy, its remote store and server side, the
	// twins): finding none would mean it looked at nothing.
	if checked < 5 {
		t.Errorf("found only %d store wrappers; the walk of %s is not seeing the repository", checked, root)
	}
}

// assertedType names T in "(*T)(nil)", "&T{}" or "T{}".
func assertedType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.CallExpr:
		if p, ok := x.Fun.(*ast.ParenExpr); ok {
			if s, ok := p.X.(*ast.StarExpr); ok {
				if id, ok := s.X.(*ast.Ident); ok {
					return id.Name
				}
			}
		}
	case *ast.UnaryExpr:
		return assertedType(x.X)
	case *ast.CompositeLit:
		if id, ok := x.Type.(*ast.Ident); ok {
			return id.Name
		}
	}
	return ""
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/leasekeeper/leasekeeper\n") {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("module root not found")
		}
		dir = up
	}
}

// TestIsReadAnswersFromTheMarks: the reads are the verbs marked
// //storegen:read in Store (generated into verbs_gen.go); a write, and a
// name that is no verb, are not.
func TestIsReadAnswersFromTheMarks(t *testing.T) {
	for verb, want := range map[string]bool{
		"GetCard": true, "ListCards": true, "Events": true, "Now": true, "LoadBoard": true,
		"Claim": false, "RenewClaims": false, "SetStateOwned": false, "Prune": false, "Nope": false,
	} {
		if got := board.IsRead(verb); got != want {
			t.Errorf("board.IsRead(%q) = %v, want %v", verb, got, want)
		}
	}
}
