package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

func TestVersionFromBuildInfo(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name     string
		mod      string
		settings []debug.BuildSetting
		want     string
	}{
		{"no vcs", "(devel)", nil, "devel"},
		{"clean tree", "(devel)", vcs("false"), "devel-0123456789ab"},
		{"dirty tree", "(devel)", vcs("true"), "devel-0123456789ab-dirty"},
		{"tagged", "v1.2.3", vcs("false"), "v1.2.3-0123456789ab"},
		{"pseudo-version carries the revision", "v0.0.0-20260101000000-0123456789ab", vcs("false"), "v0.0.0-20260101000000-0123456789ab"},
		{"dirty pseudo-version, said once", "v0.0.0-20260101000000-0123456789ab+dirty", vcs("true"), "v0.0.0-20260101000000-0123456789ab-dirty"},
		{"go install of a release", "v1.2.3", nil, "v1.2.3"},
	} {
		info := &debug.BuildInfo{Main: debug.Module{Version: tc.mod}, Settings: tc.settings}
		if got := versionFrom(info); got != tc.want {
			t.Errorf("%s: versionFrom = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestVersionOfABuildInAGitClone builds the command the way a contributor
// does, `go build` in a git checkout, and checks that --version names the
// commit, then "-dirty" once the tree has a change, and that -ldflags -X
// wins over both. The checkout is a fresh repository holding a copy of this
// module's files, so the test builds the code under test whatever the
// enclosing checkout is (a git worktree, which the go command does not
// stamp, or no repository at all).
func TestVersionOfABuildInAGitClone(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary three times")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root, err := agentproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	clone := t.TempDir()
	copyModule(t, root, clone)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = clone
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL="+os.DevNull)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "snapshot")
	rev := git("rev-parse", "HEAD")

	bin := filepath.Join(clone, "bin", "leasekeeper")
	build := func(extra ...string) {
		t.Helper()
		// -buildvcs=true: the stamp is the go command's default in a
		// checkout, but GOFLAGS may turn it off; this build must have it.
		// -trimpath and CGO_ENABLED=0, as the documented builds do
		// (docs/OPERATIONS.md, the Dockerfile) and TestMain's: the clone's
		// path then leaves no trace in the compiled packages, and the go
		// command reuses those it compiled for TestMain's binary instead
		// of compiling the module afresh three times. -s -w, as the
		// Dockerfile links: no symbol table or DWARF to write, a third of
		// each link's time; the version is not read from either.
		args := append([]string{"build", "-buildvcs=true", "-trimpath", "-o", bin}, extra...)
		cmd := exec.Command("go", append(args, "./cmd/leasekeeper")...)
		cmd.Dir = clone
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	versionOf := func() string {
		t.Helper()
		out, err := exec.Command(bin, "--version").Output()
		if err != nil {
			t.Fatalf("leasekeeper --version: %v", err)
		}
		return strings.TrimSpace(string(out))
	}

	build("-ldflags", "-s -w")
	got := versionOf()
	if !strings.Contains(got, rev[:12]) || strings.HasSuffix(got, "-dirty") || !strings.HasPrefix(got, "leasekeeper ") {
		t.Errorf("clean checkout at %s: --version = %q, want the revision and no -dirty", rev[:12], got)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if v := strings.TrimPrefix(got, "leasekeeper "); !strings.HasPrefix(string(out), "leasekeeper "+v+" (go") {
		t.Errorf("`leasekeeper version` = %q, want the --version string %q and the Go release", out, v)
	}

	if err := os.WriteFile(filepath.Join(clone, "cmd", "leasekeeper", "local.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build("-ldflags", "-s -w")
	if got := versionOf(); !strings.Contains(got, rev[:12]) || !strings.HasSuffix(got, "-dirty") {
		t.Errorf("modified checkout: --version = %q, want the revision and -dirty", got)
	}

	build("-ldflags", "-s -w -X main.version=v9.8.7")
	if got := versionOf(); got != "leasekeeper v9.8.7" {
		t.Errorf("-ldflags -X main.version=v9.8.7: --version = %q", got)
	}
}

// copyModule copies the regular files under src, but not .git, to dst.
func copyModule(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if d.Name() == ".git" || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStatusAndMetricsShowTheVersion checks that the agent reports the
// version --version prints, in its status and in leasekeeper_build_info.
func TestStatusAndMetricsShowTheVersion(t *testing.T) {
	out, err := exec.Command(binary, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimPrefix(strings.TrimSpace(string(out)), "leasekeeper ")
	metricsAddr := freeAddr(t)
	e := newEnv(t, "metrics: "+metricsAddr+"\n")
	e.Start()
	if got := e.Status().Version; got != want {
		t.Errorf("status version = %q, want %q", got, want)
	}
	if got := scrape(t, metricsAddr); !strings.Contains(got, `leasekeeper_build_info{goversion=`) || !strings.Contains(got, `version="`+want+`"} 1`) {
		t.Errorf("build_info does not carry version %q:\n%s", want, got)
	}
}
