package docs_test

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// agentFamilies reads the leasekeeper_* families agent/metrics.go
// registers, and which of them are histograms (whose series a query names
// with _bucket, _sum or _count).
func agentFamilies(t *testing.T) (families, histograms map[string]bool) {
	t.Helper()
	src := read(t, "../agent/metrics.go")
	families, histograms = map[string]bool{}, map[string]bool{}
	for _, m := range regexp.MustCompile(`Name:\s*"(leasekeeper_[a-z_]+)"`).FindAllStringSubmatch(src, -1) {
		families[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`HistogramOpts\{\s*Name:\s*"(leasekeeper_[a-z_]+)"`).FindAllStringSubmatch(src, -1) {
		histograms[m[1]] = true
	}
	if len(families) < 10 || len(histograms) == 0 {
		t.Fatalf("read %d families and %d histograms from agent/metrics.go: the patterns no longer match it", len(families), len(histograms))
	}
	return families, histograms
}

var metricRef = regexp.MustCompile(`\bleasekeeper_[a-z_]+`)

// checkRefs fails for every leasekeeper_* name in expr that is not a
// series the agent serves, and returns the families expr names.
func checkRefs(t *testing.T, where, expr string, families, histograms map[string]bool) []string {
	t.Helper()
	var named []string
	for _, name := range metricRef.FindAllString(expr, -1) {
		family, ok := name, families[name] && !histograms[name]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, cut := strings.CutSuffix(name, suffix); cut && histograms[base] {
				family, ok = base, true
			}
		}
		if !ok {
			t.Errorf("%s names %s, which the agent does not serve (agent/metrics.go): %s", where, name, expr)
			continue
		}
		named = append(named, family)
	}
	return named
}

// TestGrafanaDashboardNamesServedMetrics parses the example dashboard and
// checks that every query in it names only series the agent serves, and
// that it has the panels METRICS.md promises.
func TestGrafanaDashboardNamesServedMetrics(t *testing.T) {
	t.Parallel()
	families, histograms := agentFamilies(t)
	var dash struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []map[string]any `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int                       `json:"id"`
			Type       string                    `json:"type"`
			Title      string                    `json:"title"`
			Datasource json.RawMessage           `json:"datasource"`
			GridPos    *struct{ H, W, X, Y int } `json:"gridPos"`
			Targets    []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(read(t, "grafana/leasekeeper.json"))))
	if err := dec.Decode(&dash); err != nil {
		t.Fatalf("grafana/leasekeeper.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Error("the dashboard has no title or uid")
	}
	referenced := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.Title == "" {
			t.Errorf("panel %d has no gridPos or title", p.ID)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Datasource) == 0 || len(p.Targets) == 0 {
			t.Errorf("panel %q has no data source or no query", p.Title)
		}
		for _, q := range p.Targets {
			if q.Expr == "" || q.RefID == "" {
				t.Errorf("panel %q has a query with no expr or refId", p.Title)
			}
			for _, f := range checkRefs(t, "panel "+strconv.Quote(p.Title), q.Expr, families, histograms) {
				referenced[f] = true
			}
		}
	}
	for _, v := range dash.Templating.List {
		b, _ := json.Marshal(v)
		checkRefs(t, "template variable", string(b), families, histograms)
	}
	for _, want := range []string{
		"leasekeeper_cards", "leasekeeper_claims_held", "leasekeeper_claim_age_seconds",
		"leasekeeper_run_duration_seconds", "leasekeeper_runs_finished_total",
		"leasekeeper_reaper_decisions_total", "leasekeeper_claims_lost_total",
	} {
		if !referenced[want] {
			t.Errorf("no panel of the dashboard shows %s", want)
		}
	}
}

// TestAlertingRulesNameServedMetrics parses the example alerting rules
// strictly (unknown keys refused) and checks that every rule is complete
// and names only series the agent serves.
func TestAlertingRulesNameServedMetrics(t *testing.T) {
	t.Parallel()
	families, histograms := agentFamilies(t)
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(read(t, "prometheus/alerts.yml")))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("prometheus/alerts.yml: %v", err)
	}
	referenced := map[string]bool{}
	var names []string
	for _, g := range rules.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q has no name or no rules", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("rule %q lacks an alert name, an expr, a summary or a severity", r.Alert)
			}
			if slices.Contains(names, r.Alert) {
				t.Errorf("alert %q is defined twice", r.Alert)
			}
			names = append(names, r.Alert)
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("alert %q: for %q: %v", r.Alert, r.For, err)
				}
			}
			for _, f := range checkRefs(t, "alert "+r.Alert, r.Expr, families, histograms) {
				referenced[f] = true
			}
		}
	}
	for _, want := range []string{
		"leasekeeper_claims_lost_total", "leasekeeper_reaper_passes_total", "leasekeeper_cards",
		"leasekeeper_claim_age_seconds", "leasekeeper_store_errors_total",
	} {
		if !referenced[want] {
			t.Errorf("no alert watches %s", want)
		}
	}
}
