package storespec

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe := filepath.Join(dir, "plugin")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExe := filepath.Join(dir, "data")
	if err := os.WriteFile(notExe, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := board.Board{States: []board.State{{Name: "only"}}}
	cases := []struct {
		name    string
		spec    Spec
		wantKey string // "" = valid
	}{
		{"bolt", Spec{Backend: Bolt, Path: "/x/board.db"}, ""},
		{"bolt with a board", Spec{Backend: Bolt, Path: "/x/board.db", Board: board.DefaultBoard(true), Lease: time.Second}, ""},
		{"mongo", Spec{Backend: Mongo, URI: "mongodb://h", Database: "d"}, ""},
		{"mongo+srv", Spec{Backend: Mongo, URI: "mongodb+srv://h", Database: "d"}, ""},
		{"plugin", Spec{Backend: exe}, ""},
		{"empty backend", Spec{}, "store.backend"},
		{"bolt without a path", Spec{Backend: Bolt}, "store.path"},
		{"bolt with a uri", Spec{Backend: Bolt, Path: "/x", URI: "mongodb://h"}, "store.uri"},
		{"bolt with a database", Spec{Backend: Bolt, Path: "/x", Database: "d"}, "store.uri"},
		{"mongo with a path", Spec{Backend: Mongo, Path: "/x", URI: "mongodb://h", Database: "d"}, "store.path"},
		{"mongo with another scheme", Spec{Backend: Mongo, URI: "postgres://u:pw@h", Database: "d"}, "store.uri"},
		{"mongo without a database", Spec{Backend: Mongo, URI: "mongodb://h"}, "store.database"},
		{"missing plugin", Spec{Backend: filepath.Join(dir, "nope")}, "store.backend"},
		{"plugin not executable", Spec{Backend: notExe}, "store.backend"},
		{"plugin is a directory", Spec{Backend: dir}, "store.backend"},
		{"invalid board", Spec{Backend: Bolt, Path: "/x", Board: bad}, "states"},
		{"negative lease", Spec{Backend: Bolt, Path: "/x", Lease: -time.Second}, "lease"},
		{"negative horizon", Spec{Backend: Bolt, Path: "/x", UnleasedHorizon: -time.Second}, "unleased_horizon"},
	}
	for _, tc := range cases {
		err := tc.spec.Validate()
		if tc.wantKey == "" {
			if err != nil {
				t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
			}
			continue
		}
		var ke *KeyError
		if !errors.As(err, &ke) || ke.Key != tc.wantKey || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate() = %v, want a KeyError for %s wrapping ErrInvalid", tc.name, err, tc.wantKey)
		}
	}
	// The URI is quoted redacted.
	err := Spec{Backend: Mongo, URI: "postgres://u:s3cret@h", Database: "d"}.Validate()
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Validate() = %v, want an error without the password", err)
	}
}

// A spec in a log record, in %v or through Redacted never shows the
// URI's secrets, and still says where the store is.
func TestRedaction(t *testing.T) {
	t.Parallel()
	s := Spec{Backend: Mongo, URI: "mongodb://alice:s3cret@db:27017/?tlsCertificateKeyFilePassword=k3y", Database: "fleet"}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("opening", "store", s)
	for name, out := range map[string]string{"log": buf.String(), "%v": s.String(), "Redacted": s.Redacted().URI} {
		if strings.Contains(out, "s3cret") || strings.Contains(out, "k3y") {
			t.Errorf("%s output carries a secret: %s", name, out)
		}
		if !strings.Contains(out, "db:27017") {
			t.Errorf("%s output does not say where the store is: %s", name, out)
		}
	}
	if !strings.Contains(buf.String(), "store.database=fleet") || !strings.Contains(buf.String(), "store.backend=mongo") {
		t.Errorf("log line = %s, want the backend and database", buf.String())
	}
	if s.URI != "mongodb://alice:s3cret@db:27017/?tlsCertificateKeyFilePassword=k3y" {
		t.Errorf("Redacted changed the spec it was called on: %s", s.URI)
	}
}

// The child's variable keeps the form agents before this package wrote:
// a plugin built against an older release reads what a newer agent
// sends, and the other way round.
func TestEnvironCompatible(t *testing.T) {
	old := `{"backend":"bolt","path":"/var/lib/lk/board.db","board":{"states":[{"name":"ready","pool":true,"launch":true},{"name":"done","terminal":true,"completion":true}]},"lease":"45s","unleased_horizon":"24h0m0s"}`
	want := Spec{
		Backend: Bolt, Path: "/var/lib/lk/board.db",
		Board: board.Board{States: []board.State{
			{Name: "ready", Pool: true, Launch: true},
			{Name: "done", Terminal: true, Completion: true},
		}},
		Lease: 45 * time.Second, UnleasedHorizon: 24 * time.Hour,
	}
	t.Setenv(Env, old)
	got, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(want) {
		t.Errorf("FromEnv() = %+v, want %+v", got, want)
	}
	kv, err := want.Environ()
	if err != nil {
		t.Fatal(err)
	}
	if kv != Env+"="+old {
		t.Errorf("Environ() = %s\nwant        %s=%s", kv, Env, old)
	}
}

func TestWith(t *testing.T) {
	t.Parallel()
	loc := Spec{Backend: Bolt, Path: "/x"}
	full := loc.With(board.DefaultBoard(true), time.Minute, time.Hour)
	if full.Lease != time.Minute || full.UnleasedHorizon != time.Hour || !full.Board.Equal(board.DefaultBoard(true)) || full.Path != "/x" {
		t.Errorf("With() = %+v", full)
	}
	if full.Equal(loc) || !full.Equal(full) {
		t.Error("Equal does not compare the open parameters")
	}
}
