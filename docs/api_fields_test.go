package docs_test

// The field names and error codes docs/API.md lists are checked against the
// wire types, whose JSON names come from their struct tags by reflection.
//
// How API.md writes field names, so that this test can read them:
//
//   - JSON objects. Every object in a ```json block, and every inline code
//     span that starts with "{", is an instance of one type of the socket
//     (wireTypes below). Its keys must all be JSON names of that type, and
//     the keys of a nested object those of the nested field's type, all the
//     way down. The type is not named: it is the one whose fields the keys
//     fit. Besides JSON, objects may use the page's shorthand: bare keys
//     (`{reachable, error}`), a key with no value (`{"id", "title"?}`), a
//     trailing "?" for an optional key, a type name for a value of that
//     type (`{Card}`, `[Event]`, `last_pass: ReaperPass`; it must be the
//     field's Go type), words for values (`up|down|closed`, `[...]`,
//     `"..."`). A span of one bare word (`{card}`, `{id}`) is a path
//     parameter, not an object.
//   - Field tables. A table whose header is "| Field | Meaning |" lists the
//     fields of the type named (in backticks) in the paragraph before it:
//     the backticked names of its first column. It must list every field
//     of that type, and only those.
//   - Error codes. The table under "## Errors" whose header starts with
//     "| `code` |" lists every code, with its HTTP status: it must list
//     exactly apitype.Codes(), each with apitype.StatusOf. A paragraph that
//     starts "Errors:" may name only codes from that list, each written
//     "`code` (when)".

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// wireTypes are the types whose values cross the socket: request and
// response bodies, the frames of the watch stream, the error body, and the
// domain types they carry.
var wireTypes = []reflect.Type{
	// apitype: every struct type of the package (TestWireTypesComplete).
	reflect.TypeFor[apitype.RenameRequest](),
	reflect.TypeFor[apitype.DeleteStateRequest](),
	reflect.TypeFor[apitype.MergeLabelsRequest](),
	reflect.TypeFor[apitype.DeleteLabelRequest](),
	reflect.TypeFor[apitype.SweepFrame](),
	reflect.TypeFor[apitype.SweepProgress](),
	reflect.TypeFor[apitype.ErrorBody](),
	reflect.TypeFor[apitype.DeleteCardResponse](),
	reflect.TypeFor[apitype.PruneRequest](),
	reflect.TypeFor[apitype.PruneResponse](),
	reflect.TypeFor[apitype.Error](),
	reflect.TypeFor[apitype.Frame](),
	reflect.TypeFor[apitype.ClaimRequest](),
	reflect.TypeFor[apitype.ClaimResponse](),
	reflect.TypeFor[apitype.Fenced](),
	reflect.TypeFor[apitype.SetStateRequest](),
	reflect.TypeFor[apitype.ChangedResponse](),
	reflect.TypeFor[apitype.SetLastRunRequest](),
	reflect.TypeFor[apitype.SetAwaitingInputRequest](),
	reflect.TypeFor[apitype.SetGaveUpRequest](),
	reflect.TypeFor[apitype.StartRunRequest](),
	reflect.TypeFor[apitype.StartRequest](),
	reflect.TypeFor[apitype.StartResponse](),
	reflect.TypeFor[apitype.FinishRequest](),
	reflect.TypeFor[apitype.FinishResponse](),
	reflect.TypeFor[apitype.UpdateRunRequest](),
	reflect.TypeFor[apitype.TrustedClaim](),
	reflect.TypeFor[apitype.KeepaliveResponse](),
	reflect.TypeFor[apitype.ListCardsResponse](),
	reflect.TypeFor[apitype.ListRunsResponse](),
	reflect.TypeFor[apitype.MoveRequest](),
	reflect.TypeFor[apitype.AdjustLabelsRequest](),
	reflect.TypeFor[apitype.SetLabelsRequest](),
	reflect.TypeFor[apitype.ForceReleaseResponse](),
	reflect.TypeFor[apitype.EventsResponse](),
	reflect.TypeFor[apitype.EventsHeadResponse](),
	reflect.TypeFor[apitype.HeldClaim](),
	reflect.TypeFor[apitype.Status](),
	reflect.TypeFor[apitype.Backend](),
	reflect.TypeFor[apitype.StoreHealth](),
	reflect.TypeFor[apitype.WriteInfo](),
	reflect.TypeFor[apitype.PluginInfo](),
	reflect.TypeFor[apitype.HeartbeatInfo](),
	reflect.TypeFor[apitype.HeartbeatTick](),
	reflect.TypeFor[apitype.ReaperInfo](),
	reflect.TypeFor[apitype.ReaperPass](),
	reflect.TypeFor[apitype.ReaperDecision](),
	reflect.TypeFor[apitype.BoardResponse](),
	// board: the domain types the bodies carry.
	reflect.TypeFor[board.Card](),
	reflect.TypeFor[board.Run](),
	reflect.TypeFor[board.Event](),
	reflect.TypeFor[board.EventData](),
	reflect.TypeFor[board.GaveUp](),
	reflect.TypeFor[board.ClaimToken](),
	reflect.TypeFor[board.CreateCardParams](),
	reflect.TypeFor[board.SweepReport](),
	reflect.TypeFor[board.State](),
	reflect.TypeFor[board.RetryPolicy](),
}

