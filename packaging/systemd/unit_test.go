// Package systemd_test checks the shipped unit file with systemd's own
// verifier, so a typo in a directive fails CI rather than an operator's boot.
package systemd_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

func readUnit(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("leasekeeper.service")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// directives returns every key=value of the unit, keys may repeat.
func directives(unit string) map[string][]string {
	out := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			out[k] = append(out[k], v)
		}
	}
	return out
}

func TestUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze is missing in CI: .ci/run installs the systemd package")
		}
		t.Skip("systemd-analyze not installed")
	}
	// Point ExecStart at a binary that exists here; everything else is
	// verified exactly as shipped.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.Replace(readUnit(t), "/usr/local/bin/leasekeeper", self, -1)
	path := filepath.Join(t.TempDir(), "leasekeeper.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || strings.Contains(string(out), "leasekeeper.service:") {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func TestUnitContract(t *testing.T) {
	d := directives(readUnit(t))
	want := map[string]string{
		"Type":              "notify",
		"RuntimeDirectory":  "leasekeeper",
		"StateDirectory":    "leasekeeper",
		"NoNewPrivileges":   "yes",
		"ProtectSystem":     "strict",
		"ProtectHome":       "yes",
		"PrivateTmp":        "yes",
		"PrivateDevices":    "yes",
		"Group":             "leasekeeper",
		"EnvironmentFile":   "-/etc/default/leasekeeper",
		"ProtectKernelLogs": "yes",
	}
	for k, v := range want {
		if got := d[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if len(d["WatchdogSec"]) == 0 {
		t.Error("WatchdogSec missing: the heartbeat loop's WATCHDOG=1 would go unchecked")
	}
	if len(d["SystemCallFilter"]) == 0 || len(d["RestrictAddressFamilies"]) == 0 {
		t.Error("SystemCallFilter / RestrictAddressFamilies missing")
	}
	// These would hide other processes' /proc entries and blind the pid
	// prober; KillMode other than the default would orphan plugin children.
	for _, k := range []string{"ProtectProc", "ProcSubset", "KillMode"} {
		if len(d[k]) != 0 {
			t.Errorf("%s must not be set (got %q)", k, d[k])
		}
	}
}

// TestUnitStartsWithoutAConfigFile runs the unit's ExecStart as systemd
// would, with the environment systemd gives the unit (its Environment=
// lines and the RUNTIME_DIRECTORY, STATE_DIRECTORY and
// CONFIGURATION_DIRECTORY of its directory directives, here in a temporary
// root), first with no /etc/leasekeeper/agent.yaml, then with one.
func TestUnitStartsWithoutAConfigFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent")
	}
	d := directives(readUnit(t))
	if len(d["ExecStart"]) != 1 {
		t.Fatalf("ExecStart = %q, want one", d["ExecStart"])
	}
	argv := strings.Fields(d["ExecStart"][0])
	if argv[0] != "/usr/local/bin/leasekeeper" {
		t.Fatalf("ExecStart runs %q, want /usr/local/bin/leasekeeper", argv[0])
	}
	// The state directory stands in for /var/lib: on a disk, since the
	// agent refuses a board on a tmpfs without store.allow_tmpfs, which
	// the unit's defaults do not set (DESIGN.md#board-on-disk).
	root, err := agentproc.DiskTempDir("lkunit")
	if err != nil {
		t.Skipf("the unit's state directory needs a disk: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	bin := filepath.Join(root, "leasekeeper")
	if err := agentproc.CachedBuild("./cmd/leasekeeper", bin); err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{
		// directive: the variable systemd sets and the directory's parent
		"RuntimeDirectory":       "RUNTIME_DIRECTORY run",
		"StateDirectory":         "STATE_DIRECTORY var/lib",
		"ConfigurationDirectory": "CONFIGURATION_DIRECTORY etc",
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEKEEPER_") && !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			env = append(env, kv)
		}
	}
	path := map[string]string{}
	for directive, spec := range dirs {
		if len(d[directive]) != 1 {
			t.Fatalf("%s = %q, want one directory", directive, d[directive])
		}
		name, parent, _ := strings.Cut(spec, " ")
		dir := filepath.Join(root, parent, d[directive][0])
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		path[name] = dir
		env = append(env, name+"="+dir)
	}
	for _, e := range d["Environment"] {
		if k, _, _ := strings.Cut(e, "="); k == "LEASEKEEPER_SOCKET" {
			continue // the unit's absolute path; the socket is under root here
		}
		env = append(env, e)
	}
	sock := filepath.Join(path["RUNTIME_DIRECTORY"], "leasekeeper.sock")
	env = append(env, "LEASEKEEPER_SOCKET="+sock)

	start := func() (*exec.Cmd, *agentproc.Buffer, chan struct{}) {
		t.Helper()
		cmd := exec.Command(bin, argv[1:]...)
		cmd.Env, cmd.Dir = env, root
		out := &agentproc.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
		agentproc.WaitFor(t, 30*time.Second, "the agent to answer `leasekeeper health`", func() bool {
			select {
			case <-done:
				t.Fatalf("the agent exited while starting:\n%s", out)
			default:
			}
			h := exec.Command(bin, "health")
			h.Env = env
			return h.Run() == nil
		})
		return cmd, out, done
	}
	stop := func(cmd *exec.Cmd, out *agentproc.Buffer, done chan struct{}) {
		t.Helper()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatalf("the agent did not stop on SIGTERM:\n%s", out)
		}
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("the agent exited %d on SIGTERM:\n%s", code, out)
		}
	}

	status := func() (apitype.Status, string) {
		t.Helper()
		st := exec.Command(bin, "status", "--json")
		st.Env = env
		b, err := st.Output()
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		var status apitype.Status
		if err := json.Unmarshal(b, &status); err != nil {
			t.Fatal(err)
		}
		text := exec.Command(bin, "status")
		text.Env = env
		if b, err = text.Output(); err != nil {
			t.Fatalf("status: %v", err)
		}
		return status, string(b)
	}

	// Without a config file the board is in the StateDirectory, whatever
	// HOME and XDG_STATE_HOME say, and the agent says where.
	cmd, out, done := start()
	db := filepath.Join(path["STATE_DIRECTORY"], "leasekeeper.db")
	if _, err := os.Stat(db); err != nil {
		t.Errorf("no bbolt file in the state directory: %v\n%s", err, out)
	}
	st, text := status()
	if st.Backend.Path != db || !strings.Contains(text, "board file:") || !strings.Contains(text, db) {
		t.Errorf("status backend %+v, text:\n%s\nwant the board file %s", st.Backend, text, db)
	}
	if !strings.Contains(out.String(), "board_file="+db) {
		t.Errorf("the startup log does not name the board file %s:\n%s", db, out)
	}
	stop(cmd, out, done)

	// The shipped config, installed as the install steps say, is read: its
	// absolute paths moved under root, and its lease changed so the test
	// sees the file was read.
	shipped, err := os.ReadFile("agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer(
		"\nlease: 30s\n", "\nlease: 7s\n",
		" /run/leasekeeper/", " "+path["RUNTIME_DIRECTORY"]+"/",
		" /var/lib/leasekeeper/", " "+path["STATE_DIRECTORY"]+"/",
	).Replace(string(shipped))
	if strings.Contains(cfg, " /run/") || strings.Contains(cfg, " /var/") || !strings.Contains(cfg, "\nlease: 7s\n") {
		t.Fatalf("the shipped agent.yaml has paths or a lease this test does not expect:\n%s", shipped)
	}
	if err := os.WriteFile(filepath.Join(path["CONFIGURATION_DIRECTORY"], "agent.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, out, done = start()
	if st, _ := status(); st.LeaseMS != 7000 {
		t.Errorf("status lease %dms, want the config file's 7s", st.LeaseMS)
	}
	stop(cmd, out, done)
}
