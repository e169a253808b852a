// Command storegen writes the mechanical layers of the store contract from
// its one description, the board.Store interface (DESIGN.md#verb-shape):
//
//   - with -layer host: plugins/verbs_gen.go, the agent's side of each
//     verb (a method on plugins.verbs that sends the verb's RPC);
//   - with -layer serve: plugins/serve/verbs_gen.go, the plugin's side of
//     each verb (a handler on serve.server that calls the store);
//   - with -layer agent: agent/metered_gen.go, the agent's counting
//     wrapper (a method on agent.meteredStore per verb, a read, marked
//     //storegen:read, counted apart from the writes) and its op labels;
//   - with -layer wire: plugins/internal/wire/convert_gen.go, the
//     conversions of the verbs' messages paired field by field;
//   - with -layer board: board/verbs_gen.go, the names of the reads, which
//     board.IsRead answers from;
//   - with -layer roundrobin: store/mongo/roundrobin_gen_test.go, the
//     verbs of the test double that spreads calls over several clients.
//
// A verb a layer writes by hand (a method of that name on the receiver in
// a file of the package that storegen did not write) is left to it: the
// generated file holds only the verbs that need nothing but the pattern.
// The RPC of a verb is the method of the same name on storepb.StoreClient;
// its request and reply are converted by the functions To<Message> and
// From<Message> of package plugins/internal/wire, which both sides share
// and the compiler checks.
//
// Run it with `go generate ./...`; CI fails when the files it writes are
// not what is committed.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/format"
	"go/parser"
	"go/token"
	"log"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode"
)

// verb is one method of board.Store in the shape Verb(ctx[, p P]) (R, error)
// or Verb(ctx[, p P]) error.
type verb struct {
	Name   string
	Param  string // "" when the verb takes only ctx
	Result string // "" when the verb returns only an error
	// Read is set by the directive //storegen:read in the verb's comment:
	// the verb writes nothing.
	Read bool
}

// readDirective marks a verb of board.Store that writes nothing; the agent
// then keeps its outcome out of the health check's last write.
const readDirective = "//storegen:read"

func main() {
	layer := flag.String("layer", "", "host, serve or agent")
	root := flag.String("root", "..", "the module's root")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("storegen: ")
	path, out, err := generate(*root, *layer)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		log.Fatal(err)
	}
}

// layers name each layer's generated file, relative to the module's root.
var layers = map[string]string{
	"host":  filepath.Join("plugins", "verbs_gen.go"),
	"serve": filepath.Join("plugins", "serve", "verbs_gen.go"),
	"agent": filepath.Join("agent", "metered_gen.go"),
	"wire":  filepath.Join("plugins", "internal", "wire", "convert_gen.go"),
	// The contract's own list of its reads, for board.IsRead.
	"board": filepath.Join("board", "verbs_gen.go"),
	// A test double: store/mongo's roundRobin sends each verb to the next
	// of several clients (r.pick()).
	"roundrobin": filepath.Join("store", "mongo", "roundrobin_gen_test.go"),
}

// generate returns the path and the content of layer's generated file.
func generate(root, layer string) (string, []byte, error) {
	file, ok := layers[layer]
	if !ok {
		return "", nil, fmt.Errorf("-layer must be host, serve, wire, agent, board or roundrobin, not %q", layer)
	}
	verbs, err := storeVerbs(filepath.Join(root, "board"))
	if err != nil {
		return "", nil, err
	}
	var out []byte
	switch layer {
	case "host":
		out, err = hostLayer(root, verbs)
	case "serve":
		out, err = serveLayer(root, verbs)
	case "wire":
		out, err = wireLayer(root, verbs)
	case "roundrobin":
		out, err = roundRobinLayer(root, verbs)
	case "board":
		out, err = boardLayer(verbs)
	default:
		out, err = agentLayer(root, verbs)
	}
	return filepath.Join(root, file), out, err
}

