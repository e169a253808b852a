package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/plugins"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// Label values of the metrics. Every label of every series is drawn from a
// small fixed set: a card id, a marker or a pid would make the number of
// series grow with the board and the fleet, which a Prometheus server
// scraping every agent of a fleet cannot afford.
const (
	// Heartbeat tick results.
	tickOK    = "ok"    // the store answered the renewal batch
	tickIdle  = "idle"  // nothing was held: no store call
	tickError = "error" // the renewal batch failed (nothing confirmed)

	// Acquisition results.
	acquireGranted  = "granted"
	acquireConflict = "conflict"  // another marker holds the card
	acquireNotFound = "not_found" // no such card, or no claimable card for claim-next
	acquireError    = "error"     // invalid request or store failure

	// Sweep names: the boot sweep of the agent and the reaper's two
	// ungated repair sweeps.
	sweepBoot = "boot"
)

// ownerVerbs are the owner writes whose ErrClaimConflict refusals count as
// fence rejections: the compare-and-set on (claim, claim_epoch) refused a
// stale or foreign token.
var ownerVerbs = []string{
	"set_state_owned", "set_last_run_owned", "set_awaiting_input_owned",
	"set_gave_up_owned", "expire_claim_owned", "release_owned",
}

// metrics are the agent's Prometheus series, served on the optional
// `metrics` TCP address. Their own registry keeps them free of whatever
// else the process registers globally.
type metrics struct {
	reg *prometheus.Registry
	// lastWrite is the outcome of the last store write (meteredStore).
	lastWrite atomic.Pointer[WriteOutcome]

	acquisitions *prometheus.CounterVec
	ticks        *prometheus.CounterVec
	tickDuration prometheus.Histogram
	renewed      prometheus.Counter
	lost         *prometheus.CounterVec
	fence        *prometheus.CounterVec
	storeErrors  *prometheus.CounterVec
	passes       *prometheus.CounterVec
	passDuration prometheus.Histogram
	decisions    *prometheus.CounterVec
	sweeps       *prometheus.CounterVec
	runsFinished *prometheus.CounterVec
	retries      *prometheus.CounterVec
	runDuration  *prometheus.HistogramVec
	// claims remembers when each held claim was acquired, for the age of
	// the oldest (watchClaimAge).
	claims *claimAges
}

// The board-wide series, collected by boardCounter from its last listing
// (DESIGN.md#queue-depth). Their labels are the board's own states: a
// handful the board definition names, not one per card.
var (
	cardsOpts = prometheus.GaugeOpts{
		Name: "leasekeeper_cards",
		Help: "Cards of the board in each state, from the last count (board-wide: every agent of a fleet reports the same board).",
	}
	cardsClaimedOpts = prometheus.GaugeOpts{
		Name: "leasekeeper_cards_claimed",
		Help: "Cards of the board that carry a claim (any holder, recovery claims included), from the last count.",
	}
	cardsCountedOpts = prometheus.GaugeOpts{
		Name: "leasekeeper_cards_counted_timestamp_seconds",
		Help: "When the listing leasekeeper_cards and leasekeeper_cards_claimed come from was asked for, in seconds since the Unix epoch.",
	}
)

