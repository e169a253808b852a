package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsStdlibOnly keeps the worker client small, so linking it into a
// worker costs nothing: it may link the standard library, the wire types
// and the board domain, and nothing else — no third-party module, no other
// project package (CONTRIBUTING.md, Conventions).
func TestImportsStdlibOnly(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/leasekeeper/leasekeeper/client":  true,
		"github.com/leasekeeper/leasekeeper/apitype": true,
		"github.com/leasekeeper/leasekeeper/board":   true,
	}
	var seen int
	for _, pkg := range strings.Fields(string(out)) {
		seen++
		if !allowed[pkg] {
			t.Errorf("client depends on %s; only the standard library, apitype and board are allowed", pkg)
		}
	}
	if seen == 0 {
		t.Fatal("go list reported no packages at all; the check would pass vacuously")
	}
}
