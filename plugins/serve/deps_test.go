package serve

import (
	"os/exec"
	"strings"
	"testing"
)

// TestServeDoesNotImportTheAgentSide: the plugin's side of the boundary
// links the shared wire code and not the agent's (package plugins), so a
// store plugin's binary carries no supervisor, and neither side can reach
// into the other's unexported code (DESIGN.md#plugin-boundary).
func TestServeDoesNotImportTheAgentSide(t *testing.T) {
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
		t.Fatalf("plugins/serve does not depend on plugins/internal/wire; the check reads nothing (go list said:\n%s)", out)
	}
	if deps[mod+"plugins"] {
		t.Errorf("plugins/serve depends on plugins, the agent's side of the boundary: what both sides need belongs in plugins/internal/wire")
	}
}
