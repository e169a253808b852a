// Package plugintest is what the tests of both sides of the plugin
// boundary (plugins and plugins/serve) share: the test plugin binary, built
// once per test run, and the helpers that watch a real plugin process. Only
// _test.go files import it.
package plugintest

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// binDir holds the binaries the tests build once per test run.
var binDir string

// Main runs a test binary's tests with a fresh binDir, removed afterwards;
// a test package's TestMain calls it.
func Main(m *testing.M) {
	// The binaries first, where they may be run: a tmpfs such as /dev/shm
	// is often mounted noexec.
	dir, err := os.MkdirTemp("", "plugintest-bin-")
	if err != nil {
		panic(err)
	}
	agentproc.MemoryTempDir()
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
)

// Binary builds plugins/internal/testplugin, a real bbolt store behind
// serve.Serve (without the race detector: the plugin is a separate
// process, and the build is faster), and returns its path. The test
// binary's TestMain must call Main.
func Binary(t testing.TB) string {
	t.Helper()
	if binDir == "" {
		t.Fatal("plugintest.Binary: the test package's TestMain does not call plugintest.Main")
	}
	bin := filepath.Join(binDir, "testplugin")
	buildOnce.Do(func() {
		buildErr = agentproc.CachedBuild("./plugins/internal/testplugin", bin)
	})
	if buildErr != nil {
		t.Fatalf("building the test plugin: %v", buildErr)
	}
	return bin
}

// ReadLines sends the lines of r to a channel.
func ReadLines(r io.Reader) <-chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}
