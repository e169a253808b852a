package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/watchdog"
)

// metrics are the agent's Prometheus series, served on the optional
// `metrics` TCP address. Their own registry keeps them free of whatever
// else the process registers globally.
type metrics struct {
	reg       *prometheus.Registry
	held      prometheus.Gauge
	ticks     prometheus.Counter
	renewed   prometheus.Counter
	tickErrs  prometheus.Counter
	lost      *prometheus.CounterVec
	passes    *prometheus.CounterVec
	outcomes  *prometheus.CounterVec
	gateState prometheus.GaugeFunc
}

func newMetrics(live *Live) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasekeeper_claims_held", Help: "Claims the heartbeat renews, as of its last tick.",
		}),
		ticks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_heartbeat_ticks_total", Help: "Heartbeat ticks.",
		}),
		renewed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_renewals_total", Help: "Confirmed lease renewals.",
		}),
		tickErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_renewal_batch_errors_total", Help: "Heartbeat ticks whose renewal batch failed.",
		}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_claims_lost_total", Help: "Claims the heartbeat stopped renewing, by reason.",
		}, []string{"reason"}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_reaper_passes_total", Help: "Reaper passes, by gate state.",
		}, []string{"gate"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_reaper_cards_total", Help: "Cards a reaper pass handled, by outcome.",
		}, []string{"outcome"}),
		gateState: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasekeeper_reaper_enabled", Help: "1 when the reaper gate lets it decide.",
		}, func() float64 {
			if live.ReaperEnabled() {
				return 1
			}
			return 0
		}),
	}
	m.reg.MustRegister(m.held, m.ticks, m.renewed, m.tickErrs, m.lost, m.passes, m.outcomes, m.gateState)
	return m
}

func (m *metrics) tick(r heartbeat.TickResult) {
	m.ticks.Inc()
	m.held.Set(float64(r.Held - len(r.Lost)))
	m.renewed.Add(float64(r.Renewed))
	if r.Err != nil {
		m.tickErrs.Inc()
	}
	for _, l := range r.Lost {
		m.lost.WithLabelValues(string(l.Reason)).Inc()
	}
}

func (m *metrics) pass(p watchdog.PassResult) {
	gate := "off"
	if p.Enabled {
		gate = "on"
	}
	m.passes.WithLabelValues(gate).Inc()
	for _, c := range p.Cards {
		m.outcomes.WithLabelValues(string(c.Outcome)).Inc()
	}
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
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
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
