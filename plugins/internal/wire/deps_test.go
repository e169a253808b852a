package wire

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTheSidesDoNotImportEachOther: each side of the boundary links the
// shared wire code and not the other side's (DESIGN.md#plugin-sides): the
// agent's (package plugins) carries no plugin server, a store plugin's
// binary (package plugins/serve) no supervisor, and neither can reach
// into the other's unexported code. Only the agent side's tests join the
// two, to run both ends in one process.
func TestTheSidesDoNotImportEachOther(t *testing.T) {
	t.Parallel()
	const mod = "github.com/leasekeeper/leasekeeper/"
	for _, side := range []struct{ pkg, other string }{
		{"plugins", "plugins/serve"},
		{"plugins/serve", "plugins"},
	} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+side.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", side.pkg, err, out)
		}
		deps := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			deps[p] = true
		}
		if !deps[mod+"plugins/internal/wire"] {
			t.Fatalf("%s does not depend on plugins/internal/wire; the check reads nothing (go list said:\n%s)", side.pkg, out)
		}
		if deps[mod+side.other] {
			t.Errorf("%s depends on %s, the other side of the boundary: what both sides need belongs in plugins/internal/wire", side.pkg, side.other)
		}
	}
}
