package main

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

func TestUnhealthy(t *testing.T) {
	t.Parallel()
	healthy := func() apitype.Status {
		return apitype.Status{
			LeaseMS: 30_000,
			Store:   apitype.StoreHealth{Reachable: true},
			Heartbeat: apitype.HeartbeatInfo{
				IntervalMS: 10_000,
				LastTick:   &apitype.HeartbeatTick{AgoMS: 9_000, Result: "ok"},
			},
		}
	}
	cases := []struct {
		name   string
		change func(*apitype.Status)
		want   string // a substring of the reason; "" means healthy
	}{
		{"serving", func(*apitype.Status) {}, ""},
		{"no tick yet (just started)", func(st *apitype.Status) { st.Heartbeat.LastTick = nil }, ""},
		{"a tick slowed by the store, within a lease and an interval", func(st *apitype.Status) { st.Heartbeat.LastTick.AgoMS = 40_000 }, ""},
		{"heartbeat stalled", func(st *apitype.Status) { st.Heartbeat.LastTick.AgoMS = 40_001 }, "heartbeat loop stalled"},
		{"store unreachable", func(st *apitype.Status) {
			st.Store = apitype.StoreHealth{Error: "store plugin: get_card: unavailable"}
		}, "store unreachable: store plugin: get_card: unavailable"},
		{"shutting down", func(st *apitype.Status) { st.Draining = true }, "shutting down"},
		{"the last write failed", func(st *apitype.Status) {
			st.Store.LastWrite = &apitype.WriteInfo{Op: "create_card", Error: "no space left on device"}
		}, "store refuses writes: its last one (create_card) failed: no space left on device"},
		{"the last write succeeded", func(st *apitype.Status) {
			st.Store.LastWrite = &apitype.WriteInfo{Op: "create_card", OK: true}
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := healthy()
			tc.change(&st)
			got := st.Unhealthy()
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("Unhealthy() = %q, want %q", got, tc.want)
			}
		})
	}
}

// health runs `leasekeeper health` and checks it printed at most one line
// on stderr, as container runtimes log it.
func (e *env) health() (code int, reason string) {
	e.t.Helper()
	out, errs, code := e.Run("health")
	if code == 0 && strings.TrimSpace(out) != "ok" {
		e.t.Errorf("health exit 0 printed %q, want ok", out)
	}
	if n := strings.Count(strings.TrimRight(errs, "\n"), "\n"); n > 0 {
		e.t.Errorf("health reason spans %d lines, want one: %q", n+1, errs)
	}
	return code, strings.TrimSpace(errs)
}

