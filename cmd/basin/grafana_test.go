package main

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/basin-nas/basin/internal/metrics"
)

// The Grafana dashboard in docs/grafana imports as is (a DS_PROMETHEUS input
// every panel uses, project and volume variables) and its PromQL names only
// metrics Basin exports: the names come from the Collector's descriptions, so
// renaming a metric there fails here until the dashboard follows.
func TestGrafanaDashboard(t *testing.T) {
	exported := exportedMetrics(t)
	data, err := os.ReadFile("../../docs/grafana/basin-volumes.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Inputs []struct {
			Name, Type, PluginID string
		} `json:"__inputs"`
		SchemaVersion int `json:"schemaVersion"`
		UID, Title    string
		Panels        []struct {
			Title      string
			Type       string
			Datasource struct{ Type, UID string }
			Targets    []struct {
				Expr       string
				Datasource struct{ Type, UID string }
			}
		}
		Templating struct {
			List []struct {
				Name, Type string
				Datasource struct{ Type, UID string }
				Query      struct{ Query string }
			}
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion < 36 || d.UID == "" || d.Title == "" {
		t.Errorf("schemaVersion %d, uid %q, title %q: not importable", d.SchemaVersion, d.UID, d.Title)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("inputs %+v, want the one datasource input DS_PROMETHEUS", d.Inputs)
	}
	const ds = "${DS_PROMETHEUS}"
	var exprs []string
	used := map[string]bool{}
	check := func(where, expr string) {
		names := promqlMetrics(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q names no metric", where, expr)
		}
		for _, n := range names {
			used[n] = true
			if !exported[n] {
				t.Errorf("%s: %q names %s, which Basin does not export", where, expr, n)
			}
		}
		exprs = append(exprs, expr)
	}
	for _, p := range d.Panels {
		if p.Datasource.UID != ds || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %q, %d targets", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, tg := range p.Targets {
			if tg.Datasource.UID != ds {
				t.Errorf("panel %q: a target's datasource is %q", p.Title, tg.Datasource.UID)
			}
			if !strings.Contains(tg.Expr, `volume=~"$volume"`) || !strings.Contains(tg.Expr, `project=~"$project"`) {
				t.Errorf("panel %q: %q ignores $project or $volume", p.Title, tg.Expr)
			}
			check("panel "+p.Title, tg.Expr)
		}
	}
	var vars []string
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		m := labelValues.FindStringSubmatch(v.Query.Query)
		if v.Type != "query" || v.Datasource.UID != ds || m == nil || m[2] != v.Name {
			t.Errorf("variable %s: %+v, want label_values(…, %s) on %s", v.Name, v, v.Name, ds)
			continue
		}
		check("variable "+v.Name, m[1])
	}
	if !slices.Equal(vars, []string{"project", "volume"}) {
		t.Errorf("variables %v, want project and volume", vars)
	}
	// The overview the issue asks for: IOPS, MiB/s, latency, block size, throttled.
	for _, n := range []string{"basin_volume_read_ops_total", "basin_volume_write_ops_total", "basin_volume_read_bytes_total",
		"basin_volume_written_bytes_total", "basin_volume_read_latency_seconds_total", "basin_volume_at_limit_seconds_total"} {
		if !used[n] {
			t.Errorf("the dashboard never shows %s", n)
		}
	}
}

// exportedMetrics are the names the metrics Collector describes.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	c := metrics.New(metrics.Options{}).Collector()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 100)
	c.Describe(ch)
	close(ch)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		names[m[1]] = true
	}
	if len(names) < 10 {
		t.Fatalf("only %d metric names described: %v", len(names), names)
	}
	return names
}

// promqlMetrics lists the metric names a PromQL expression reads: identifiers
// that are not functions (followed by "("), keywords, label names in braces or
// grouping lists, durations or numbers. Strings and ranges are dropped first.
func promqlMetrics(expr string) []string {
	for _, re := range []string{`"(\\.|[^"\\])*"`, `\{[^}]*\}`, `\[[^\]]*\]`, `\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`} {
		expr = regexp.MustCompile(re).ReplaceAllString(expr, " ")
	}
	keywords := map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"bool": true, "offset": true, "and": true, "or": true, "unless": true, "atan2": true, "inf": true, "nan": true}
	tok := regexp.MustCompile(`[0-9][0-9.]*(e[+-]?[0-9]+)?[a-zA-Z_]*|\$?[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	var out []string
	for _, m := range tok.FindAllString(expr, -1) {
		if m[0] >= '0' && m[0] <= '9' || m[0] == '$' || strings.HasSuffix(m, "(") || keywords[strings.ToLower(m)] {
			continue
		}
		out = append(out, m)
	}
	return out
}

func TestPromQLMetrics(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`rate(basin_volume_read_ops_total{project=~"$project", volume=~"a}b"}[$__rate_interval])`, "basin_volume_read_ops_total"},
		{`sum by (volume, pool) (rate(basin_volume_bogus_total[5m])) / 2^20 + 1e3`, "basin_volume_bogus_total"},
		{`a / on(volume) group_left(pool) b > bool 0 offset 5m`, "a b"},
		{`histogram_quantile(0.9, rate(x_bucket[1m]))`, "x_bucket"},
	} {
		if got := strings.Join(promqlMetrics(tc.expr), " "); got != tc.want {
			t.Errorf("promqlMetrics(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
