// Package systemd_test checks the shipped unit file with systemd's own
// verifier, so a typo in a directive fails CI rather than an operator's boot.
package systemd_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
