package plugintest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOnlyTestsImportIt: plugintest builds binaries and fails a testing.T,
// so no package of the module imports it outside its _test.go files.
func TestOnlyTestsImportIt(t *testing.T) {
	t.Parallel()
	const mod = "github.com/leasekeeper/leasekeeper/"
	const self = mod + "plugins/internal/plugintest"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} imports:{{range .Imports}} {{.}}{{end}} tests:{{range .TestImports}} {{.}}{{end}}", mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	testedBy := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, rest, _ := strings.Cut(line, " imports:")
		imports, tests, _ := strings.Cut(rest, " tests:")
		if strings.Contains(" "+imports+" ", " "+self+" ") {
			t.Errorf("%s imports %s outside its tests", pkg, self)
		}
		if strings.Contains(" "+tests+" ", " "+self+" ") {
			testedBy++
		}
	}
	if testedBy == 0 {
		t.Fatalf("no package's tests import %s; the check reads nothing (go list said:\n%s)", self, out)
	}
}
