package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"testing"
)

func noMsg(string) bool { return false }

// A time.Duration whose message field does not say it carries nanoseconds
// (backoff, in whatever unit the proto's comment names) must not pair as
// nanoseconds; only <name>_nanos says so.
func TestDurationPairsOnlyWithANanosField(t *testing.T) {
	to, from, err := pairStruct(
		[]field{{"Backoff", "time.Duration"}},
		[]field{{"Backoff", "int64"}},
		nil, noMsg)
	if err == nil {
		t.Errorf("time.Duration Backoff paired with int64 Backoff (no Nanos suffix) as %v / %v: a unit-less int64 is read as nanoseconds", to, from)
	}
}

// Each message field is used once: two Go fields must not both take one.
func TestAMessageFieldPairsOnce(t *testing.T) {
	_, _, err := pairStruct(
		[]field{{"Lease", "time.Duration"}, {"LeaseNanos", "int64"}},
		[]field{{"LeaseNanos", "int64"}},
		nil, noMsg)
	if err == nil {
		t.Errorf("two Go fields paired with the one message field LeaseNanos")
	}
}

// A Go field of a type the generator cannot write (a map) must not vanish
// from the pairing: with no message field for it, the pairing must fail,
// not generate a conversion that drops it.
func TestAnUnwritableGoFieldIsNotDropped(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", "package board\ntype P struct { Card string; Meta map[string]string }\n", 0)
	if err != nil {
		t.Fatal(err)
	}
	st := f.Decls[0].(*ast.GenDecl).Specs[0].(*ast.TypeSpec).Type.(*ast.StructType)
	fs, ok := recordFields(st, map[string]bool{"P": true})
	if !ok {
		return // refused as not a plain record: fine
	}
	if _, _, err := pairStruct(fs, []field{{"Card", "string"}}, nil, noMsg); err == nil {
		t.Errorf("Go fields %v: Meta map[string]string dropped silently; the conversion would lose it", fs)
	}
}

// A oneof field of a message is a field the conversion must fill: the
// generator must see it (and refuse to pair, as with any message field it
// cannot), not leave it zero silently.
func TestAOneofFieldIsSeen(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "plugins", "storepb")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := "package storepb\ntype X struct {\n\tCard string `protobuf:\"bytes,1,opt,name=card,proto3\" json:\"card,omitempty\"`\n\t// Types that are valid to be assigned to Target:\n\tTarget isX_Target `protobuf_oneof:\"target\"`\n}\ntype isX_Target interface{ isX_Target() }\n"
	if err := os.WriteFile(filepath.Join(dir, "store.pb.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	msgs, err := messages(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs["X"]) != 2 {
		t.Errorf("message X fields = %v: the oneof Target is invisible, so a conversion would leave it zero without an error", msgs["X"])
	}
}
