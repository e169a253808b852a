package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/pidprobe"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

// allowedLabels are the only label names the agent's own series may carry:
// each takes a handful of values. A card id, a marker or a pid as a label
// would grow the series with the board and the fleet.
var allowedLabels = map[string]bool{
	"result": true, "reason": true, "verb": true, "op": true, "gate": true,
	"action": true, "outcome": true, "sweep": true, "version": true, "goversion": true,
	// state: a state of the board definition; status: a run verdict.
	"state": true, "status": true,
}

func checkLabels(t *testing.T, fams map[string]map[string]bool) {
	t.Helper()
	for name, labels := range fams {
		for l := range labels {
			if !allowedLabels[l] {
				t.Errorf("metric %s has label %q: only bounded labels are allowed", name, l)
			}
		}
	}
}

// TestMetricsAfterRealOperations drives a real agent (bbolt file, Unix
// socket, heartbeat and reaper on their timers) through real operations and
// reads the results from a real scrape of its metrics endpoint.
func TestMetricsAfterRealOperations(t *testing.T) {
	t.Parallel()
	r := startRun(t, runOpts{
		yaml:    "lease: 3s\nreaper: {enabled: true}\n",
		metrics: true,
		seed: func(t *testing.T, s *boltstore.Store) {
			// The boot sweep expires the dead worker's claim; the reaper's
			// first pass then releases it (no run was ever recorded).
			seedDeadClaim(t, s)
			if _, err := s.CreateCard(context.Background(), board.CreateCardParams{ID: "work"}); err != nil {
				t.Fatal(err)
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := r.client()

	cl, err := c.Claim(ctx, "work")
	if err != nil {
		t.Fatalf("claim work: %v", err)
	}
	// Nothing else is claimable: "orphan" sits in backlog, outside the pool.
	if _, err := c.ClaimNext(ctx); !errors.Is(err, board.ErrNotFound) {
		t.Fatalf("claim-next on an empty pool: %v, want ErrNotFound", err)
	}
	st := r.waitStatus(t, 20*time.Second, "a tick renewing the claim and the startup reaper pass", func(st apitype.Status) bool {
		return st.Heartbeat.LastTick != nil && st.Heartbeat.LastTick.Renewed == 1 && st.Reaper.LastPass != nil
	})
	if got, want := st.Reaper.LastPass.Actions["release"], 1; got != want {
		t.Fatalf("startup pass released %d claims, want %d: %+v", got, want, st.Reaper.LastPass)
	}
	// An operator's dry run is a question: it must not count as work done.
	if _, err := c.ReaperPass(ctx, true); err != nil {
		t.Fatalf("dry run: %v", err)
	}

	fams := scrape(t, r.metrics)
	labels := map[string]map[string]bool{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "leasekeeper_") {
			continue
		}
		labels[name] = map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[name][l.GetName()] = true
			}
		}
	}
	checkLabels(t, labels)

	ticks := sum(fams, "leasekeeper_heartbeat_ticks_total")
	cases := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{"one claim held", "leasekeeper_claims_held", nil, 1},
		{"one claim granted", "leasekeeper_claim_acquisitions_total", map[string]string{"result": "granted"}, 1},
		{"claim-next found nothing", "leasekeeper_claim_acquisitions_total", map[string]string{"result": "not_found"}, 1},
		{"no conflict", "leasekeeper_claim_acquisitions_total", map[string]string{"result": "conflict"}, 0},
		{"boot sweep expired the dead worker's claim", "leasekeeper_sweeps_total", map[string]string{"sweep": "boot", "outcome": "expired"}, 1},
		{"the startup pass, not the dry run", "leasekeeper_reaper_passes_total", map[string]string{"gate": "on"}, 1},
		{"no pass with the gate off", "leasekeeper_reaper_passes_total", map[string]string{"gate": "off"}, 0},
		{"the orphan released", "leasekeeper_reaper_decisions_total", map[string]string{"action": "release", "outcome": "released"}, 1},
		{"gate on", "leasekeeper_reaper_enabled", nil, 1},
		{"no fence rejection", "leasekeeper_fence_rejections_total", map[string]string{"verb": "release_owned"}, 0},
		{"build info", "leasekeeper_build_info", map[string]string{"version": "test-version", "goversion": runtime.Version()}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := value(fams, tc.metric, tc.labels); got != tc.want {
				t.Errorf("%s%v = %v, want %v", tc.metric, tc.labels, got, tc.want)
			}
		})
	}
	if ok := value(fams, "leasekeeper_heartbeat_ticks_total", map[string]string{"result": "ok"}); ok < 1 {
		t.Errorf("ok ticks = %v, want at least the one that renewed", ok)
	}
	if got := value(fams, "leasekeeper_renewals_total", nil); got < 1 {
		t.Errorf("renewals = %v, want at least 1", got)
	}
	if got, want := histCount(t, fams, "leasekeeper_heartbeat_tick_duration_seconds"), ticks; got != want {
		t.Errorf("tick durations observed %v times, want one per tick (%v)", got, want)
	}
	if got, want := histCount(t, fams, "leasekeeper_reaper_pass_duration_seconds"), 1.0; got != want {
		t.Errorf("pass durations observed %v times, want %v", got, want)
	}
	if got := sum(fams, "leasekeeper_store_errors_total"); got != 0 {
		t.Errorf("store errors = %v, want 0 (not found and conflicts are answers, not errors)", got)
	}
	if _, ok := fams["leasekeeper_store_plugin_restarts_total"]; ok {
		t.Error("plugin restarts exported for an in-process store")
	}
	for _, std := range []string{"go_goroutines", "process_start_time_seconds"} {
		if _, ok := fams[std]; !ok {
			t.Errorf("standard series %s missing", std)
		}
	}

	// The held gauge is read at scrape time, not at the last tick.
	if err := cl.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if got := value(scrape(t, r.metrics), "leasekeeper_claims_held", nil); got != 0 {
		t.Errorf("claims held after the release = %v, want 0", got)
	}
}

