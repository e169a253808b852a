package mongotest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The test server's changes to FerretDB: narrowing by _id, finding an _id
// through its index, and narrowing by the strings a filter asks for.
//
// FerretDB v1's SQLite backend turns a query filter into SQL only when the
// filter is exactly {_id: v}; any other filter reads every document of the
// collection and matches it in Go. Every compare-and-set the MongoDB twin
// sends names the card's _id together with the fenced fields (the claim,
// the epoch, the version), so on the unpatched server each one decodes the
// whole cards collection, and the fleet tests spend most of their time in
// FerretDB's JSON decoder.
//
// The patch narrows the SQL to the _id whenever the filter has a top-level
// _id equal to a string or ObjectID, whatever else it names. That changes
// no answer: a filter's top-level keys are a conjunction, so a document
// with another _id can never match; and every command that reads through
// the backend (find, findAndModify, update, delete, count, distinct,
// aggregate's first $match) matches the whole filter again on what the
// backend returns. TestNarrowedFilterStillMatchesEveryField pins that.
//
// The patch is applied to a copy of the module taken from the module
// cache, and the server is built against the copy with a replace
// directive in a temporary go.mod: the cache itself is read-only and go
// build refuses overlays beneath it. A FerretDB whose source no longer
// has the patched lines fails the build loudly rather than running
// unpatched and slow.
const (
	ferretModule = "github.com/FerretDB/FerretDB"
	pushdownFile = "internal/backends/sqlite/collection.go"
	// pushdownFrom is the condition as FerretDB writes it in
	// collection.Query (its first occurrence in the file; the second, in
	// Explain, only reports and is left alone).
	pushdownFrom = "\tif params.Filter.Len() == 1 {\n\t\tv, _ := params.Filter.Get(\"_id\")\n\t\tswitch v.(type) {\n\t\tcase string, types.ObjectID:\n\t\t\twhereClause = "
	pushdownTo   = "\tif params.Filter.Len() >= 1 {\n\t\tv, _ := params.Filter.Get(\"_id\")\n\t\tswitch v.(type) {\n\t\tcase string, types.ObjectID:\n\t\t\twhereClause = "
)

// The second change: looking an _id up through its index.
//
// FerretDB v1 indexes a collection's _id on the expression
// _ferretdb_sjson->"_id", but finds a document by _id (the narrowed query
// above, every update and delete) with _ferretdb_sjson->'$._id'. The two
// are the same value (SQLite reads a -> label X as the path '$.X') but not
// the same expression, so SQLite's planner does not use the index: every
// such lookup parses the JSON of every document of the collection, and
// every write of the fleet tests costs a scan of the cards. The patch
// writes the lookup as the index does, which turns the scan into an index
// search and changes no answer.
const (
	idColumnFile = "internal/backends/sqlite/metadata/metadata.go"
	idColumnFrom = "\tIDColumn = DefaultColumn + \"->'$._id'\"\n"
	idColumnTo   = "\tIDColumn = DefaultColumn + \"->'_id'\"\n"
)

// The third change: narrowing by the strings a filter asks for.
//
// A filter without an _id (a card by its run's id, the dependents of a
// card, the cards in a state) still reads and decodes every document of
// the collection. But a document can only meet a top-level condition
// "field equals the string v" (or "is in a list of strings") if its stored
// JSON holds v written as FerretDB writes every string it stores:
// sjson.MarshalSingleValue, the bytes json.Marshal gives, whether the
// string sits in a field, a nested document or an array. So the patch
// adds, for each such condition, SQL keeping only the rows whose text
// contains that spelling of v (instr, a byte search; no JSON is parsed).
// Like the _id narrowing it can only keep too much: the handler matches
// the whole filter on every row it returns.
//
// FerretDB drops dotted keys ("run.id") from a find's filter before the
// backend sees it unless nested pushdown is on; the backend narrows by no
// other key than these, so turning it on only lets the dotted conditions
// through to narrowByStrings.
const (
	narrowFile = "internal/backends/sqlite/collection.go"
	narrowFrom = "\tq += whereClause\n"
	narrowTo   = "\tif whereClause == \"\" {\n\t\twhereClause, args = narrowByStrings(params.Filter)\n\t}\n\tq += whereClause\n"
	nestedFile = "internal/handler/registry/sqlite.go"
	nestedFrom = "\t\t\tEnableNestedPushdown:    opts.EnableNestedPushdown,\n"
	nestedTo   = "\t\t\tEnableNestedPushdown:    true,\n"
)

