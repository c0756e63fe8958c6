package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/orderindex"
	"github.com/orderstore/orderstore/processor"

	"github.com/orderstore/orderstore/status"
)

// The alert rules and the Grafana dashboard shipped in packaging/ query
// orderstore's metrics by name. These tests hold them to what /metrics
// really exports, so a renamed or removed metric fails here rather than
// as an alert that silently never fires or an empty panel.

const (
	alertsFile     = "../packaging/prometheus/orderstore-alerts.yml"
	alertTestsFile = "../packaging/prometheus/orderstore-alerts_test.yml"
	dashboardFile  = "../packaging/grafana/orderstore-dashboard.json"
)

// prometheusSeries are series Prometheus itself makes for every target.
var prometheusSeries = []string{"up"}

type fakeProcessor struct{}

func (fakeProcessor) Stats() processor.Stats { return processor.Stats{Running: true} }
func (fakeProcessor) Lag(context.Context) (processor.LagInfo, error) {
	return processor.LagInfo{}, nil
}

// exportedMetrics scrapes /metrics of an admin server before its backend
// is set (what a starting node exports) and of one with a broker and a
// processor (everything else), and returns the metric names seen.
// loadedIndex is an order index of the test's ORDERS bucket, holding one
// paid order, loaded.
func loadedIndex(t *testing.T, js jetstream.JetStream, staleAfter map[string]time.Duration) *orderindex.Index {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kv, err := js.KeyValue(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "o-1", []byte(`{"order_id":"o-1","status":"paid","last_event_at":"2026-01-01T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	x := orderindex.New(staleAfter)
	go x.Run(ctx, kv, nil)
	select {
	case <-x.Loaded():
	case <-time.After(time.Minute):
		t.Fatal("the order index did not load")
	}
	return x
}

func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	scrape := func(s *Server) {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:8222/metrics", nil))
		if rec.Code != 200 {
			t.Fatalf("/metrics = %d", rec.Code)
		}
		sc := bufio.NewScanner(rec.Body)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
				names[f[2]] = true
			}
		}
	}
	scrape(New(testConfig()))

	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	declare(t, js)
	cfg := testConfig()
	cfg.Durable = "order-processor"
	cfg.StaleAfter = map[string]time.Duration{"paid": time.Hour}
	s := New(cfg)
	s.SetBackend(Backend{JS: js, Processor: fakeProcessor{}, OrderIndex: loadedIndex(t, js, cfg.StaleAfter), Ingest: func() *status.IngestStats {
		h := status.Histogram{Count: 1, Sum: 0.001, Buckets: map[float64]uint64{0.001: 1}}
		return &status.IngestStats{Sync: "syncfs", Syncs: 1, Acked: 1, SyncSeconds: h, BatchEvents: h}
	},
		Guard:        func() *status.GuardStats { return &status.GuardStats{} },
		ConfigReload: func() *status.ConfigReload { return &status.ConfigReload{Successful: true} },
		Validation: func() *status.ValidationStats {
			return &status.ValidationStats{Rejected: []status.ValidationCount{{Type: "created", Reason: "minimum", Events: 1}}}
		},
		Topology: func(context.Context) *status.Topology {
			return &status.Topology{Sources: []status.SourceStatus{{Edge: "edge-1"}}}
		},
		Rebuild: lastRebuild{&status.Rebuild{State: status.RebuildFailed, Error: "test"}}})
	scrape(s)

	// Everything metrics.go describes must be among them, or the check
	// below would pass for the wrong reason.
	for _, n := range []string{"orderstore_up", "orderstore_consumer_seconds_behind", "orderstore_processor_events_total",
		"orderstore_processor_settle_errors_total", "orderstore_store_free_bytes", "orderstore_dead_letter_messages"} {
		if !names[n] {
			t.Fatalf("/metrics lacks %s; got %v", n, sortedKeys(names))
		}
	}
	for _, n := range prometheusSeries {
		names[n] = true
	}
	return names
}

func sortedKeys(m map[string]bool) []string {
	var l []string
	for k := range m {
		l = append(l, k)
	}
	sort.Strings(l)
	return l
}

// promqlKeywords are the words of PromQL that are not metric names:
// operators, modifiers, and the aggregations (which may be followed by
// "by (...)" before their parenthesis).
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
	"on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// labelLists are the keywords followed by a parenthesized list of labels.
var labelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// metricNames returns the metric names a PromQL expression selects. It
// skips strings, label matchers ({...}), ranges ([...]), numbers and
// durations, functions and aggregations (a name followed by "("), label
// lists (by (...), on (...), group_left (...)), keywords and Grafana
// variables ($x, ${x}).
func metricNames(expr string) []string {
	var names []string
	s := regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*`).ReplaceAllString(expr, "0")
	skipString := func(i int) int { // s[i] is a quote; returns the index after the closing one
		q := s[i]
		for i++; i < len(s); i++ {
			if s[i] == '\\' && q != '`' {
				i++
			} else if s[i] == q {
				return i + 1
			}
		}
		return i
	}
	skipUntil := func(i int, open, close byte) int { // s[i] == open; returns the index after the match
		depth := 0
		for i < len(s) {
			switch c := s[i]; {
			case c == '"' || c == '\'' || c == '`':
				i = skipString(i)
				continue
			case c == open:
				depth++
			case c == close:
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(i)
		case c == '{':
			i = skipUntil(i, '{', '}')
		case c == '[':
			i = skipUntil(i, '[', ']')
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n') {
				k++
			}
			followedByParen := k < len(s) && s[k] == '('
			switch lw := strings.ToLower(word); {
			case labelLists[lw] && followedByParen:
				j = skipUntil(k, '(', ')')
			case promqlKeywords[lw], followedByParen:
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

func TestMetricNamesOfPromQL(t *testing.T) {
	for expr, want := range map[string][]string{
		`up{job="orderstore"} == 0`:                                                                            {"up"},
		`orderstore_stream_bytes / (orderstore_stream_max_bytes > 0) > 0.9`:                                    {"orderstore_stream_bytes", "orderstore_stream_max_bytes"},
		`sum by (instance, result) (rate(orderstore_processor_events_total{job=~"$job"}[$__rate_interval]))`:   {"orderstore_processor_events_total"},
		`a > ignoring(consumer, stream) group_left(stream) 0.8 * (b > 0) and on (x) c offset 5m unless d bool`: {"a", "b", "c", "d"},
		`max without (consumer) (g) > sum(h) by (x)`:                                                           {"g", "h"},
		`predict_linear(f{l="{x}"}[6h], 4 * 3600) < -1e3`:                                                      {"f"},
		`label_values(orderstore_build_info{job=~"${job}"}, instance)`:                                         {"orderstore_build_info", "instance"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadAlertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	if len(f.Groups) != 1 || f.Groups[0].Name != "orderstore" || len(f.Groups[0].Rules) == 0 {
		t.Fatalf("%s: want one group \"orderstore\" with rules", alertsFile)
	}
	return f.Groups[0].Rules
}

// Every alert selects only metrics that /metrics exports, and carries a
// for, a severity (page or ticket), a summary and a description naming
// what to do.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	seen := map[string]bool{}
	for _, r := range loadAlertRules(t) {
		if r.Alert == "" {
			t.Errorf("rule %q is not an alert", r.Record)
			continue
		}
		if seen[r.Alert] {
			t.Errorf("alert %s defined twice", r.Alert)
		}
		seen[r.Alert] = true
		names := metricNames(r.Expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", r.Alert, r.Expr)
		}
		for _, n := range names {
			if !exported[n] {
				t.Errorf("%s: expr uses %s, which /metrics does not export (expr %q)", r.Alert, n, r.Expr)
			}
		}
		if r.For == "" {
			t.Errorf("%s: no for", r.Alert)
		}
		if sev := r.Labels["severity"]; sev != "page" && sev != "ticket" {
			t.Errorf("%s: severity %q, want page or ticket", r.Alert, sev)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: needs a summary and a description", r.Alert)
		}
		if d := r.Annotations["description"]; !strings.Contains(d, "orderstore ") && !strings.Contains(d, "journalctl") {
			t.Errorf("%s: the description names no command to run: %q", r.Alert, d)
		}
	}
}

// Every alert has a promtool unit test (CI runs promtool test rules).
func TestEveryAlertHasAUnitTest(t *testing.T) {
	b, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertTestsFile, err)
	}
	if !slices.Equal(f.RuleFiles, []string{"orderstore-alerts.yml"}) {
		t.Errorf("%s: rule_files = %q, want [orderstore-alerts.yml]", alertTestsFile, f.RuleFiles)
	}
	fires := map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	for _, r := range loadAlertRules(t) {
		if !fires[r.Alert] {
			t.Errorf("%s: no test in %s expects it to fire", r.Alert, alertTestsFile)
		}
	}
}

type grafanaPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr       string         `json:"expr"`
		Datasource map[string]any `json:"datasource"`
	} `json:"targets"`
	Datasource map[string]any `json:"datasource"`
	Panels     []grafanaPanel `json:"panels"`
}

// The dashboard is valid JSON, takes its Prometheus from the ${datasource}
// variable, filters by instance, and every panel's queries (and the
// variables' label_values) select only metrics /metrics exports; between
// them the panels show every orderstore_* metric.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title         string         `json:"title"`
		UID           string         `json:"uid"`
		SchemaVersion int            `json:"schemaVersion"`
		Panels        []grafanaPanel `json:"panels"`
		Templating    struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("title %q, uid %q, schemaVersion %d", d.Title, d.UID, d.SchemaVersion)
	}
	used := map[string]bool{}
	check := func(where, expr string) {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, n := range names {
			used[n] = true
			known := exported[n]
			// A histogram's series: name_bucket, name_sum, name_count.
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(n, suffix); ok && exported[base] {
					used[base], known = true, true
				}
			}
			if !known {
				t.Errorf("%s: uses %s, which /metrics does not export (expr %q)", where, n, expr)
			}
		}
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		lv := regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`).FindStringSubmatch(q)
		if lv == nil {
			t.Errorf("variable %s: query %q, want label_values(selector, label)", v.Name, q)
			continue
		}
		check("variable "+v.Name, lv[1])
	}
	if vars["datasource"] != "datasource" || vars["instance"] != "query" {
		t.Errorf("variables %v, want datasource (a data source) and instance (a query)", vars)
	}
	var walk func([]grafanaPanel)
	n := 0
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			n++
			where := "panel " + p.Title
			if p.Datasource["uid"] != "${datasource}" {
				t.Errorf("%s: datasource %v, want uid ${datasource}", where, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no queries", where)
			}
			for _, tg := range p.Targets {
				if tg.Datasource["uid"] != "${datasource}" {
					t.Errorf("%s: query datasource %v, want uid ${datasource}", where, tg.Datasource)
				}
				if !strings.Contains(tg.Expr, `instance=~"$instance"`) {
					t.Errorf("%s: %q does not filter by $instance", where, tg.Expr)
				}
				check(where, tg.Expr)
			}
		}
	}
	walk(d.Panels)
	if n < 8 {
		t.Errorf("%d panels, want at least 8", n)
	}
	for name := range exported {
		if strings.HasPrefix(name, "orderstore_") && !used[name] {
			t.Errorf("no panel shows %s: add it to %s", name, dashboardFile)
		}
	}
}

// lastRebuild is a backend whose last rebuild is r.
type lastRebuild struct{ r *status.Rebuild }

func (l lastRebuild) RebuildProjection(context.Context, status.RebuildRequest) (*status.Rebuild, error) {
	return nil, &RebuildError{Code: http.StatusConflict, Err: errors.New("test")}
}
func (l lastRebuild) RebuildStatus() *status.Rebuild { return l.r }
func (l lastRebuild) CancelRebuild() error           { return nil }

// orderstore_order_index_lag_writes is the projection bucket's writes the order index has not read:
// 0 once it has read them, the writes made since while its watch is held back (here by the report
// of a record that is not an order's), and 0 again once it goes on.
func TestOrderIndexLagMetric(t *testing.T) {
	srv := embeddedtest.Start(t)
	js := embeddedtest.JetStream(t, srv)
	declare(t, js)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := js.KeyValue(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string) {
		t.Helper()
		if _, err := kv.Put(ctx, key, []byte(`{"status":"paid","last_event_at":"2026-01-01T00:00:00Z"}`)); err != nil {
			t.Fatal(err)
		}
	}
	put("o-1")
	x, release := orderindex.New(nil), make(chan struct{})
	go x.Run(ctx, kv, func(string, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	<-x.Loaded()
	s := New(testConfig())
	s.SetBackend(Backend{JS: js, OrderIndex: x})
	lagIs := func(want int) {
		t.Helper()
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:8222/metrics", nil))
			if line := fmt.Sprintf("\norderstore_order_index_lag_writes %d\n", want); !strings.Contains(rec.Body.String(), line) {
				return fmt.Errorf("/metrics lacks %q", line[1:])
			}
			return nil
		})
	}
	lagIs(0)
	if _, err := kv.Put(ctx, "junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	put("o-2")
	put("o-3")
	put("o-1")
	lagIs(3)
	if n := x.Len(); n != 1 {
		t.Errorf("the held index holds %d orders, want o-1 only", n)
	}
	close(release)
	lagIs(0)
	if n := x.Len(); n != 3 {
		t.Errorf("the index holds %d orders once it went on, want 3", n)
	}
}
