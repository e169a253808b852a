package plugins

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTheAgentSideDoesNotImportServe: the agent's side of the boundary
// links the shared wire code and not the plugin's (plugins/serve); only
// its tests join the two, to run both ends in one process
// (DESIGN.md#plugin-boundary).
func TestTheAgentSideDoesNotImportServe(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	const mod = "github.com/leasekeeper/leasekeeper/"
	if !deps[mod+"plugins/internal/wire"] {
		t.Fatalf("plugins does not depend on plugins/internal/wire; the check reads nothing (go list said:\n%s)", out)
	}
	if deps[mod+"plugins/serve"] {
		t.Errorf("plugins depends on plugins/serve, the plugin's side of the boundary: what both sides need belongs in plugins/internal/wire")
	}
}
