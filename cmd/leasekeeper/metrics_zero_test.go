package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestAlertedCountersStartAtZero scrapes a fresh agent: every label
// combination docs/METRICS.md lists for the counters its alerts take
// increase() or rate() of is there at 0 before the first event, so the
// first event is an increase an alert sees.
func TestAlertedCountersStartAtZero(t *testing.T) {
	metricsAddr := freeAddr(t)
	// The gate off: the first pass, at start, counts under gate="off", so
	// the series the alerts read, gate="on", must be there at 0 by itself.
	e := newEnv(t, "metrics: "+metricsAddr+"\nreaper: {enabled: false}\n")
	e.Start()
	scraped := scrape(t, metricsAddr)

	var want []string
	series := func(name string, labels ...string) {
		var kv []string
		for i := 0; i < len(labels); i += 2 {
			kv = append(kv, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
		}
		want = append(want, name+"{"+strings.Join(kv, ",")+"}")
	}
	for _, a := range []string{"keep", "release", "give_up", "complete", "fail", "repark"} {
		for _, o := range []string{"kept", "transferred", "filed", "released", "skipped-conflict", "error"} {
			series("leasekeeper_reaper_decisions_total", "action", a, "outcome", o)
		}
	}
	for _, o := range []string{"released", "expired", "adopted", "kept", "failed"} {
		series("leasekeeper_sweeps_total", "outcome", o, "sweep", "boot")
	}
	for _, sw := range []string{"recovery", "unleased"} {
		for _, o := range []string{"released", "filed", "transferred", "kept", "skipped-conflict", "error"} {
			series("leasekeeper_sweeps_total", "outcome", o, "sweep", sw)
		}
	}
	for _, op := range []string{"get_card", "renew_claims", "reclaim_expired", "list_expired_claim_candidates", "claim", "set_state_owned"} {
		series("leasekeeper_store_errors_total", "op", op)
	}
	for _, r := range []string{"released", "superseded", "unconfirmed", "owner_dead", "keepalive_missed"} {
		series("leasekeeper_claims_lost_total", "reason", r)
	}
	for _, v := range []string{"set_state_owned", "set_last_run_owned", "set_awaiting_input_owned", "set_gave_up_owned", "expire_claim_owned", "release_owned"} {
		series("leasekeeper_fence_rejections_total", "verb", v)
	}
	for _, r := range []string{"granted", "conflict", "not_found", "error"} {
		series("leasekeeper_claim_acquisitions_total", "result", r)
	}
	for _, st := range []string{"finished", "failed", "failed_resumable", "cancelled"} {
		series("leasekeeper_runs_finished_total", "status", st)
	}
	for _, o := range []string{"retried", "spent"} {
		series("leasekeeper_retries_total", "outcome", o)
	}
	series("leasekeeper_heartbeat_ticks_total", "result", "error")
	series("leasekeeper_reaper_passes_total", "gate", "on")
	for _, s := range want {
		if !strings.Contains(scraped, "\n"+s+" 0\n") {
			t.Errorf("a fresh agent's /metrics has no %s at 0", s)
		}
	}
}