// parseDir parses the package in dir, generated files of storegen and
// tests left out.
func parseDir(dir string) ([]*ast.File, error) { return parseFiles(dir, false) }

// parseFiles parses the package in dir, generated files of storegen left
// out; with tests, its external test package's files instead.
func parseFiles(dir string, tests bool) ([]*ast.File, error) {
	// The files the build compiles, as go build picks them (a file behind
	// a build constraint that excludes it, an ignored sample, is not the
	// package's), of the one package the directory is named for.
	pkg, err := build.ImportDir(dir, 0)
	if err != nil {
		return nil, err
	}
	names := slices.Clone(pkg.GoFiles)
	if tests {
		names = slices.Clone(pkg.XTestGoFiles)
	}
	sort.Strings(names)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_gen.go") || strings.HasSuffix(n, "_gen_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// storeVerbs lists board.Store's verbs, its embedded roles expanded, in
// the order they are declared; Traits and Close are not verbs.
func storeVerbs(dir string) ([]verb, error) {
	files, err := parseDir(dir)
	if err != nil {
		return nil, err
	}
	ifaces := map[string]*ast.InterfaceType{}
	types := map[string]bool{}
	for _, ts := range typeSpecs(files) {
		types[ts.Name.Name] = true
		if it, ok := ts.Type.(*ast.InterfaceType); ok {
			ifaces[ts.Name.Name] = it
		}
	}
	var out []verb
	seen := map[string]bool{}
	var walk func(name string) error
	walk = func(name string) error {
		it, ok := ifaces[name]
		if !ok {
			return fmt.Errorf("board.%s: not an interface of package board", name)
		}
		for _, m := range it.Methods.List {
			if len(m.Names) == 0 {
				id, ok := m.Type.(*ast.Ident)
				if !ok {
					return fmt.Errorf("board.%s embeds %T", name, m.Type)
				}
				if err := walk(id.Name); err != nil {
					return err
				}
				continue
			}
			n := m.Names[0].Name
			if n == "Traits" || n == "Close" || seen[n] {
				continue
			}
			seen[n] = true
			v, err := shapeOf(n, m.Type.(*ast.FuncType), types)
			if err != nil {
				return err
			}
			if m.Doc != nil {
				for _, c := range m.Doc.List {
					v.Read = v.Read || strings.TrimSpace(c.Text) == readDirective
				}
			}
			out = append(out, v)
		}
		return nil
	}
	return out, walk("Store")
}

// shapeOf reads a verb's signature and refuses any other shape.
func shapeOf(name string, ft *ast.FuncType, types map[string]bool) (verb, error) {
	v := verb{Name: name}
	var params []ast.Expr
	for _, f := range ft.Params.List {
		for range max(1, len(f.Names)) {
			params = append(params, f.Type)
		}
	}
	var results []ast.Expr
	if ft.Results != nil {
		for _, f := range ft.Results.List {
			for range max(1, len(f.Names)) {
				results = append(results, f.Type)
			}
		}
	}
	bad := fmt.Errorf("board.Store.%s: not in the verb shape Verb(ctx[, VerbParams]) ([VerbResult, ]error) (DESIGN.md#verb-shape)", name)
	if len(params) < 1 || len(params) > 2 || qualify(params[0], types) != "context.Context" {
		return v, bad
	}
	if len(params) == 2 {
		v.Param = qualify(params[1], types)
		// One request type, of package board, named for its verb or its
		// family: never a positional argument.
		if !strings.HasPrefix(v.Param, "board.") || !strings.HasSuffix(v.Param, "Params") {
			return v, bad
		}
	}
	switch len(results) {
	case 1:
	case 2:
		v.Result = qualify(results[0], types)
		// An answer is a type of package board (a result struct or a
		// domain value), a list or pointer of one, or the store's time:
		// never a bare flag or number.
		r := strings.TrimLeft(v.Result, "[]*")
		if !strings.HasPrefix(r, "board.") && r != "time.Time" {
			return v, bad
		}
	default:
		return v, bad
	}
	if qualify(results[len(results)-1], types) != "error" {
		return v, bad
	}
	return v, nil
}

// qualify writes a type of package board as another package names it.
func qualify(e ast.Expr, types map[string]bool) string {
	s, ok := typeString(e, types)
	if !ok {
		panic(fmt.Sprintf("storegen: type %T", e))
	}
	return s
}

// typeSpecs lists the type declarations of files, in order.
func typeSpecs(files []*ast.File) []*ast.TypeSpec {
	var out []*ast.TypeSpec
	for _, f := range files {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					out = append(out, s.(*ast.TypeSpec))
				}
			}
		}
	}
	return out
}