// newMetrics builds the registry. held reports the claims the heartbeat
// renews right now and reaperEnabled the gate; both are read at scrape
// time, so the series never lag behind a tick or a reload.
func newMetrics(version string, held func() int, reaperEnabled func() bool) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_claim_acquisitions_total",
			Help: "Claim and claim-next attempts, by result (granted, conflict, not_found, error).",
		}, []string{"result"}),
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_heartbeat_ticks_total",
			Help: "Heartbeat ticks, by result: ok (the store answered the batch), idle (nothing held), error (the batch failed).",
		}, []string{"result"}),
		tickDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leasekeeper_heartbeat_tick_duration_seconds",
			Help: "Duration of a heartbeat tick: owner probes, expiries and the one batched renewal.",
			// From a sub-millisecond bbolt tick to a store that answers
			// only just before the trusted deadline of a long lease.
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		renewed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_renewals_total", Help: "Confirmed lease renewals.",
		}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_claims_lost_total", Help: "Claims the heartbeat stopped renewing, by reason.",
		}, []string{"reason"}),
		fence: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_fence_rejections_total",
			Help: "Owner writes the store refused with a claim conflict (a superseded or foreign token), by verb.",
		}, []string{"verb"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_store_errors_total",
			Help: "Store calls that failed for a reason other than a domain answer (not found, conflict, rejected transition, invalid argument), by operation.",
		}, []string{"op"}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_reaper_passes_total", Help: "Reaper passes (not dry runs), by gate state.",
		}, []string{"gate"}),
		passDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leasekeeper_reaper_pass_duration_seconds",
			Help:    "Duration of a reaper pass (not dry runs): listing, decisions and repair sweeps.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_reaper_decisions_total",
			Help: "Expired claims the reaper decided (not dry runs), by the decision table's action and what the pass did.",
		}, []string{"action", "outcome"}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_sweeps_total",
			Help: "Claims a sweep handled (boot, recovery, unleased), by outcome.",
		}, []string{"sweep", "outcome"}),
		runsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_runs_finished_total",
			Help: "Runs that reached a verdict through this agent (a worker's finish or verdict update, the watchdog's orphan verdict), by status.",
		}, []string{"status"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_retries_total",
			Help: "Run ends the retry policy routed through this agent (a worker's finish, the reaper's filing), by outcome: retried (the card returned to the pool for another attempt) or spent (its attempts were spent: filed failed, or to the ceiling state).",
		}, []string{"outcome"}),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "leasekeeper_run_duration_seconds",
			Help: "Duration of a run from its creation to its verdict (the store's stamps), observed when the verdict is written through this agent, by status.",
			// From a job of a second to one of a day.
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400},
		}, []string{"status"}),
		claims: newClaimAges(),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leasekeeper_build_info", Help: "Always 1; the labels name the build.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version, runtime.Version()).Set(1)
	m.reg.MustRegister(
		m.acquisitions, m.ticks, m.tickDuration, m.renewed, m.lost, m.fence, m.storeErrors,
		m.passes, m.passDuration, m.decisions, m.sweeps, m.runsFinished, m.retries, m.runDuration, build,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasekeeper_claims_held", Help: "Claims the heartbeat renews.",
		}, func() float64 { return float64(held()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasekeeper_reaper_enabled", Help: "1 when the reaper gate lets it decide.",
		}, func() float64 { return boolFloat(reaperEnabled()) }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Series that alerts divide or rate over exist from the start at 0, so
	// an expression over them is defined before the first event.
	for _, r := range []string{acquireGranted, acquireConflict, acquireNotFound, acquireError} {
		m.acquisitions.WithLabelValues(r)
	}
	for _, r := range []string{tickOK, tickIdle, tickError} {
		m.ticks.WithLabelValues(r)
	}
	for _, r := range []heartbeat.LostReason{heartbeat.LostSuperseded, heartbeat.LostReleased,
		heartbeat.LostUnconfirmed, heartbeat.LostOwnerDead, heartbeat.LostKeepaliveMissed} {
		m.lost.WithLabelValues(string(r))
	}
	for _, v := range ownerVerbs {
		m.fence.WithLabelValues(v)
	}
	for _, g := range []string{"on", "off"} {
		m.passes.WithLabelValues(g)
	}
	for _, op := range storeOps {
		m.storeErrors.WithLabelValues(op)
	}
	for _, a := range reaperActions {
		for _, o := range reaperOutcomes {
			m.decisions.WithLabelValues(string(a), string(o))
		}
	}
	for _, a := range []SweepAction{SweepReleased, SweepExpired, SweepDisowned, SweepAdopted, SweepKept, SweepFailed} {
		m.sweeps.WithLabelValues(sweepBoot, string(a))
	}
	for _, sw := range []watchdog.Sweep{watchdog.SweepRecovery, watchdog.SweepUnleased} {
		for _, o := range reaperOutcomes {
			m.sweeps.WithLabelValues(string(sw), string(o))
		}
	}
	for _, o := range []string{retryRetried, retrySpent} {
		m.retries.WithLabelValues(o)
	}
	for _, v := range runVerdicts {
		m.runsFinished.WithLabelValues(string(v))
		m.runDuration.WithLabelValues(string(v))
	}
	return m
}

// watchClaimAge adds the age of the oldest claim the heartbeat holds, read
// at scrape time from held and now (DESIGN.md#claim-age).
func (m *metrics) watchClaimAge(held func() []heartbeat.Claim, now func() time.Time) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leasekeeper_claim_age_seconds",
		Help: "Age of the oldest claim the heartbeat renews (since the card's claimed_at), 0 when none is held.",
	}, func() float64 { return m.claims.oldest(held(), now()).Seconds() }))
}

// watchBoard adds the board-wide series of c; the agent calls it only when
// it serves metrics, the only reader of the counts.
func (m *metrics) watchBoard(c *boardCounter) { m.reg.MustRegister(c) }