// TestWireTypesComplete: wireTypes names every struct type package apitype
// declares, so a new request or response type cannot go unchecked.
func TestWireTypesComplete(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "apitype", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("apitype sources: %v (%d files)", err, len(files))
	}
	listed := map[string]bool{}
	for _, rt := range wireTypes {
		if rt.PkgPath() == reflect.TypeFor[apitype.Status]().PkgPath() {
			listed[rt.Name()] = true
		}
	}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				if _, isStruct := ts.Type.(*ast.StructType); isStruct && ts.Name.IsExported() && !listed[ts.Name.Name] {
					t.Errorf("apitype.%s is not in wireTypes: add it, so API.md's objects of it are checked", ts.Name.Name)
				}
			}
		}
	}
}

// jsonFields maps the JSON names of a struct type to their field types, as
// encoding/json sees them: embedded structs without a tag are flattened,
// "-" is skipped, an untagged field keeps its Go name.
func jsonFields(rt reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range rt.NumField() {
		f := rt.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && deref(f.Type).Kind() == reflect.Struct {
			for k, v := range jsonFields(deref(f.Type)) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func deref(rt reflect.Type) reflect.Type {
	for rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	return rt
}

// A node of an object as API.md writes it (see the convention above).
type node struct {
	kind    byte // 'o' object, 'a' array, 'w' word or string or number, 't' type placeholder
	members []member
	elems   []*node
	word    string
}

type member struct {
	key   string
	value *node // nil: a key with no value
}

// docParser reads one object in the page's lenient notation.
type docParser struct {
	s   string
	pos int
}

func (p *docParser) skipSpace() {
	for p.pos < len(p.s) && unicode.IsSpace(rune(p.s[p.pos])) {
		p.pos++
	}
}

func (p *docParser) errf(format string, args ...any) error {
	return fmt.Errorf("at %q: %s", p.s[p.pos:min(p.pos+30, len(p.s))], fmt.Sprintf(format, args...))
}

func (p *docParser) peek() byte {
	p.skipSpace()
	if p.pos >= len(p.s) {
		return 0
	}
	return p.s[p.pos]
}

func (p *docParser) value() (*node, error) {
	switch p.peek() {
	case '{':
		return p.object()
	case '[':
		return p.array()
	case '"':
		s, err := p.str()
		return &node{kind: 'w', word: s}, err
	case 0:
		return nil, p.errf("value expected")
	}
	w := p.word()
	if w == "" {
		return nil, p.errf("value expected")
	}
	for p.peek() == '|' { // alternatives: up|down|closed
		p.pos++
		if p.word() == "" {
			return nil, p.errf("word expected after |")
		}
	}
	if isTypeName(w) {
		return &node{kind: 't', word: w}, nil
	}
	return &node{kind: 'w', word: w}, nil
}

func isTypeName(w string) bool {
	return w != "" && unicode.IsUpper(rune(w[0])) && strings.IndexFunc(w, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) < 0
}

func (p *docParser) word() string {
	p.skipSpace()
	start := p.pos
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if strings.IndexByte(",:{}[]|\"? \t\n", c) >= 0 {
			break
		}
		p.pos++
	}
	return p.s[start:p.pos]
}

func (p *docParser) str() (string, error) {
	start := p.pos
	p.pos++ // the opening quote
	for p.pos < len(p.s) {
		switch p.s[p.pos] {
		case '\\':
			p.pos += 2
			continue
		case '"':
			p.pos++
			s, err := strconv.Unquote(p.s[start:p.pos])
			if err != nil {
				return "", fmt.Errorf("string %s: %v", p.s[start:p.pos], err)
			}
			return s, nil
		}
		p.pos++
	}
	return "", p.errf("unterminated string")
}

func (p *docParser) object() (*node, error) {
	p.pos++ // {
	n := &node{kind: 'o'}
	for {
		switch p.peek() {
		case '}':
			p.pos++
			// {Card}: a value of type Card.
			if len(n.members) == 1 && n.members[0].value == nil && isTypeName(n.members[0].key) {
				return &node{kind: 't', word: n.members[0].key}, nil
			}
			return n, nil
		case ',':
			p.pos++
			continue
		}
		var m member
		if p.peek() == '"' {
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			m.key = k
		} else if m.key = p.word(); m.key == "" {
			return nil, p.errf("key expected")
		}
		if p.peek() == '?' {
			p.pos++
		}
		if p.peek() == ':' {
			p.pos++
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			m.value = v
		}
		n.members = append(n.members, m)
		if c := p.peek(); c != ',' && c != '}' {
			return nil, p.errf("',' or '}' expected")
		}
	}
}

func (p *docParser) array() (*node, error) {
	p.pos++ // [
	n := &node{kind: 'a'}
	for {
		switch p.peek() {
		case ']':
			p.pos++
			return n, nil
		case ',':
			p.pos++
			continue
		}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		n.elems = append(n.elems, v)
	}
}

// check reports how n does not fit a value of Go type rt, as one line per
// misfit, with path naming where.
func check(n *node, rt reflect.Type, path string) []string {
	rt = deref(rt)
	switch n.kind {
	case 't':
		if rt.Name() != n.word {
			return []string{fmt.Sprintf("%s: written as %s, but it is a %s", path, n.word, rt)}
		}
		return nil
	case 'w':
		return nil
	case 'a':
		if rt.Kind() != reflect.Slice && rt.Kind() != reflect.Array {
			return []string{fmt.Sprintf("%s: written as an array, but it is a %s", path, rt)}
		}
		var out []string
		for _, e := range n.elems {
			out = append(out, check(e, rt.Elem(), path+"[]")...)
		}
		return out
	}
	// An object: a struct's fields, or a map's entries (free keys).
	switch {
	case rt.Kind() == reflect.Map:
		var out []string
		for _, m := range n.members {
			if m.value != nil {
				out = append(out, check(m.value, rt.Elem(), path+"."+m.key)...)
			}
		}
		return out
	case rt.Kind() != reflect.Struct || rt == reflect.TypeFor[time.Time]():
		return []string{fmt.Sprintf("%s: written as an object, but it is a %s", path, rt)}
	}
	fields := jsonFields(rt)
	var out []string
	for _, m := range n.members {
		ft, ok := fields[m.key]
		if !ok {
			out = append(out, fmt.Sprintf("%s: %s has no field %q", path, rt, m.key))
			continue
		}
		if m.value != nil {
			out = append(out, check(m.value, ft, path+"."+m.key)...)
		}
	}
	return out
}

// fitting are the wire types n is an instance of; when there is none, why
// not for the type it comes closest to.
// The closest type has the fewest misfits and, among those, the most of
// the object's keys.
func fitting(n *node) (fits []reflect.Type, closest string) {
	best, bestKeys := -1, 0
	for _, rt := range wireTypes {
		misfits := check(n, rt, rt.Name())
		if len(misfits) == 0 {
			fits = append(fits, rt)
			continue
		}
		keys := 0
		fields := jsonFields(deref(rt))
		for _, m := range n.members {
			if _, ok := fields[m.key]; ok {
				keys++
			}
		}
		if best < 0 || len(misfits) < best || (len(misfits) == best && keys > bestKeys) {
			best, bestKeys = len(misfits), keys
			closest = strings.Join(misfits, "; ")
		}
	}
	return fits, closest
}

// docObject is one object API.md writes, and where.
type docObject struct {
	line int
	text string
}

var (
	fenceRE     = regexp.MustCompile("(?s)```json\n(.*?)```")
	spanRE      = regexp.MustCompile("`(\\{[^`]*)`")
	pathParamRE = regexp.MustCompile(`^\{[a-z_]+\}$`)
)

// docObjects finds the objects of the page: each top-level object of a
// ```json block (text between objects, like "or", is prose), and each code
// span starting with "{" outside the blocks.
func docObjects(t *testing.T, doc string) []docObject {
	t.Helper()
	lineOf := func(off int) int { return strings.Count(doc[:off], "\n") + 1 }
	var out []docObject
	blocks := fenceRE.FindAllStringSubmatchIndex(doc, -1)
	for _, b := range blocks {
		body := doc[b[2]:b[3]]
		for i := 0; i < len(body); i++ {
			if body[i] != '{' {
				continue
			}
			p := &docParser{s: body, pos: i}
			if _, err := p.object(); err != nil {
				t.Errorf("API.md:%d: a JSON block this test cannot read: %v", lineOf(b[2]+i), err)
				break
			}
			out = append(out, docObject{line: lineOf(b[2] + i), text: body[i:p.pos]})
			i = p.pos - 1
		}
	}
	inBlock := func(off int) bool {
		return slices.ContainsFunc(blocks, func(b []int) bool { return off >= b[0] && off < b[1] })
	}
	for _, m := range spanRE.FindAllStringSubmatchIndex(doc, -1) {
		text := strings.ReplaceAll(doc[m[2]:m[3]], `\|`, "|") // a | escaped in a table
		if inBlock(m[0]) || pathParamRE.MatchString(text) {
			continue
		}
		out = append(out, docObject{line: lineOf(m[2]), text: text})
	}
	return out
}

// TestAPIDocFieldsExist: every object API.md writes fits a wire type, key
// by key and level by level.
func TestAPIDocFieldsExist(t *testing.T) {
	t.Parallel()
	objs := docObjects(t, read(t, "API.md"))
	if len(objs) < 30 {
		t.Fatalf("found only %d objects in API.md; the patterns no longer match the page", len(objs))
	}
	for _, o := range objs {
		p := &docParser{s: o.text}
		n, err := p.value()
		if err == nil && p.peek() != 0 {
			err = p.errf("text after the object")
		}
		if err != nil {
			t.Errorf("API.md:%d: cannot read %s: %v", o.line, o.text, err)
			continue
		}
		if n.kind == 't' || (n.kind == 'o' && len(n.members) == 0) {
			continue // {Card} alone, {}: no field named
		}
		if fits, closest := fitting(n); len(fits) == 0 {
			t.Errorf("API.md:%d: %s fits no wire type; closest: %s", o.line, o.text, closest)
		}
	}
}

// TestAPIDocFieldTables: a "| Field | Meaning |" table lists exactly the
// fields of the type it documents.
func TestAPIDocFieldTables(t *testing.T) {
	t.Parallel()
	lines := strings.Split(read(t, "API.md"), "\n")
	byName := map[string]reflect.Type{}
	for _, rt := range wireTypes {
		byName[rt.Name()] = rt
	}
	nameRE := regexp.MustCompile("`([A-Z][A-Za-z]*)`")
	fieldRE := regexp.MustCompile("`([a-z_]+)`")
	tables := 0
	for i, l := range lines {
		if !strings.HasPrefix(l, "| Field | Meaning |") {
			continue
		}
		tables++
		var rt reflect.Type
		for j := i - 1; j >= 0 && rt == nil; j-- {
			if m := nameRE.FindStringSubmatch(lines[j]); m != nil {
				rt = byName[m[1]]
				if rt == nil {
					t.Fatalf("API.md:%d: the field table documents %s, which is not a wire type", i+1, m[1])
				}
			}
		}
		if rt == nil {
			t.Fatalf("API.md:%d: a field table with no `Type` named before it", i+1)
		}
		listed := map[string]bool{}
		for _, row := range lines[i+2:] {
			if !strings.HasPrefix(row, "|") {
				break
			}
			first := strings.Split(row, "|")[1]
			for _, m := range fieldRE.FindAllStringSubmatch(first, -1) {
				listed[m[1]] = true
			}
		}
		fields := jsonFields(rt)
		for f := range listed {
			if _, ok := fields[f]; !ok {
				t.Errorf("API.md:%d: the %s table lists %q, which %s has not", i+1, rt.Name(), f, rt)
			}
		}
		var missing []string
		for f := range fields {
			if !listed[f] {
				missing = append(missing, f)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("API.md:%d: the %s table does not list %v", i+1, rt.Name(), missing)
		}
	}
	if tables == 0 {
		t.Fatal("API.md has no field table; the pattern no longer matches the page")
	}
}

// TestAPIDocErrorCodes: the error table lists every code apitype defines,
// no other, each with the HTTP status the agent answers it with; the
// "Errors:" paragraphs name only those codes.
func TestAPIDocErrorCodes(t *testing.T) {
	t.Parallel()
	doc := read(t, "API.md")
	_, errorsSection, ok := strings.Cut(doc, "\n## Errors\n")
	if !ok {
		t.Fatal("API.md has no ## Errors section")
	}
	errorsSection, _, _ = strings.Cut(errorsSection, "\n## ")
	codeRE := regexp.MustCompile("^`([a-z_]+)`$")
	documented := map[apitype.Code]string{} // code -> its HTTP column
	inTable := false
	for _, l := range strings.Split(errorsSection, "\n") {
		if strings.HasPrefix(l, "| `code` |") {
			inTable = true
			continue
		}
		if !inTable {
			continue
		}
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(l, "|")
		if m := codeRE.FindStringSubmatch(strings.TrimSpace(cells[1])); m != nil {
			documented[apitype.Code(m[1])] = cells[2]
		}
	}
	if len(documented) == 0 {
		t.Fatal("found no error table under ## Errors; the pattern no longer matches the page")
	}
	for _, c := range apitype.Codes() {
		http, ok := documented[c]
		if !ok {
			t.Errorf("apitype defines the code %q; API.md's error table does not list it", c)
			continue
		}
		if want := strconv.Itoa(apitype.StatusOf(c)); !slices.Contains(regexp.MustCompile(`\d+`).FindAllString(http, -1), want) {
			t.Errorf("API.md gives %s the HTTP status %q; the agent answers it with %s", c, strings.TrimSpace(http), want)
		}
	}
	for c := range documented {
		if !slices.Contains(apitype.Codes(), c) {
			t.Errorf("API.md's error table lists %q, which is no code of apitype", c)
		}
	}
	// "Errors: `claim_conflict` (...), `not_found` (...)" paragraphs.
	for _, para := range strings.Split(doc, "\n\n") {
		if !strings.HasPrefix(para, "Errors:") {
			continue
		}
		for _, m := range regexp.MustCompile("`([a-z_]+)` \\(").FindAllStringSubmatch(para, -1) {
			if _, ok := documented[apitype.Code(m[1])]; !ok {
				t.Errorf("API.md names the error %q, which is not an error code:\n%s", m[1], para)
			}
		}
	}
}
