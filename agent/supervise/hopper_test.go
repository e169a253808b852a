package supervise

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// A process that forks and exits in a loop ("pid hopping") may never be
// where a walk of /proc looks: by the time the walk reads the pid it
// listed, that process has exited and its child was forked after the
// listing. Empty walks alone must not end the sweep while such a tree
// lives: once Done, nothing of it may run.
func TestHoppingProcessDoesNotEscapeTheTree(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("needs perl for a process that forks and exits in a loop")
	}
	for attempt := range 5 {
		dir := t.TempDir()
		stop := filepath.Join(dir, "stop")
		token := "hopper-token-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(attempt)
		script := `$0="` + token + `"; if (fork()) { select(undef,undef,undef,0.2); exit 0 } while (!-e "` + stop + `") { exit 0 if fork() }`
		c, err := Start(launcher, exec.Command("perl", "-e", script))
		if err != nil {
			t.Fatal(err)
		}
		code, _ := c.Wait(context.Background())
		// Done: whatever still runs now escaped.
		n := countCmdline(token)
		_ = os.WriteFile(stop, nil, 0o644) // ends an escaped loop, if any
		if n > 0 {
			t.Fatalf("attempt %d: Done (code %d, survivors %v) but %d process(es) of the tree still run", attempt, code, c.Survivors(), n)
		}
	}
}

func countCmdline(token string) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(token)) {
			if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && !bytes.Contains(st, []byte(") Z ")) {
				n++
			}
		}
	}
	return n
}
