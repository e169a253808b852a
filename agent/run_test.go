package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// running is an agent started with Run in this process: the real wiring,
// a real bbolt file, a real Unix socket.
type running struct {
	dir     string
	socket  string
	metrics string // the metrics address, when asked for
	cancel  context.CancelFunc
	done    chan error
	ready   chan struct{}     // closed once the agent reported itself ready
	logs    *agentproc.Buffer // the agent's log, for a failing test's report
}

type runOpts struct {
	// yaml is appended to the socket and store keys.
	yaml string
	// metrics serves the metrics on a free loopback port.
	metrics bool
	// seed prepares the bbolt file before the agent opens it.
	seed func(t *testing.T, s *boltstore.Store)
	// seedClock, when set, is the clock of the store seed writes with: a
	// clock in the past seeds leases that ended before the agent starts.
	seedClock board.Clock
	// noWait returns as soon as Run is started, before the agent is
	// ready, for tests that watch the start themselves.
	noWait bool
	// dbPath is the bbolt file; empty: board.db in the test's directory.
	dbPath string
	// refuseTmpfs leaves store.allow_tmpfs unset, as an operator's config
	// would. Otherwise the fixture opts in: its temporary directory may be
	// on a tmpfs, and its board is meant to be lost (DESIGN.md#board-on-disk).
	refuseTmpfs bool
	// store, when set, is the store key's YAML value in place of the
	// bbolt file (a MongoDB fleet's, say); seed and dbPath are then unused.
	store string
	// boardCountEvery is the cadence of the board-wide metrics; 0: the
	// agent's default.
	boardCountEvery time.Duration
}

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startRun runs the agent until the test ends and returns once it reported
// itself ready (Options.Ready).
func startRun(t *testing.T, o runOpts) *running {
	t.Helper()
	// Unix socket paths are limited to about 100 bytes: t.TempDir() names
	// can be longer than that.
	dir, err := os.MkdirTemp("", "lk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	r := &running{dir: dir, socket: filepath.Join(dir, "lk.sock"), done: make(chan error, 1), logs: &agentproc.Buffer{}}
	dbPath := o.dbPath
	if dbPath == "" {
		dbPath = filepath.Join(dir, "board.db")
	}
	if o.seed != nil {
		s, err := boltstore.Open(dbPath, boltstore.Options{Clock: o.seedClock})
		if err != nil {
			t.Fatal(err)
		}
		o.seed(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	yaml := fmt.Sprintf("socket: %s\nstore: {path: %s, allow_tmpfs: true}\n", r.socket, dbPath)
	if o.refuseTmpfs {
		yaml = fmt.Sprintf("socket: %s\nstore: {path: %s}\n", r.socket, dbPath)
	}
	if o.store != "" {
		yaml = fmt.Sprintf("socket: %s\nstore: %s\n", r.socket, o.store)
	}
	if o.metrics {
		r.metrics = freeAddr(t)
		yaml += "metrics: " + r.metrics + "\n"
	}
	yaml += o.yaml
	env := Environment{LookupEnv: func(string) (string, bool) { return "", false }, UID: os.Getuid(), WorkDir: dir}
	cfg, err := ParseConfig([]byte(yaml), env)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yaml)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	ready := make(chan struct{})
	r.ready = ready
	go func() {
		r.done <- Run(ctx, cfg, Options{
			Env:       env,
			LogOutput: r.logs,
			Version:   "test-version",
			Ready:     func() { close(ready) },

			boardCountEvery: o.boardCountEvery,
		})
	}()
	t.Cleanup(func() {
		r.stop(t)
		if t.Failed() {
			t.Logf("agent log:\n%s", r.logs.String())
		}
	})
	if o.noWait {
		return r
	}
	select {
	case <-ready:
	case err := <-r.done:
		r.done <- err
		t.Fatalf("agent stopped during start: %v\n%s", err, r.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("agent not ready after 30s:\n%s", r.logs.String())
	}
	return r
}

// stop cancels the agent and waits for Run to return; a second call
// returns the same result.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("agent did not stop within 30s:\n%s", r.logs.String())
		return nil
	}
}

func (r *running) client() *client.Client { return &client.Client{Socket: r.socket} }

func (r *running) status(t *testing.T) apitype.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r.client().Status(ctx)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return st
}

// waitStatus polls the status until cond holds. The heartbeat and the
// reaper run on real timers; their results can only be observed.
func (r *running) waitStatus(t *testing.T, bound time.Duration, what string, cond func(apitype.Status) bool) apitype.Status {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		st := r.status(t)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last status: %+v", bound, what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrape reads the metrics endpoint over HTTP and parses the text format.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the scrape: %v", err)
	}
	return fams
}

// sample finds the series of name whose labels include want.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (*dto.Metric, bool) {
	f, ok := fams[name]
	if !ok {
		return nil, false
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
				break
			}
		}
		if match {
			return m, true
		}
	}
	return nil, false
}

// value is the value of a counter or gauge series; -1 when absent.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	m, ok := sample(fams, name, labels)
	if !ok {
		return -1
	}
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return -1
}

// sum adds every series of a counter family.
func sum(fams map[string]*dto.MetricFamily, name string) float64 {
	var total float64
	for _, m := range fams[name].GetMetric() {
		total += m.GetCounter().GetValue()
	}
	return total
}
