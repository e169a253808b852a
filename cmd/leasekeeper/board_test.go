package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestBoardAdminCommandsExist(t *testing.T) {
	t.Parallel()
	root := newRoot(&cli{})
	for _, tc := range []struct {
		path  []string
		flags []string
	}{
		{[]string{"board", "state", "rename"}, []string{"json"}},
		{[]string{"board", "state", "delete"}, []string{"into", "json"}},
		{[]string{"board", "label", "rename"}, []string{"json"}},
		{[]string{"board", "label", "merge"}, []string{"into", "json"}},
		{[]string{"board", "label", "delete"}, []string{"json"}},
	} {
		c, rest, err := root.Find(tc.path)
		if err != nil || len(rest) != 0 || c.Name() != tc.path[len(tc.path)-1] {
			t.Errorf("command %v not found (got %v, rest %v, err %v)", tc.path, c.Name(), rest, err)
			continue
		}
		for _, f := range tc.flags {
			if c.Flags().Lookup(f) == nil {
				t.Errorf("%v has no --%s", tc.path, f)
			}
		}
		if c.InheritedFlags().Lookup("socket") == nil {
			t.Errorf("%v has no --socket", tc.path)
		}
	}
}

// TestBoardAdminUsageErrors: refused before any agent is contacted.
func TestBoardAdminUsageErrors(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "absent.sock")
	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"state delete without --into", []string{"board", "state", "delete", "backlog"}, exitUsage, "--into is required"},
		{"state rename with one name", []string{"board", "state", "rename", "ready"}, exitUsage, "OLD NEW"},
		{"label merge without --into", []string{"board", "label", "merge", "a", "b"}, exitUsage, "--into is required"},
		{"label merge with nothing to merge", []string{"board", "label", "merge", "--into", "c"}, exitUsage, "at least one label"},
		{"label delete with two labels", []string{"board", "label", "delete", "a", "b"}, exitUsage, `leasekeeper board label delete needs L, got 2 ("a" "b")`},
		{"unreachable agent is an error", []string{"board", "label", "delete", "a"}, exitError, "cannot reach the agent"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			code := run(append([]string{"--socket", sock}, tc.args...), strings.NewReader(""), &out, &errb)
			if code != tc.wantCode {
				t.Errorf("exit = %d, want %d; stderr: %s", code, tc.wantCode, errb.String())
			}
			if !strings.Contains(errb.String(), tc.wantErr) {
				t.Errorf("stderr %q does not contain %q", errb.String(), tc.wantErr)
			}
		})
	}
}
