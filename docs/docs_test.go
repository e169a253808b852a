// Package docs_test keeps the operator's guide honest: the metrics it lists
// are the metrics a real agent serves, the routes it documents are routes a
// real agent answers (with every method the agent allows on them), the
// field names and error codes it lists are those of the wire types
// (api_fields_test.go), and its configuration examples load with the
// agent's strict loader.
package docs_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

var leasekeeperBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "docs-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	leasekeeperBin = filepath.Join(dir, "leasekeeper")
	code := 1
	if err := agentproc.CachedBuild("./cmd/leasekeeper", leasekeeperBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func read(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// freePort finds a loopback port nobody listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestMetricsDocMatchesTheAgent compares the "Series" table of METRICS.md,
// both ways, with the leasekeeper_* families agent/metrics.go registers, and
// checks that every family a real agent serves is in the table.
func TestMetricsDocMatchesTheAgent(t *testing.T) {
	t.Parallel()
	addr := freePort(t)
	a := agentproc.New(t, leasekeeperBin, "metrics: "+addr+"\n")
	a.Start()

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	served := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// "# TYPE name kind" names each family once, histograms included.
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" && strings.HasPrefix(f[2], "leasekeeper_") {
			served[f[2]] = true
		}
	}
	if len(served) == 0 {
		t.Fatal("the agent serves no leasekeeper_ metrics: the comparison would be vacuous")
	}

	doc := read(t, "METRICS.md")
	_, series, _ := strings.Cut(doc, "## Series")
	series, _, _ = strings.Cut(series, "\n## ")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(leasekeeper_[a-z_]+)`").FindAllStringSubmatch(series, -1) {
		documented[m[1]] = true
	}
	// A labelled family with no series yet (no store error so far) is not
	// served, so the source is the other reference: every family the agent
	// registers is named in agent/metrics.go.
	registered := map[string]bool{}
	for _, m := range regexp.MustCompile(`Name:\s*"(leasekeeper_[a-z_]+)"`).FindAllStringSubmatch(read(t, "../agent/metrics.go"), -1) {
		registered[m[1]] = true
	}
	for name := range served {
		if !documented[name] {
			t.Errorf("the agent serves %s but METRICS.md does not list it", name)
		}
		if !registered[name] {
			t.Errorf("the agent serves %s, which agent/metrics.go does not name; this test's reading of the source is stale", name)
		}
	}
	for name := range registered {
		if !documented[name] {
			t.Errorf("agent/metrics.go registers %s but METRICS.md does not list it", name)
		}
	}
	for name := range documented {
		if !registered[name] {
			t.Errorf("METRICS.md lists %s but agent/metrics.go registers no such metric", name)
		}
	}
}

// TestAPIDocRoutesExist sends OPTIONS (a method no route takes) to every
// route API.md documents: a known path answers 405 with an Allow header
// naming its methods, an unknown one 404. Every documented method must be
// allowed, and every allowed method documented.
func TestAPIDocRoutesExist(t *testing.T) {
	t.Parallel()
	a := agentproc.New(t, leasekeeperBin, "")
	a.Start()
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", a.Socket)
		},
	}, Timeout: 10 * time.Second}

	doc := read(t, "API.md")
	routeRE := regexp.MustCompile("`(GET|POST|PUT|PATCH|DELETE) (/v1/[^` ?]*)[^`]*`")
	methods := map[string][]string{} // path -> documented methods
	for _, m := range routeRE.FindAllStringSubmatch(doc, -1) {
		if !slices.Contains(methods[m[2]], m[1]) {
			methods[m[2]] = append(methods[m[2]], m[1])
		}
	}
	if len(methods) < 20 {
		t.Fatalf("found only %d documented paths in API.md; the pattern no longer matches the page", len(methods))
	}
	for path, documented := range methods {
		t.Run(path, func(t *testing.T) {
			concrete := regexp.MustCompile(`\{[a-z]+\}`).ReplaceAllString(path, "x")
			req, _ := http.NewRequest(http.MethodOptions, "http://leasekeeper"+concrete, nil)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Fatalf("OPTIONS %s: status %d, want 405: the agent has no such route", concrete, resp.StatusCode)
			}
			allowed := strings.Split(resp.Header.Get("Allow"), ", ")
			for _, m := range documented {
				if !slices.Contains(allowed, m) {
					t.Errorf("API.md documents %s %s; the agent allows only %v", m, path, allowed)
				}
			}
			for _, m := range allowed {
				if !slices.Contains(documented, m) {
					t.Errorf("the agent allows %s %s, which API.md does not document", m, path)
				}
			}
		})
	}
}

// TestConfigExamplesLoad loads every YAML example of the guide that is an
// agent config with the agent's strict loader.
func TestConfigExamplesLoad(t *testing.T) {
	t.Parallel()
	blockRE := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	var n int
	for _, file := range []string{"CONFIG.md", "OPERATIONS.md"} {
		for i, m := range blockRE.FindAllStringSubmatch(read(t, file), -1) {
			n++
			t.Run(fmt.Sprintf("%s#%d", file, i+1), func(t *testing.T) {
				env := agent.Environment{LookupEnv: func(string) (string, bool) { return "", false }, UID: 1000, WorkDir: "/nonexistent"}
				if _, err := agent.ParseConfig([]byte(m[1]), env); err != nil {
					t.Errorf("the agent refuses this example:\n%s\n%v", m[1], err)
				}
			})
		}
	}
	if n == 0 {
		t.Fatal("no yaml examples found")
	}
}