func histCount(t *testing.T, fams map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok || len(f.GetMetric()) != 1 {
		t.Fatalf("histogram %s missing", name)
	}
	return float64(f.GetMetric()[0].GetHistogram().GetSampleCount())
}

// TestMeteredStoreCountsAtTheStore drives the metered wrapper over a real
// bbolt store and scrapes its registry over HTTP.
func TestMeteredStoreCountsAtTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	host, err := pidprobe.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics("v", func() int { return 0 }, func() bool { return false })
	s := meteredStore{inner: raw, m: m}
	srv := httptest.NewServer(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)

	alice, bob := board.WorkerMarker(host, 101), board.WorkerMarker(host, 202)
	for _, id := range []string{"a", "b"} {
		if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// Claim, release and claim again, so a stale epoch exists.
	card, err := s.Claim(ctx, board.ClaimParams{Card: "a", Marker: alice, Lease: time.Minute})
	first := card.Token()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseOwned(ctx, board.OwnedParams{Card: "a", Token: first}); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Claim(ctx, board.ClaimParams{Card: "a", Marker: alice, Lease: time.Minute})
	tok := claimed.Token()
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		do      func() error
		wantErr error
	}{
		{"bob claims alice's card", func() error {
			_, err := s.Claim(ctx, board.ClaimParams{Card: "a", Marker: bob, Lease: time.Minute})
			return err
		}, board.ErrClaimConflict},
		{"claim an unknown card", func() error {
			_, err := s.Claim(ctx, board.ClaimParams{Card: "nope", Marker: bob, Lease: time.Minute})
			return err
		}, board.ErrNotFound},
		{"claim with a malformed marker", func() error {
			_, err := s.Claim(ctx, board.ClaimParams{Card: "b", Marker: "no-pid-here-", Lease: time.Minute})
			return err
		}, board.ErrInvalidArgument},
		{"bob claims the next free card", func() error {
			_, err := s.ClaimNext(ctx, board.ClaimNextParams{Marker: bob, Lease: time.Minute})
			return err
		}, nil},
		{"claim-next on an empty pool", func() error {
			_, err := s.ClaimNext(ctx, board.ClaimNextParams{Marker: bob, Lease: time.Minute})
			return err
		}, board.ErrNotFound},
		{"a stale epoch releases", func() error {
			return s.ReleaseOwned(ctx, board.OwnedParams{Card: "a", Token: first})
		}, board.ErrClaimConflict},
		{"bob moves alice's card", func() error {
			_, err := s.SetStateOwned(ctx, board.SetStateOwnedParams{Card: "a", Token: board.ClaimToken{Marker: bob, Epoch: tok.Epoch}, To: board.StateInProgress})
			return err
		}, board.ErrClaimConflict},
		{"alice's own write passes the fence", func() error {
			_, err := s.SetStateOwned(ctx, board.SetStateOwnedParams{Card: "a", Token: tok, To: board.StateInProgress})
			return err
		}, nil},
		{"read an unknown card", func() error {
			_, err := s.GetCard(ctx, board.GetCardParams{ID: "nope"})
			return err
		}, board.ErrNotFound},
	}
	for _, st := range steps {
		if err := st.do(); !errors.Is(err, st.wantErr) || (st.wantErr == nil && err != nil) {
			t.Fatalf("%s: %v, want %v", st.name, err, st.wantErr)
		}
	}
	// A closed store fails every call: those are store errors.
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetCard(ctx, board.GetCardParams{ID: "a"}); err == nil {
		t.Fatal("read from a closed store succeeded")
	}
	if _, err := s.RenewClaims(ctx, board.RenewClaimsParams{Holds: []board.Hold{{Card: "a", Token: tok}}, Lease: time.Minute}); err == nil {
		t.Fatal("renewal on a closed store succeeded")
	}

	fams := scrape(t, strings.TrimPrefix(srv.URL, "http://"))
	cases := []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"leasekeeper_claim_acquisitions_total", map[string]string{"result": "granted"}, 3},
		{"leasekeeper_claim_acquisitions_total", map[string]string{"result": "conflict"}, 1},
		{"leasekeeper_claim_acquisitions_total", map[string]string{"result": "not_found"}, 2},
		{"leasekeeper_claim_acquisitions_total", map[string]string{"result": "error"}, 1},
		{"leasekeeper_fence_rejections_total", map[string]string{"verb": "release_owned"}, 1},
		{"leasekeeper_fence_rejections_total", map[string]string{"verb": "set_state_owned"}, 1},
		{"leasekeeper_fence_rejections_total", map[string]string{"verb": "set_last_run_owned"}, 0},
		{"leasekeeper_store_errors_total", map[string]string{"op": "get_card"}, 1},
		{"leasekeeper_store_errors_total", map[string]string{"op": "renew_claims"}, 1},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s%v", tc.metric, tc.labels), func(t *testing.T) {
			if got := value(fams, tc.metric, tc.labels); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	// Only the closed store's two failures are store errors: conflicts,
	// not-found and invalid arguments are the contract's answers.
	if got, want := sum(fams, "leasekeeper_store_errors_total"), 2.0; got != want {
		t.Errorf("store errors = %v, want %v", got, want)
	}
}