// handWritten lists the methods declared on recv in dir's own files (the
// files storegen does not write), or its plain functions when recv is "".
func handWritten(dir, recv string) (map[string]bool, error) {
	files, err := parseDir(dir)
	if err != nil {
		return nil, err
	}
	return declared(files, recv), nil
}

// declared lists the methods on recv declared in files, or the plain
// functions when recv is "".
func declared(files []*ast.File, recv string) map[string]bool {
	out := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || (fd.Recv == nil) != (recv == "") {
				continue
			}
			if fd.Recv != nil {
				t := fd.Recv.List[0].Type
				if s, ok := t.(*ast.StarExpr); ok {
					t = s.X
				}
				if id, ok := t.(*ast.Ident); !ok || id.Name != recv {
					continue
				}
			}
			out[fd.Name.Name] = true
		}
	}
	return out
}

// rpcs reads, from the generated gRPC client, each RPC's request and reply
// message names.
func rpcs(root string) (map[string][2]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, "plugins", "storepb", "store_grpc.pb.go"), nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string][2]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "StoreClient" {
			return true
		}
		for _, m := range ts.Type.(*ast.InterfaceType).Methods.List {
			ft := m.Type.(*ast.FuncType)
			if len(ft.Params.List) < 2 || ft.Results == nil {
				continue
			}
			req, ok1 := ft.Params.List[1].Type.(*ast.StarExpr)
			rep, ok2 := ft.Results.List[0].Type.(*ast.StarExpr)
			if !ok1 || !ok2 {
				continue // a stream
			}
			out[m.Names[0].Name] = [2]string{req.X.(*ast.Ident).Name, rep.X.(*ast.Ident).Name}
		}
		return false
	})
	return out, nil
}

// timeImport imports package time when a verb's types name it.
func timeImport(verbs []verb) string {
	for _, v := range verbs {
		if strings.Contains(v.Param+v.Result, "time.") {
			return "\t\"time\"\n"
		}
	}
	return ""
}

// zero is the literal of a result type's zero value.
func zero(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"), strings.HasPrefix(t, "*"):
		return "nil"
	}
	return t + "{}"
}

const header = "// Code generated by internal/storegen from board.Store; DO NOT EDIT.\n\n"

// toGenerate lists the verbs a side of the plugin boundary does not write
// by hand on recv in dir, and the RPCs' messages; a verb with no RPC of
// its name is an error.
func toGenerate(root, dir, recv string, verbs []verb) ([]verb, map[string][2]string, error) {
	hand, err := handWritten(dir, recv)
	if err != nil {
		return nil, nil, err
	}
	rpc, err := rpcs(root)
	if err != nil {
		return nil, nil, err
	}
	var out []verb
	for _, v := range verbs {
		if hand[v.Name] {
			continue
		}
		if _, ok := rpc[v.Name]; !ok {
			return nil, nil, fmt.Errorf("board.Store.%s has no RPC of that name in plugins/proto/store.proto", v.Name)
		}
		out = append(out, v)
	}
	return out, rpc, nil
}