// narrowSource is the file the third change adds to FerretDB's SQLite
// backend, at narrowSourceFile. It is package sqlite of FerretDB and
// imports FerretDB's internal packages, so it cannot compile in this
// module: it lives under testdata, which the go command (build, vet,
// staticcheck) skips, while gofmt, given every tracked .go file, still
// checks it. Its bytes are written as they are and feed sourceKey, so an
// edit to it builds a fresh server.
//
//go:embed testdata/ferretpatch/leasekeeper_narrow.go
var narrowSource string

const narrowSourceFile = "internal/backends/sqlite/leasekeeper_narrow.go"

// patches lists the changes patchedModfile makes, each applied once to the
// first occurrence of from in file.
var patches = []struct{ file, from, to, what string }{
	{pushdownFile, pushdownFrom, pushdownTo, "the filter pushdown this package narrows"},
	{idColumnFile, idColumnFrom, idColumnTo, "the _id lookup this package puts on the _id index"},
	{narrowFile, narrowFrom, narrowTo, "the WHERE clause this package narrows by strings"},
	{nestedFile, nestedFrom, nestedTo, "the nested pushdown setting this package turns on"},
}

// added lists the files patchedModfile adds to the copy; each must not
// exist in it already.
var added = []struct{ file, code string }{
	{narrowSourceFile, narrowSource},
}

// patchedModfile copies FerretDB out of the module cache into work, applies
// the _id narrowing, and writes a go.mod (with its go.sum) that builds the
// server in dir against the copy. It returns the go.mod's path for
// go build -modfile.
func patchedModfile(ctx context.Context, dir, work string, env []string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", ferretModule)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate %s: %w", ferretModule, err)
	}
	var mod struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("locate %s: %w", ferretModule, err)
	}
	if mod.Error != "" || mod.Dir == "" {
		return "", fmt.Errorf("locate %s: %s", ferretModule, mod.Error)
	}

	src := filepath.Join(work, "ferretdb")
	if err := os.RemoveAll(src); err != nil {
		return "", err
	}
	if err := copyTree(mod.Dir, src); err != nil {
		return "", fmt.Errorf("copy %s %s: %w", ferretModule, mod.Version, err)
	}
	for _, p := range patches {
		target := filepath.Join(src, filepath.FromSlash(p.file))
		code, err := os.ReadFile(target)
		if err != nil {
			return "", err
		}
		if !bytes.Contains(code, []byte(p.from)) {
			return "", fmt.Errorf("%s %s: %s no longer has %s; revisit pushdown.go", ferretModule, mod.Version, p.file, p.what)
		}
		code = bytes.Replace(code, []byte(p.from), []byte(p.to), 1)
		if err := os.WriteFile(target, code, 0o644); err != nil {
			return "", err
		}
	}

	for _, a := range added {
		target := filepath.Join(src, filepath.FromSlash(a.file))
		if _, err := os.Stat(target); err == nil {
			return "", fmt.Errorf("%s %s already has %s; revisit pushdown.go", ferretModule, mod.Version, a.file)
		}
		if err := os.WriteFile(target, []byte(a.code), 0o644); err != nil {
			return "", err
		}
	}

	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	gosum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		return "", err
	}
	modfile := filepath.Join(work, "go.mod")
	gomod = fmt.Appendf(gomod, "\nreplace %s => %s\n", ferretModule, src)
	if err := os.WriteFile(modfile, gomod, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(work, "go.sum"), gosum, 0o644); err != nil {
		return "", err
	}
	return modfile, nil
}

// copyTree copies the regular files and directories under from into to,
// writable (the module cache's files are read-only).
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Type().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, 0o644)
		case strings.HasPrefix(rel, ".."):
			return errors.New("walked outside the module")
		default:
			return nil // symlinks and the like: a module zip has none
		}
	})
}
