package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
)

// The wire layer: the conversions of each verb's request and reply
// messages, To<Message> and From<Message>, written by matching the Go
// type's fields with the message's by name. A message whose fields do not
// all pair up, or whose conversion needs more than a field-by-field copy
// (a nil list kept apart from an empty one, a map, a token that wins over
// the card), is converted by hand in plugins/internal/wire, and the
// generator leaves it out; one it can neither generate nor find written is
// an error naming the fields that did not pair.

// field is one struct field: its name and its type as written.
type field struct{ name, typ string }

// structs reads the struct types of the Go files in dir, each field's type
// qualified as another package names it when qual is set, and the
// underlying type of each named type that is not a struct.
func structs(dir string, qual bool) (map[string][]field, map[string]string, error) {
	files, err := parseDir(dir)
	if err != nil {
		return nil, nil, err
	}
	specs := typeSpecs(files)
	names := map[string]bool{}
	for _, ts := range specs {
		names[ts.Name.Name] = qual
	}
	out := map[string][]field{}
	under := map[string]string{}
	for _, ts := range specs {
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			if id, ok := ts.Type.(*ast.Ident); ok {
				under[ts.Name.Name] = id.Name
			}
			continue
		}
		if fs, ok := recordFields(st, names); ok {
			out[ts.Name.Name] = fs
		}
	}
	return out, under, nil
}

// recordFields lists a struct's exported fields; a struct that embeds a
// field is not a plain record (false).
func recordFields(st *ast.StructType, names map[string]bool) ([]field, bool) {
	var fs []field
	for _, fl := range st.Fields.List {
		if len(fl.Names) == 0 {
			return nil, false
		}
		typ, ok := typeString(fl.Type, names)
		if !ok {
			typ = "?" // a map, a func: pairs with nothing, so it is never dropped
		}
		for _, n := range fl.Names {
			if n.IsExported() {
				fs = append(fs, field{n.Name, typ})
			}
		}
	}
	return fs, true
}

// typeString writes a field's type, qualifying the names of local.
func typeString(e ast.Expr, local map[string]bool) (string, bool) {
	switch t := e.(type) {
	case *ast.Ident:
		if local[t.Name] {
			return "board." + t.Name, true
		}
		return t.Name, true
	case *ast.SelectorExpr:
		return t.X.(*ast.Ident).Name + "." + t.Sel.Name, true
	case *ast.StarExpr:
		s, ok := typeString(t.X, local)
		return "*" + s, ok
	case *ast.ArrayType:
		s, ok := typeString(t.Elt, local)
		return "[]" + s, ok
	}
	return "", false // a map, a func: not converted field by field
}

// norm is a field name with its case and underscores gone, so Go's RunID
// and the message's RunId pair.
func norm(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }

// pairField gives the expressions that convert one Go field to its
// message field and back: to reads p.<Go>, from reads r. isMsg says
// whether a name is a message of the protocol.
func pairField(g field, m field, under map[string]string, isMsg func(string) bool) (to, from string, ok bool) {
	p, r := "p."+g.name, "r.Get"+m.name+"()"
	switch {
	case g.typ == m.typ && strings.HasPrefix(g.typ, "*") && !strings.Contains(g.typ, "."):
		return p, "r." + m.name, true // an optional scalar: nil stays nil
	case g.typ == m.typ && !strings.Contains(g.typ, "."):
		return p, r, true
	case g.typ == "int" && m.typ == "int64":
		return "int64(" + p + ")", "int(" + r + ")", true
	case g.typ == "time.Duration" && m.typ == "int64":
		return "int64(" + p + ")", "time.Duration(" + r + ")", true
	case g.typ == "time.Time" && m.typ == "*Time":
		return "ToTime(" + p + ")", "FromTime(" + r + ")", true
	case g.typ == "[]string" && m.typ == "*Strings":
		return "ToStrings(" + p + ")", "FromStrings(" + r + ")", true
	case strings.HasPrefix(g.typ, "board.") && m.typ == "string" && under[strings.TrimPrefix(g.typ, "board.")] == "string":
		return "string(" + p + ")", g.typ + "(" + r + ")", true
	case (strings.HasPrefix(g.typ, "board.") || strings.HasPrefix(g.typ, "*board.")) && strings.HasPrefix(m.typ, "*") && isMsg(strings.TrimPrefix(m.typ, "*")):
		msg := strings.TrimPrefix(m.typ, "*")
		return "To" + msg + "(" + p + ")", "From" + msg + "(" + r + ")", true
	}
	return "", "", false
}

