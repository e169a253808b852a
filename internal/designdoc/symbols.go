package designdoc

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Symbols is every top-level name the module's Go files declare, keyed by
// package directory (relative to the module root, slash-separated, "." for
// the root) and then by name: a function or type is "Name", a method is
// "Type.Method", and so is a struct's field or an interface's method
// ("Type.Field", "Store.Claim"). An interface also has the methods of the
// interfaces of its own package it embeds, as Go promotes them
// ("Store.Claim" when Store embeds Claimer). Test functions are functions
// like any other, and a directory's external test package (package
// x_test) counts as the directory's own.
type Symbols map[string]map[string]bool

// Has reports whether ref ("dir.Name" or "dir.Type.Method") names a
// declaration.
func (s Symbols) Has(ref Ref) bool { return s[ref.Dir][ref.Name] }

// HasDir reports whether dir is a package directory of the module.
func (s Symbols) HasDir(dir string) bool { _, ok := s[dir]; return ok }

// Dirs lists the package directories, sorted.
func (s Symbols) Dirs() []string {
	out := make([]string, 0, len(s))
	for d := range s {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// LoadSymbols parses every .go file of the module rooted at root with
// go/parser — the module's own packages only: directories holding another
// go.mod (a nested module), testdata, vendor and hidden directories are
// skipped — and indexes their top-level declarations. Files are parsed
// regardless of build tags, so a platform-specific declaration counts.
func LoadSymbols(root string) (Symbols, error) {
	syms := Symbols{}
	embeds := map[string]map[string][]string{} // dir → interface → embedded interfaces
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDir(path, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		if syms[dir] == nil {
			syms[dir] = map[string]bool{}
		}
		for _, decl := range f.Decls {
			for _, name := range declNames(decl) {
				syms[dir][name] = true
			}
			for iface, embedded := range interfaceEmbeds(decl) {
				if embeds[dir] == nil {
					embeds[dir] = map[string][]string{}
				}
				embeds[dir][iface] = append(embeds[dir][iface], embedded...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index the module's declarations: %w", err)
	}
	for dir, ifaces := range embeds {
		promote(syms[dir], ifaces)
	}
	return syms, nil
}

// interfaceEmbeds lists, for each interface type one declaration
// introduces, the interfaces of the same package it embeds (by name).
func interfaceEmbeds(decl ast.Decl) map[string][]string {
	d, ok := decl.(*ast.GenDecl)
	if !ok {
		return nil
	}
	var out map[string][]string
	for _, spec := range d.Specs {
		s, ok := spec.(*ast.TypeSpec)
		if !ok {
			continue
		}
		it, ok := s.Type.(*ast.InterfaceType)
		if !ok {
			continue
		}
		for _, f := range it.Methods.List {
			if id, ok := f.Type.(*ast.Ident); ok && len(f.Names) == 0 {
				if out == nil {
					out = map[string][]string{}
				}
				out[s.Name.Name] = append(out[s.Name.Name], id.Name)
			}
		}
	}
	return out
}

// promote gives each interface the methods of the interfaces it embeds,
// through any depth of embedding, until nothing changes.
func promote(names map[string]bool, ifaces map[string][]string) {
	for changed := true; changed; {
		changed = false
		for iface, embedded := range ifaces {
			for _, e := range embedded {
				for name := range names {
					m, ok := strings.CutPrefix(name, e+".")
					if !ok || names[iface+"."+m] {
						continue
					}
					names[iface+"."+m] = true
					changed = true
				}
			}
		}
	}
}

// skipDir reports the directories that are not the module's packages.
func skipDir(path, name string) bool {
	if strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" {
		return true
	}
	_, err := os.Stat(filepath.Join(path, "go.mod"))
	return err == nil
}

// declNames lists the names one top-level declaration introduces.
func declNames(decl ast.Decl) []string {
	switch d := decl.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil || len(d.Recv.List) == 0 {
			return []string{d.Name.Name}
		}
		if recv := recvType(d.Recv.List[0].Type); recv != "" {
			return []string{recv + "." + d.Name.Name}
		}
	case *ast.GenDecl:
		var out []string
		for _, spec := range d.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				out = append(out, s.Name.Name)
				for _, m := range memberNames(s.Type) {
					out = append(out, s.Name.Name+"."+m)
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					out = append(out, n.Name)
				}
			}
		}
		return out
	}
	return nil
}

// memberNames lists the names a type declares inside itself: the fields
// of a struct and the methods of an interface (embedded ones excluded).
func memberNames(e ast.Expr) []string {
	var fields *ast.FieldList
	switch t := e.(type) {
	case *ast.StructType:
		fields = t.Fields
	case *ast.InterfaceType:
		fields = t.Methods
	default:
		return nil
	}
	var out []string
	for _, f := range fields.List {
		for _, n := range f.Names {
			out = append(out, n.Name)
		}
	}
	return out
}

// recvType is the base type name of a method receiver: T for T, *T, T[K]
// and *T[K].
func recvType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