// TestE2EHealthAndStatus runs the real agent (its store in a plugin
// process, as installed) and probes it the way Docker and an operator do,
// through faults made with real signals: a frozen store plugin, a killed
// one, a stopped agent.
func TestE2EHealthAndStatus(t *testing.T) {
	t.Parallel()
	metricsAddr := freeAddr(t)
	// The long interval: the passes after the startup one are the one the
	// claimer's death wakes and the operator's.
	e := newEnv(t, "lease: 3s\nreaper: {enabled: true, interval: 1h}\nmetrics: "+metricsAddr+"\n")
	a := e.Start()
	if code, why := e.health(); code != 0 {
		t.Fatalf("health of a serving agent: exit %d (%s), want 0", code, why)
	}

	// A claim held while the status is read, then its claimer killed so
	// the reaper has something to decide.
	e.MustRun("card", "create", "c1")
	claim := e.startClaim("c1", "--", "sh", "-c", workerScript, "sh", "worker.pid")
	workerPID := e.workerPID("worker.pid")
	var st apitype.Status
	agentproc.WaitFor(t, 10*time.Second, "a heartbeat tick renewing the claim", func() bool {
		st = e.Status()
		return st.ClaimsHeld == 1 && st.Heartbeat.LastTick != nil && st.Heartbeat.LastTick.Renewed == 1
	})
	if !st.Store.Reachable || st.Store.Error != "" {
		t.Errorf("store = %+v, want reachable", st.Store)
	}
	if p := st.Store.Plugin; p == nil || p.State != "up" || p.PID <= 0 || p.Restarts != 0 {
		t.Fatalf("plugin = %+v, want up with a pid and no restarts", p)
	}
	// The built-in store runs in this binary, re-executed.
	self, err := filepath.EvalSymlinks(binary)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(e.Dir, "board.db")
	if want := (apitype.Backend{Name: "bolt", Plugin: self, Path: db}); st.Backend != want {
		t.Errorf("backend = %+v, want %+v", st.Backend, want)
	}
	if out := e.MustRun("status"); !strings.Contains(out, "bolt (plugin "+self+")") || !strings.Contains(out, "board file:") || !strings.Contains(out, " "+db+"\n") {
		t.Errorf("status does not name the store, its plugin and the board file %s:\n%s", db, out)
	}
	if log := a.Log(); !strings.Contains(log, "board_file="+db) {
		t.Errorf("the startup log does not name the board file %s:\n%s", db, log)
	}
	if got, want := st.Heartbeat.LastTick.Result, "ok"; got != want {
		t.Errorf("last tick result = %q, want %q", got, want)
	}
	if got, want := st.Heartbeat.IntervalMS, int64(1000); got != want {
		t.Errorf("heartbeat interval = %dms, want %dms", got, want)
	}
	if st.LeaseMS != 3000 || st.Liveness != "pid" || !st.Reaper.Enabled {
		t.Errorf("lease %dms, liveness %q, gate %v; want 3000ms, pid, on", st.LeaseMS, st.Liveness, st.Reaper.Enabled)
	}
	if st.Reaper.LastPass == nil {
		t.Error("no last reaper pass: the startup pass runs at once")
	}

	_ = syscall.Kill(workerPID, syscall.SIGKILL)
	if err := claim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	claim.wait(t, 5*time.Second)
	// The heartbeat sees the claimer's pid gone, expires the lease and
	// wakes the reaper, whose pass decides the card at once
	// (DESIGN.md#owner-dead). The dead claimer's run is orphaned, a
	// retryable failure: the pass returns c1 to the pool for another
	// attempt (DESIGN.md#retries).
	agentproc.WaitFor(t, 15*time.Second, "the pass the claimer's death wakes to decide c1", func() bool {
		st = e.Status()
		p := st.Reaper.LastPass
		return p != nil && p.Actions["repark"] == 1
	})
	if pass := st.Reaper.LastPass; pass.Gated {
		t.Fatalf("last pass = %+v, want the woken pass deciding repark for c1 with the gate on", pass)
	}
	if got, want := e.Card("c1").State, board.StateReady; got != want {
		t.Errorf("c1 state = %q, want %q", got, want)
	}
	text := e.MustRun("status")
	for _, want := range []string{"store reachable:", "yes", "store plugin:", "up, pid", "0 restarts",
		"reaper:", "gate on", "last reaper pass:", "decided repark 1", "last tick:", "claims held:"} {
		if !strings.Contains(text, want) {
			t.Errorf("status output lacks %q:\n%s", want, text)
		}
	}
	if got, want := scrape(t, metricsAddr), `leasekeeper_reaper_decisions_total{action="repark",outcome="filed"} 1`; !strings.Contains(got, want) {
		t.Errorf("metrics do not contain %q", want)
	}

	// A frozen store: the agent answers, the store does not.
	pluginPID := st.Store.Plugin.PID
	if err := syscall.Kill(pluginPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	code, why := e.health()
	frozenStatus := e.MustRun("status")
	_ = syscall.Kill(pluginPID, syscall.SIGCONT)
	if code != 1 || !strings.Contains(why, "store unreachable") {
		t.Errorf("health with a frozen store: exit %d %q, want 1 naming the store", code, why)
	}
	// The probe is a read: it timed out, and nothing was written, so
	// there is no outcome of a write to be unsure of.
	for _, said := range []string{why, frozenStatus} {
		if !strings.Contains(said, "did not answer a read within 2s") {
			t.Errorf("with a frozen store, %q does not say the store did not answer the read in time", said)
		}
		for _, wrong := range []string{"landed", "outcome unknown"} {
			if strings.Contains(said, wrong) {
				t.Errorf("with a frozen store, %q speaks of a write (%q)", said, wrong)
			}
		}
	}
	agentproc.WaitFor(t, 20*time.Second, "health to recover once the store runs again", func() bool {
		code, _ := e.health()
		return code == 0
	})

	// A killed store plugin is restarted; status shows the restart and
	// the crash it recovered from.
	pluginPID = e.Status().Store.Plugin.PID
	if err := syscall.Kill(pluginPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	agentproc.WaitFor(t, 20*time.Second, "the store plugin to be restarted", func() bool {
		st = e.Status()
		p := st.Store.Plugin
		return p != nil && p.State == "up" && p.PID != pluginPID && st.Store.Reachable
	})
	if p := st.Store.Plugin; p.Restarts < 1 || p.LastError == "" {
		t.Errorf("plugin after a crash = %+v, want a restart counted and the crash as last error", p)
	}
	if got := seriesValue(t, scrape(t, metricsAddr), "leasekeeper_store_plugin_restarts_total"); got < 1 {
		t.Errorf("leasekeeper_store_plugin_restarts_total = %v, want at least 1", got)
	}
	if code, why := e.health(); code != 0 {
		t.Errorf("health after the restart: exit %d (%s), want 0", code, why)
	}

	// A stopped agent.
	if err := a.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-a.Done()
	if code, why := e.health(); code != 1 || !strings.Contains(why, "cannot reach the agent") {
		t.Errorf("health of a stopped agent: exit %d %q, want 1 naming the socket", code, why)
	}
}

// seriesValue reads the value of one label-less series from a scrape.
func seriesValue(t *testing.T, scraped, series string) float64 {
	t.Helper()
	for _, l := range strings.Split(scraped, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("series %s: %v", series, err)
			}
			return f
		}
	}
	t.Fatalf("series %s not in the scrape:\n%s", series, scraped)
	return 0
}

// The JSON field names are what scripts and the docs rely on.
func TestStatusJSONFieldNames(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(apitype.Status{
		Store:     apitype.StoreHealth{Reachable: true, Plugin: &apitype.PluginInfo{State: "up"}},
		Heartbeat: apitype.HeartbeatInfo{LastTick: &apitype.HeartbeatTick{Result: "ok"}},
		Reaper:    apitype.ReaperInfo{LastPass: &apitype.ReaperPass{Actions: map[string]int{"keep": 1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"store":{"reachable":true`, `"plugin":{"state":"up"`, `"restarts":0`,
		`"heartbeat":{"interval_ms":0,"last_tick":{`, `"result":"ok"`, `"claims_held":0`,
		`"last_pass":{`, `"actions":{"keep":1}`, `"duration_ms"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("status JSON lacks %s:\n%s", want, b)
		}
	}
}