// pairStruct pairs every field of a Go struct with one of the message's,
// each used once; it fails naming what did not pair.
func pairStruct(goFields, msgFields []field, under map[string]string, isMsg func(string) bool) (to, from []string, err error) {
	used := map[string]bool{}
	for _, g := range goFields {
		// A duration pairs only with a field that says it holds
		// nanoseconds; every message field pairs once.
		want := norm(g.name)
		if g.typ == "time.Duration" {
			want += "nanos"
		}
		var m *field
		for i := range msgFields {
			f := msgFields[i]
			if norm(f.name) == want && !used[f.name] {
				m = &f
				break
			}
		}
		if m == nil {
			return nil, nil, fmt.Errorf("field %s has no field of its name in the message", g.name)
		}
		t, f, ok := pairField(g, *m, under, isMsg)
		if !ok {
			return nil, nil, fmt.Errorf("field %s (%s) and %s (%s) do not convert field by field", g.name, g.typ, m.name, m.typ)
		}
		used[m.name] = true
		to = append(to, m.name+": "+t)
		from = append(from, g.name+": "+f)
	}
	for _, f := range msgFields {
		if !used[f.name] {
			return nil, nil, fmt.Errorf("message field %s pairs with no Go field", f.name)
		}
	}
	return to, from, nil
}

// messages reads the fields of the generated protobuf messages.
func messages(root string) (map[string][]field, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, "plugins", "storepb", "store.pb.go"), nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string][]field{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, s := range g.Specs {
			ts := s.(*ast.TypeSpec)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			var fs []field
			for _, fl := range st.Fields.List {
				if fl.Tag == nil || !strings.Contains(fl.Tag.Value, "protobuf") || len(fl.Names) == 0 {
					continue
				}
				typ, ok := typeString(fl.Type, nil)
				if !ok || strings.Contains(fl.Tag.Value, "protobuf_oneof:") {
					typ = "?" // a oneof or a map: converted by hand
				}
				fs = append(fs, field{fl.Names[0].Name, typ})
			}
			out[ts.Name.Name] = fs
		}
	}
	return out, nil
}

func wireLayer(root string, verbs []verb) ([]byte, error) {
	wireDir := filepath.Join(root, "plugins", "internal", "wire")
	hand, err := handWritten(wireDir, "")
	if err != nil {
		return nil, err
	}
	goStructs, under, err := structs(filepath.Join(root, "board"), true)
	if err != nil {
		return nil, err
	}
	msgs, err := messages(root)
	if err != nil {
		return nil, err
	}
	rpc, err := rpcs(root)
	if err != nil {
		return nil, err
	}
	type pair struct{ goType, msg string }
	var pairs []pair
	seen := map[string]string{}
	for _, v := range verbs {
		m, ok := rpc[v.Name]
		if !ok {
			return nil, fmt.Errorf("board.Store.%s has no RPC of that name in plugins/proto/store.proto", v.Name)
		}
		for _, p := range []pair{{v.Param, m[0]}, {v.Result, m[1]}} {
			if p.goType == "" {
				continue
			}
			if g, ok := seen[p.msg]; ok {
				if g != p.goType {
					return nil, fmt.Errorf("message %s carries both %s and %s: give each its own message", p.msg, g, p.goType)
				}
				continue
			}
			seen[p.msg] = p.goType
			pairs = append(pairs, p)
		}
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].msg < pairs[j].msg })
	var b bytes.Buffer
	for _, p := range pairs {
		if hand["To"+p.msg] || hand["From"+p.msg] {
			if !hand["To"+p.msg] || !hand["From"+p.msg] {
				return nil, fmt.Errorf("wire converts %s by hand one way only: write both To%s and From%s", p.msg, p.msg, p.msg)
			}
			continue
		}
		name := strings.TrimPrefix(p.goType, "board.")
		gf, ok := goStructs[name]
		if !ok || !strings.HasPrefix(p.goType, "board.") {
			return nil, fmt.Errorf("%s is not a struct of package board: convert it to %s by hand in plugins/internal/wire", p.goType, p.msg)
		}
		to, from, err := pairStruct(gf, msgs[p.msg], under, func(n string) bool { _, ok := msgs[n]; return ok })
		if err != nil {
			return nil, fmt.Errorf("%s and storepb.%s: %v: convert them by hand in plugins/internal/wire, or name the fields alike", p.goType, p.msg, err)
		}
		fmt.Fprintf(&b, "// To%s converts %s to its message.\nfunc To%s(p %s) *storepb.%s {\n\treturn &storepb.%s{%s}\n}\n\n", p.msg, p.goType, p.msg, p.goType, p.msg, p.msg, strings.Join(to, ", "))
		fmt.Fprintf(&b, "// From%s reads %s back.\nfunc From%s(r *storepb.%s) %s {\n\treturn %s{%s}\n}\n\n", p.msg, p.goType, p.msg, p.msg, p.goType, p.goType, strings.Join(from, ", "))
	}
	b.WriteString("// generatedPairs are the conversions above, each as its To and From\n// function, for the round-trip test that fills every field.\nvar generatedPairs = [][2]any{\n")
	for _, p := range pairs {
		if !hand["To"+p.msg] {
			fmt.Fprintf(&b, "\t{To%s, From%s},\n", p.msg, p.msg)
		}
	}
	b.WriteString("}\n")
	imports := "\t\"github.com/leasekeeper/leasekeeper/board\"\n\t\"github.com/leasekeeper/leasekeeper/plugins/storepb\"\n"
	if bytes.Contains(b.Bytes(), []byte("time.")) {
		imports = "\t\"time\"\n\n" + imports
	}
	return format.Source(append([]byte(header+"package wire\n\nimport (\n"+imports+")\n\n"), b.Bytes()...))
}