// hostLayer writes the agent's side of each verb: a method on
// plugins.verbs that sends the verb's RPC, its request built by
// wire.To<Request> and its reply read by wire.From<Reply>.
func hostLayer(root string, verbs []verb) ([]byte, error) {
	gen, rpc, err := toGenerate(root, filepath.Join(root, "plugins"), "verbs", verbs)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("package plugins\n\nimport (\n\t\"context\"\n" + timeImport(verbs) + "\n\t\"github.com/leasekeeper/leasekeeper/board\"\n\t\"github.com/leasekeeper/leasekeeper/plugins/internal/wire\"\n\t\"github.com/leasekeeper/leasekeeper/plugins/storepb\"\n)\n\n")
	b.WriteString("// The agent's side of each verb: its RPC to the plugin.\n\n")
	for _, v := range gen {
		m := rpc[v.Name]
		req := "&storepb." + m[0] + "{}"
		sig := "ctx context.Context"
		if v.Param != "" {
			req = "wire.To" + m[0] + "(p)"
			sig += ", p " + v.Param
		}
		if v.Result == "" {
			fmt.Fprintf(&b, "func (s *verbs) %s(%s) error {\n\t_, err := s.rpc.%s(ctx, %s)\n\treturn err\n}\n\n", v.Name, sig, v.Name, req)
			continue
		}
		fmt.Fprintf(&b, "func (s *verbs) %s(%s) (%s, error) {\n\tr, err := s.rpc.%s(ctx, %s)\n\tif err != nil {\n\t\treturn %s, err\n\t}\n\treturn wire.From%s(r), nil\n}\n\n",
			v.Name, sig, v.Result, v.Name, req, zero(v.Result), m[1])
	}
	return format.Source(b.Bytes())
}

// serveLayer writes the plugin's side of each verb: a handler on
// serve.server that calls the store, its request read by
// wire.From<Request>, its answer built by wire.To<Reply> and a store error
// sent through wire.ToStatus.
func serveLayer(root string, verbs []verb) ([]byte, error) {
	gen, rpc, err := toGenerate(root, filepath.Join(root, "plugins", "serve"), "server", verbs)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("package serve\n\nimport (\n\t\"context\"\n\n\t\"github.com/leasekeeper/leasekeeper/plugins/internal/wire\"\n\t\"github.com/leasekeeper/leasekeeper/plugins/storepb\"\n)\n\n")
	b.WriteString("// The plugin's side of each verb: the store's answer to the RPC, a\n// store error through wire.ToStatus so its identity survives the trip.\n\n")
	for _, v := range gen {
		m := rpc[v.Name]
		in, call := "_", "s.store."+v.Name+"(ctx)"
		if v.Param != "" {
			in, call = "r", "s.store."+v.Name+"(ctx, wire.From"+m[0]+"(r))"
		}
		if v.Result == "" {
			fmt.Fprintf(&b, "func (s *server) %s(ctx context.Context, %s *storepb.%s) (*storepb.%s, error) {\n\treturn empty(%s)\n}\n\n", v.Name, in, m[0], m[1], call)
			continue
		}
		fmt.Fprintf(&b, "func (s *server) %s(ctx context.Context, %s *storepb.%s) (*storepb.%s, error) {\n\tres, err := %s\n\tif err != nil {\n\t\treturn nil, wire.ToStatus(err)\n\t}\n\treturn wire.To%s(res), nil\n}\n\n",
			v.Name, in, m[0], m[1], call, m[1])
	}
	return format.Source(b.Bytes())
}

