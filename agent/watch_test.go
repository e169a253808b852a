package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startWatch loads path, starts a watcher on it and returns the live values
// and the channel of reload results.
func startWatch(t *testing.T, path string) (*Live, <-chan ReloadResult) {
	t.Helper()
	env := testEnv(nil)
	cfg, err := LoadConfig(path, env)
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	live := NewLive(cfg)
	results := make(chan ReloadResult, 16)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := WatchConfig(ctx, path, env, live, log, func(r ReloadResult) { results <- r }); err != nil {
		t.Fatalf("WatchConfig: %v", err)
	}
	return live, results
}

func nextReload(t *testing.T, results <-chan ReloadResult) ReloadResult {
	t.Helper()
	select {
	case r := <-results:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no reload within 10s")
		return ReloadResult{}
	}
}

func TestWatchConfigReloadsLiveKeys(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agent.yaml")
	writeFile(t, path, "lease: 30s\n")
	live, results := startWatch(t, path)

	writeFile(t, path, "lease: 45s\nreaper: {enabled: true}\nlog: debug\nliveness: keepalive\n")
	r := nextReload(t, results)
	if r.Err != nil {
		t.Fatalf("reload error: %v", r.Err)
	}
	if got, want := live.Lease(), 45*time.Second; got != want {
		t.Errorf("lease = %s, want %s", got, want)
	}
	if !live.ReaperEnabled() {
		t.Error("reaper gate still off after reload")
	}
	if got, want := live.Liveness(), LivenessKeepalive; got != want {
		t.Errorf("liveness = %q, want %q", got, want)
	}
	if got, want := live.Level().Level(), slog.LevelDebug; got != want {
		t.Errorf("log level = %v, want %v", got, want)
	}
	if len(r.Restart) != 0 {
		t.Errorf("restart = %q, want none", r.Restart)
	}
}

func TestWatchConfigInvalidKeepsLastGood(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agent.yaml")
	writeFile(t, path, "lease: 30s\n")
	live, results := startWatch(t, path)

	writeFile(t, path, "lease: 12s\nleese: typo\n")
	r := nextReload(t, results)
	if r.Err == nil {
		t.Fatal("invalid file was applied")
	}
	if got, want := live.Lease(), 30*time.Second; got != want {
		t.Errorf("lease after refused reload = %s, want the last good %s", got, want)
	}
	if got, want := r.Config.Lease, 30*time.Second; got != want {
		t.Errorf("result config lease = %s, want %s", got, want)
	}

	// A later valid file is applied again.
	writeFile(t, path, "lease: 12s\n")
	if r := nextReload(t, results); r.Err != nil {
		t.Fatalf("reload error: %v", r.Err)
	}
	if got, want := live.Lease(), 12*time.Second; got != want {
		t.Errorf("lease = %s, want %s", got, want)
	}
}

func TestWatchConfigRenameReplace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	writeFile(t, path, "lease: 30s\n")
	live, results := startWatch(t, path)

	// An editor's save: write a sibling, rename it over the original.
	tmp := filepath.Join(dir, ".agent.yaml.swp")
	writeFile(t, tmp, "lease: 50s\n")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if r := nextReload(t, results); r.Err != nil {
		t.Fatalf("reload error: %v", r.Err)
	}
	if got, want := live.Lease(), 50*time.Second; got != want {
		t.Errorf("lease = %s, want %s", got, want)
	}
}

func TestWatchConfigConfigMapSymlinkSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The layout kubelet writes: agent.yaml → ..data/agent.yaml,
	// ..data → ..v1; an update creates ..v2 and renames a new ..data
	// symlink over the old one.
	for _, v := range []string{"..v1", "..v2"} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "..v1", "agent.yaml"), "lease: 30s\n")
	writeFile(t, filepath.Join(dir, "..v2", "agent.yaml"), "lease: 40s\nreaper: {enabled: true}\n")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "agent.yaml")
	if err := os.Symlink(filepath.Join("..data", "agent.yaml"), path); err != nil {
		t.Fatal(err)
	}
	live, results := startWatch(t, path)

	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if r := nextReload(t, results); r.Err != nil {
		t.Fatalf("reload error: %v", r.Err)
	}
	if got, want := live.Lease(), 40*time.Second; got != want {
		t.Errorf("lease = %s, want %s", got, want)
	}
	if !live.ReaperEnabled() {
		t.Error("reaper gate still off after the swap")
	}
}

func TestWatchConfigRestartKeysAreReportedNotApplied(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	writeFile(t, path, "socket: "+filepath.Join(dir, "a.sock")+"\n")
	live, results := startWatch(t, path)

	writeFile(t, path, "socket: "+filepath.Join(dir, "b.sock")+"\nlease: 33s\n")
	r := nextReload(t, results)
	if r.Err != nil {
		t.Fatalf("reload error: %v", r.Err)
	}
	if got, want := r.Restart, []string{"socket"}; !slices.Equal(got, want) {
		t.Errorf("restart = %q, want %q", got, want)
	}
	if got, want := live.Config().Socket, filepath.Join(dir, "a.sock"); got != want {
		t.Errorf("socket in force = %q, want the boot value %q", got, want)
	}
	if got, want := live.Lease(), 33*time.Second; got != want {
		t.Errorf("lease = %s, want %s", got, want)
	}
}

