package api

import (
	"context"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// Metrics answers volume metrics queries (internal/metrics.Sampler). Invalid
// queries are model.FieldErrors.
type Metrics interface {
	Query(ctx context.Context, q model.MetricsQuery) ([]model.MetricSeries, error)
}

// Defaults of a metrics query: the last hour; a step of 10 s up to fineRange,
// else the smallest multiple of 5 minutes that keeps to maxDefaultPoints.
const (
	defaultMetricsRange = time.Hour
	fineStep            = 10 * time.Second
	fineRange           = 3 * time.Hour
	coarseStep          = 5 * time.Minute
	maxDefaultPoints    = 1000
)

// getVolumeMetrics serves GET …/volumes/{v}/metrics?metric=…&startTime=…&endTime=…&step=…
// (Basin-only). metric may repeat or list names separated by commas; times are
// RFC 3339; step is a duration ("10s", "5m", "1h").
func (s *Server) getVolumeMetrics(rq *request, p parent, id string) {
	if err := checkPathID("Volume", id); err != nil {
		s.writeError(rq, err)
		return
	}
	q, err := parseMetricsQuery(rq.r, s.now())
	if err != nil {
		s.writeError(rq, err)
		return
	}
	var vol *model.Volume
	if err := s.st.View(rq.ctx, func(tx store.Tx) error {
		vol, err = store.Get[model.Volume](tx, store.KindVolume, p.name()+"/volumes/"+id)
		return err
	}); err != nil {
		s.writeError(rq, err)
		return
	}
	if s.opts.Metrics == nil {
		s.writeError(rq, model.Errorf(model.ErrUnimplemented, "metrics are not collected by this server"))
		return
	}
	q.Series = vol.Key
	series, err := s.opts.Metrics.Query(rq.ctx, q)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, metricsToWire(vol.Name(), q, series))
}

// parseMetricsQuery reads the query parameters, naming the one that is wrong.
func parseMetricsQuery(r *http.Request, now time.Time) (model.MetricsQuery, error) {
	v := r.URL.Query()
	var q model.MetricsQuery
	for _, m := range v["metric"] {
		for _, name := range strings.Split(m, ",") {
			if name = strings.TrimSpace(name); name == "" {
				return q, model.Invalid("metric", "empty metric name")
			}
			q.Metrics = append(q.Metrics, name)
		}
	}
	parseTime := func(field string, def time.Time) (time.Time, error) {
		s := v.Get(field)
		if s == "" {
			return def, nil
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return t, model.Invalid(field, "must be an RFC 3339 time, got %q", s)
		}
		return t, nil
	}
	var err error
	if q.End, err = parseTime("endTime", now); err != nil {
		return q, err
	}
	if q.Start, err = parseTime("startTime", q.End.Add(-defaultMetricsRange)); err != nil {
		return q, err
	}
	if !q.End.After(q.Start) {
		return q, model.Invalid("endTime", "must be after startTime")
	}
	if s := v.Get("step"); s != "" {
		if q.Step, err = time.ParseDuration(s); err != nil || q.Step <= 0 {
			return q, model.Invalid("step", "must be a positive duration such as 10s or 5m, got %q", s)
		}
	} else if span := q.End.Sub(q.Start); span <= fineRange {
		q.Step = fineStep
	} else {
		n := (span + coarseStep*maxDefaultPoints - 1) / (coarseStep * maxDefaultPoints)
		q.Step = time.Duration(n) * coarseStep
	}
	return q, nil
}

func metricsToWire(volume string, q model.MetricsQuery, series []model.MetricSeries) apiv1.VolumeMetrics {
	num := func(f float64) *float64 {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return &f
	}
	out := apiv1.VolumeMetrics{Volume: volume, StartTime: apiv1.FormatTime(q.Start), EndTime: apiv1.FormatTime(q.End),
		Step: q.Step.String(), Series: make([]apiv1.MetricSeries, 0, len(series))}
	for _, s := range series {
		ws := apiv1.MetricSeries{Metric: s.Metric, Unit: s.Unit, Points: make([]apiv1.MetricPoint, 0, len(s.Points))}
		for _, p := range s.Points {
			ws.Points = append(ws.Points, apiv1.MetricPoint{Time: apiv1.FormatTime(p.Time), Value: num(p.Value), Min: num(p.Min), Max: num(p.Max)})
		}
		out.Series = append(out.Series, ws)
	}
	return out
}