// snake is a verb's op label: SetStateOwned is set_state_owned.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func agentLayer(root string, verbs []verb) ([]byte, error) {
	hand, err := handWritten(filepath.Join(root, "agent"), "meteredStore")
	if err != nil {
		return nil, err
	}
	// The pattern counts a verb under done or owned; these do more (count
	// an acquisition, note the claim, observe a verdict), so the agent must
	// write them itself rather than have them generated without it.
	for _, v := range []string{"Claim", "ClaimNext", "Start", "Finish", "UpdateRun", "SetBoard"} {
		if !hand[v] {
			return nil, fmt.Errorf("agent.meteredStore.%s is not written by hand in agent/: it counts more than the generated pattern does (DESIGN.md#verb-shape)", v)
		}
	}
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("package agent\n\nimport (\n\t\"context\"\n" + timeImport(verbs) + "\n\t\"github.com/leasekeeper/leasekeeper/board\"\n)\n\n")
	b.WriteString("// storeOps are the op labels of leasekeeper_store_errors_total, one per\n// verb, so each series exists at 0 from the start.\nvar storeOps = []string{\n")
	for _, v := range verbs {
		fmt.Fprintf(&b, "\t%q,\n", snake(v.Name))
	}
	b.WriteString("}\n\n")
	b.WriteString("// Each verb is counted under its op label: a read (marked " + readDirective + ")\n// through read, an owner write (a verb named ...Owned) through owned,\n// which counts its fence rejections, any other write through done.\n\n")
	for _, v := range verbs {
		if hand[v.Name] {
			continue
		}
		count := "done"
		switch {
		case v.Read:
			count = "read"
		case strings.HasSuffix(v.Name, "Owned"):
			count = "owned"
		}
		sig, args := "ctx context.Context", "ctx"
		if v.Param != "" {
			sig, args = sig+", p "+v.Param, "ctx, p"
		}
		if v.Result == "" {
			fmt.Fprintf(&b, "func (s meteredStore) %s(%s) error {\n\terr := s.inner.%s(%s)\n\ts.%s(%q, err)\n\treturn err\n}\n\n", v.Name, sig, v.Name, args, count, snake(v.Name))
			continue
		}
		fmt.Fprintf(&b, "func (s meteredStore) %s(%s) (%s, error) {\n\tout, err := s.inner.%s(%s)\n\ts.%s(%q, err)\n\treturn out, err\n}\n\n", v.Name, sig, v.Result, v.Name, args, count, snake(v.Name))
	}
	return format.Source(b.Bytes())
}

// roundRobinLayer writes the forwarding verbs of store/mongo's test double
// roundRobin: each verb the test file does not write by hand goes to
// r.pick(), the next client.
func roundRobinLayer(root string, verbs []verb) ([]byte, error) {
	files, err := parseFiles(filepath.Join(root, "store", "mongo"), true)
	if err != nil {
		return nil, err
	}
	hand := declared(files, "roundRobin")
	if !hand["pick"] {
		return nil, fmt.Errorf("store/mongo's tests declare no roundRobin.pick to forward through")
	}
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("package mongostore_test\n\nimport (\n\t\"context\"\n" + timeImport(verbs) + "\n\t\"github.com/leasekeeper/leasekeeper/board\"\n)\n\n")
	b.WriteString("// Each verb goes to the next client.\n\n")
	for _, v := range verbs {
		if hand[v.Name] {
			continue
		}
		sig, args := "ctx context.Context", "ctx"
		if v.Param != "" {
			sig, args = sig+", p "+v.Param, "ctx, p"
		}
		res := "error"
		if v.Result != "" {
			res = "(" + v.Result + ", error)"
		}
		fmt.Fprintf(&b, "func (r *roundRobin) %s(%s) %s {\n\treturn r.pick().%s(%s)\n}\n\n", v.Name, sig, res, v.Name, args)
	}
	return format.Source(b.Bytes())
}

// boardLayer writes the contract's list of its reads (the verbs marked
// //storegen:read), which board.IsRead answers from.
func boardLayer(verbs []verb) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("package board\n\n// readVerbs are the verbs of Store whose comment carries the directive\n// " + readDirective + ": they write nothing.\nvar readVerbs = map[string]bool{\n")
	for _, v := range verbs {
		if v.Read {
			fmt.Fprintf(&b, "\t%q: true,\n", v.Name)
		}
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}
