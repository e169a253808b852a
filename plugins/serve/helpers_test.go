package serve

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// binDir holds the binaries the tests build once per test run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "serve-test-bin-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
	buildOut  []byte
)

// testPluginBinary builds plugins/internal/testplugin, a real bbolt store
// behind Serve (without the race detector: the plugin is a separate
// process, and the build is faster), and returns its path.
func testPluginBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(binDir, "testplugin")
	buildOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", bin, "../internal/testplugin")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("building the test plugin: %v\n%s", buildErr, buildOut)
	}
	return bin
}
