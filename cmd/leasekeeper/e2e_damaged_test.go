package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2EAgentRefusesAnEmptyStoreFile: an existing, empty bbolt file (a
// truncation, a half-written restore) is not a new board. The agent exits
// non-zero before serving anything, its last line names the file, and the
// file is left as it was — no fresh board whose epochs would restart at 1.
func TestE2EAgentRefusesAnEmptyStoreFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	db := filepath.Join(e.Dir, "board.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), binary, "agent", "--config", e.Config)
	cmd.Env, cmd.Dir = e.Environ(), e.Dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the agent started on an empty store file:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, db) || !strings.Contains(last, "empty") {
		t.Errorf("last line %q: want it to name %s and say it is empty", last, db)
	}
	if fi, err := os.Stat(db); err != nil || fi.Size() != 0 {
		t.Errorf("store file after the refusal: %v, %v; want it left empty", fi, err)
	}
	if _, err := os.Stat(e.Socket); !os.IsNotExist(err) {
		t.Errorf("socket exists (stat err %v): the agent served something", err)
	}
}
