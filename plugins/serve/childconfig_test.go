package serve

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/board"
)

func TestChildConfigTravelsThroughTheEnvironment(t *testing.T) {
	want := ChildConfig{
		Backend: "mongo", URI: "mongodb://127.0.0.1:27017", Database: "leasekeeper",
		Board: board.DefaultBoard(false), Lease: 30 * time.Second, UnleasedHorizon: 24 * time.Hour,
	}
	kv, err := want.Environ()
	if err != nil {
		t.Fatal(err)
	}
	name, value, ok := strings.Cut(kv, "=")
	if !ok || name != ChildConfigEnv {
		t.Fatalf("Environ() = %q, want %s=...", kv, ChildConfigEnv)
	}
	// Durations are spelled as in the config file, for plugin authors.
	for _, s := range []string{`"lease":"30s"`, `"unleased_horizon":"24h0m0s"`, `"backend":"mongo"`} {
		if !strings.Contains(value, s) {
			t.Errorf("JSON %s does not contain %s", value, s)
		}
	}
	t.Setenv(ChildConfigEnv, value)
	got, err := ChildConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestChildConfigFromEnvErrors(t *testing.T) {
	cases := []struct {
		name  string
		value *string
		want  string
	}{
		{"missing", nil, "is not set"},
		{"not JSON", ptr("{"), ChildConfigEnv},
		{"bad duration", ptr(`{"backend":"bolt","lease":"soon"}`), "lease"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.value != nil {
				t.Setenv(ChildConfigEnv, *tc.value)
			} else {
				t.Setenv(ChildConfigEnv, "")
				unsetenv(t, ChildConfigEnv)
			}
			_, err := ChildConfigFromEnv()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// unsetenv removes name for the rest of t (after t.Setenv registered its
// restoration).
func unsetenv(t *testing.T, name string) {
	t.Helper()
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}