func TestIsStoreError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"not found", board.NotFound("card", "x"), false},
		{"claim conflict", board.Conflict("x", "h-2", 3), false},
		{"terminal exit", fmt.Errorf("move: %w", board.ErrTerminalStateExit), false},
		{"invalid argument", board.Invalid("bad"), false},
		{"already exists", board.ErrAlreadyExists, false},
		{"caller went away", fmt.Errorf("rpc: %w", context.Canceled), false},
		{"timed out", fmt.Errorf("rpc: %w", context.DeadlineExceeded), true},
		{"outcome unknown", board.ErrOutcomeUnknown, true},
		{"anything else", errors.New("disk on fire"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := isStoreError(tc.err); got != tc.want {
				t.Errorf("isStoreError(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// The metrics listener answers only requests addressed to it by an IP, by
// localhost or by this machine's host name: a page a browser loads under
// another name that resolves here (DNS rebinding) is refused.
func TestMetricsRefuseForeignHostNames(t *testing.T) {
	t.Parallel()
	m := newMetrics("v", func() int { return 0 }, func() bool { return false })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	if err := m.serve(t.Context(), addr, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	host, _ := os.Hostname()
	for _, tc := range []struct {
		host string
		want int
	}{
		{addr, http.StatusOK},
		{"localhost:" + port, http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
		{host + ":" + port, http.StatusOK},
		{"rebind.attacker.example:" + port, http.StatusMisdirectedRequest},
		{host + ".attacker.example:" + port, http.StatusMisdirectedRequest},
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		// serve returned with the socket listening: the kernel queues the
		// connection until the server goroutine accepts it.
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Host %q: %d, want %d", tc.host, resp.StatusCode, tc.want)
		}
	}
}

// TestOnlyAWriteIsTheLastWrite: the health check's last write is the
// outcome of a write through the metered store; a read (marked
// //storegen:read in board.Store) and a renewal leave it alone, a failed
// read included.
func TestOnlyAWriteIsTheLastWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	raw, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	m := newMetrics("v", func() int { return 0 }, func() bool { return false })
	s := meteredStore{inner: raw, m: m}
	if _, err := s.CreateCard(ctx, board.CreateCardParams{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	w := m.lastWrite.Load()
	if w == nil || w.Op != "create_card" || !w.OK {
		t.Fatalf("last write after CreateCard = %+v, want create_card, ok", w)
	}
	if _, err := s.GetCard(ctx, board.GetCardParams{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListCards(ctx, board.ListCardsParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RenewClaims(ctx, board.RenewClaimsParams{Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if _, err := s.GetCard(ctx, board.GetCardParams{ID: "a"}); err == nil {
		t.Fatal("GetCard on a closed store succeeded")
	}
	if got := m.lastWrite.Load(); got != w {
		t.Errorf("last write after reads and a renewal = %+v, want still %+v", got, w)
	}
	if err := s.SetState(ctx, board.MoveParams{Card: "a", To: board.StateDone}); err == nil {
		t.Fatal("SetState on a closed store succeeded")
	}
	if got := m.lastWrite.Load(); got == nil || got.Op != "set_state" || got.OK {
		t.Errorf("last write after a failed SetState = %+v, want set_state, failed", got)
	}
}