// An emptied config file (truncated, comments only) is refused on reload
// like an invalid one: applied, it would switch the lease and the gate to
// their defaults under the running agent.
func TestWatchConfigRefusesAnEmptiedFile(t *testing.T) {
	t.Parallel()
	for _, emptied := range []string{"", "# nothing here yet\n\n"} {
		path := filepath.Join(t.TempDir(), "agent.yaml")
		writeFile(t, path, "lease: 4s\nreaper: {enabled: true}\n")
		live, results := startWatch(t, path)
		writeFile(t, path, emptied)
		r := nextReload(t, results)
		if !errors.Is(r.Err, ErrConfigEmpty) {
			t.Errorf("reload of %q: err %v, want ErrConfigEmpty", emptied, r.Err)
		}
		if live.Lease() != 4*time.Second || !live.ReaperEnabled() {
			t.Errorf("after %q: lease %s gate %v, want the last good 4s and on", emptied, live.Lease(), live.ReaperEnabled())
		}
		// "{}" says "every default" on purpose, and is applied.
		writeFile(t, path, "{}\n")
		if r := nextReload(t, results); r.Err != nil || live.Lease() != 30*time.Second {
			t.Errorf("reload of {}: err %v lease %s, want the defaults applied", r.Err, live.Lease())
		}
	}
}

// TestEmptyConfigStartAndReloadAgree: the agent's start and a reload of
// the same file content give the same answer. A file with no YAML document
// (empty, comments only) is refused by both, naming `{}` (a truncated or
// failed-template file must not bring every default, a new store path
// among them, in by a restart any more than by a reload); `{}` and a
// document are taken by both.
func TestEmptyConfigStartAndReloadAgree(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		content string
		empty   bool
	}{
		{"", true},
		{"\n  \n", true},
		{"# nothing here yet\n\n", true},
		{"{}\n", false},
		{"lease: 5s\n", false},
	} {
		path := filepath.Join(t.TempDir(), "agent.yaml")
		writeFile(t, path, tc.content)
		_, startErr := LoadConfig(path, testEnv(nil))

		writeFile(t, path, "lease: 4s\nreaper: {enabled: false}\n")
		live, results := startWatch(t, path)
		writeFile(t, path, tc.content)
		reloadErr := nextReload(t, results).Err

		if tc.empty {
			if !errors.Is(startErr, ErrConfigEmpty) || !errors.Is(reloadErr, ErrConfigEmpty) {
				t.Errorf("%q: start err %v, reload err %v; want ErrConfigEmpty from both", tc.content, startErr, reloadErr)
			}
			if startErr != nil && (!strings.Contains(startErr.Error(), path) || !strings.Contains(startErr.Error(), "write {}")) {
				t.Errorf("%q: start err %q, want the path and the {} hint", tc.content, startErr)
			}
			if live.Lease() != 4*time.Second {
				t.Errorf("%q: lease %s after the refused reload, want the last good 4s", tc.content, live.Lease())
			}
		} else if startErr != nil || reloadErr != nil {
			t.Errorf("%q: start err %v, reload err %v; want both to take it", tc.content, startErr, reloadErr)
		}
	}
}

// A removed config file is reported (and logged at warn), and the last good
// config stays.
func TestWatchConfigReportsARemovedFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agent.yaml")
	writeFile(t, path, "lease: 4s\n")
	live, results := startWatch(t, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if r := nextReload(t, results); !errors.Is(r.Err, ErrConfigRemoved) {
		t.Errorf("after removal: err %v, want ErrConfigRemoved", r.Err)
	}
	if live.Lease() != 4*time.Second {
		t.Errorf("lease %s, want the last good 4s", live.Lease())
	}
	writeFile(t, path, "lease: 6s\n")
	if r := nextReload(t, results); r.Err != nil || live.Lease() != 6*time.Second {
		t.Errorf("after it came back: err %v lease %s, want 6s", r.Err, live.Lease())
	}
}

// A config that is a symlink to a file in another directory is watched
// through its target: editing the target reloads.
func TestWatchConfigFollowsASymlinkToAnotherDirectory(t *testing.T) {
	t.Parallel()
	real := filepath.Join(t.TempDir(), "real.yaml")
	writeFile(t, real, "lease: 4s\n")
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.Symlink(real, path); err != nil {
		t.Fatal(err)
	}
	live, results := startWatch(t, path)
	writeFile(t, real, "lease: 7s\n")
	if r := nextReload(t, results); r.Err != nil || live.Lease() != 7*time.Second {
		t.Errorf("after editing the target: err %v lease %s, want 7s", r.Err, live.Lease())
	}
}
