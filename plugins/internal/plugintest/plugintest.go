// Package plugintest is what the tests of both sides of the plugin
// boundary (plugins and plugins/serve) share: the test plugin binary, built
// once per test run, and the helpers that watch a real plugin process. Only
// _test.go files import it.
package plugintest

import (
	"bufio"
	"io"
	"testing"

	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// binary is the test plugin's path, set by Main.
var binary string

// Main is a test package's TestMain: it builds the test plugin
// (plugins/internal/testplugin, a real bbolt store behind serve.Serve) into
// a temporary directory, keeps the tests' scratch files in memory, runs the
// tests and removes the directory (agentproc.MainInMemory). The plugin is
// built without the race detector: it is a separate process, and the build
// is faster.
func Main(m *testing.M) {
	agentproc.MainInMemory(m, map[string]*string{"./plugins/internal/testplugin": &binary})
}

// Binary returns the path of the test plugin Main built. The test
// binary's TestMain must call Main.
func Binary(t testing.TB) string {
	t.Helper()
	if binary == "" {
		t.Fatal("plugintest.Binary: the test package's TestMain does not call plugintest.Main")
	}
	return binary
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