// reaperActions are the decision table's actions, and reaperOutcomes what
// a pass that writes can do with a card or a sweep's claim (OutcomeDecided
// is a dry run's, which the metrics leave out).
var (
	reaperActions = []watchdog.Action{
		watchdog.ActionKeep, watchdog.ActionRelease, watchdog.ActionGiveUp,
		watchdog.ActionComplete, watchdog.ActionFail, watchdog.ActionRepark,
	}
	reaperOutcomes = []watchdog.Outcome{
		watchdog.OutcomeKept, watchdog.OutcomeTransferred, watchdog.OutcomeFiled,
		watchdog.OutcomeReleased, watchdog.OutcomeSkippedConflict, watchdog.OutcomeError,
	}
)

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// watchPlugin adds the store plugin's series; the agent calls it only when
// the store runs in a plugin process.
func (m *metrics) watchPlugin(p *plugins.Proxy) {
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "leasekeeper_store_plugin_restarts_total",
			Help: "Restarts of the store plugin process after a crash.",
		}, func() float64 { return float64(p.Status().Restarts) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasekeeper_store_plugin_up", Help: "1 while the store plugin process serves.",
		}, func() float64 { return boolFloat(p.Status().State == plugins.StateUp) }),
	)
}

// tickResult names the result of a tick for the metrics and the status.
func tickResult(r heartbeat.TickResult) string {
	switch {
	case r.Err != nil:
		return tickError
	case r.StoreCalls == 0:
		return tickIdle
	}
	return tickOK
}

func (m *metrics) tick(r heartbeat.TickResult, took time.Duration) {
	m.ticks.WithLabelValues(tickResult(r)).Inc()
	m.tickDuration.Observe(took.Seconds())
	m.renewed.Add(float64(r.Renewed))
	for _, l := range r.Lost {
		m.lost.WithLabelValues(string(l.Reason)).Inc()
	}
}

// pass records a reaper pass. Dry runs are an operator's question, not
// work done: counting their decisions would fire alerts for writes that
// never happened, so the caller leaves them out.
func (m *metrics) pass(p watchdog.PassResult, took time.Duration) {
	gate := "off"
	if p.Enabled {
		gate = "on"
	}
	m.passes.WithLabelValues(gate).Inc()
	m.passDuration.Observe(took.Seconds())
	for _, c := range p.Cards {
		m.decisions.WithLabelValues(string(c.Decision.Action), string(c.Outcome)).Inc()
		if c.Outcome == watchdog.OutcomeFiled || c.Outcome == watchdog.OutcomeReleased {
			switch {
			case c.Decision.Retry:
				m.retries.WithLabelValues(retryRetried).Inc()
			case c.Decision.Rule == watchdog.RuleAttemptsSpent:
				m.retries.WithLabelValues(retrySpent).Inc()
			}
		}
	}
	for _, s := range p.Sweeps {
		m.sweeps.WithLabelValues(string(s.Sweep), string(s.Outcome)).Inc()
	}
}

// bootSweep records what the boot sweep did with each same-host claim.
func (m *metrics) bootSweep(items []SweepItem) {
	for _, it := range items {
		m.sweeps.WithLabelValues(sweepBoot, string(it.Action)).Inc()
	}
}

// hostGuard refuses requests whose Host header names a host this listener
// was not reached as, with 421. A web page a browser on this host loads
// could otherwise read the metrics by DNS rebinding: its own name resolved
// to 127.0.0.1 makes the request same-origin for the page, but its Host
// header still carries that name. Accepted: IP literals (a rebinding needs
// a name), "localhost", this machine's host name as os.Hostname gives it,
// and the host part of the configured listen address.
func hostGuard(next http.Handler, listen string) http.Handler {
	allowed := map[string]bool{"localhost": true}
	if h, err := os.Hostname(); err == nil && h != "" {
		allowed[strings.ToLower(h)] = true
	}
	if h, _, err := net.SplitHostPort(listen); err == nil && h != "" {
		allowed[strings.ToLower(h)] = true
	}
	ok := func(host string) bool {
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
		// Exact names only: "<hostname>.attacker.example" is the
		// attacker's name, whatever its first label says.
		return net.ParseIP(host) != nil || allowed[host]
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ok(r.Host) {
			http.Error(w, "metrics: Host "+strconv.Quote(r.Host)+" is not an address of this agent (requests by another name are refused against DNS rebinding); scrape by IP or host name", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serve listens on addr until ctx ends. A port that cannot be bound is a
// start error: an operator who asked for metrics should not find them
// silently missing.
func (m *metrics) serve(ctx context.Context, addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: hostGuard(mux, addr), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("metrics listening", "addr", ln.Addr().String())
	return nil
}
