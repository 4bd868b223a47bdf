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
	// QueryAggregate answers q (its Series ignored) about the volumes whose
	// storage keys are given, combined: sums, request-weighted latencies, the
	// largest atLimitShare.
	QueryAggregate(ctx context.Context, q model.MetricsQuery, keys []string) ([]model.MetricSeries, error)
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
	if s.forwardToNode(rq, vol.Node) {
		return
	}
	if !s.haveMetrics(rq) {
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

// getPoolMetrics serves GET …/storagePools/{p}/metrics (Basin-only): the
// metrics of the pool's volumes combined, with the parameters of a volume's.
func (s *Server) getPoolMetrics(rq *request, p parent, id string) {
	if err := checkPathID("Storage pool", id); err != nil {
		s.writeError(rq, err)
		return
	}
	s.aggregateMetrics(rq, p.name()+"/storagePools/"+id, func(tx store.Tx) ([]*model.Volume, error) {
		if _, err := store.Get[model.Pool](tx, store.KindPool, p.name()+"/storagePools/"+id); err != nil {
			return nil, err
		}
		vols, err := store.List[model.Volume](tx, store.KindVolume, p.name())
		if err != nil {
			return nil, err
		}
		out := vols[:0]
		for _, v := range vols {
			if v.StoragePool == id {
				out = append(out, v)
			}
		}
		return out, nil
	})
}

// getLocationMetrics serves GET …/locations/{l}/metrics (Basin-only): the
// metrics of the project's volumes in the location combined; location "-" is
// every location.
func (s *Server) getLocationMetrics(rq *request, p parent) {
	s.aggregateMetrics(rq, p.name(), func(tx store.Tx) ([]*model.Volume, error) {
		var out []*model.Volume
		for _, lp := range s.locationsOf(p) {
			vols, err := store.List[model.Volume](tx, store.KindVolume, lp.name())
			if err != nil {
				return nil, err
			}
			out = append(out, vols...)
		}
		return out, nil
	})
}

// aggregateMetrics answers an aggregate metrics query about the volumes members
// lists (read in one transaction), named name in the answer.
func (s *Server) aggregateMetrics(rq *request, name string, members func(tx store.Tx) ([]*model.Volume, error)) {
	q, err := parseMetricsQuery(rq.r, s.now())
	if err != nil {
		s.writeError(rq, err)
		return
	}
	var keys []string
	elsewhere := false // volumes on other nodes of a cluster
	if err := s.st.View(rq.ctx, func(tx store.Tx) error {
		vols, err := members(tx)
		for _, v := range vols {
			if v.Key != "" { // no storage yet: no series
				keys = append(keys, v.Key)
				elsewhere = elsewhere || (s.opts.Cluster && v.Node != "" && v.Node != s.opts.NodeID)
			}
		}
		return err
	}); err != nil {
		s.writeError(rq, err)
		return
	}
	if elsewhere && q.Step < coarseStep {
		// Each node keeps its own volumes' last hour; the 5-minute rollups of
		// every node's are in the store.
		if rq.r.URL.Query().Get("step") != "" {
			s.writeError(rq, model.Invalid("step", "these volumes are on several nodes, whose combined metrics are kept at steps of 5 minutes; ask for step=5m or more, or for each volume's own metrics"))
			return
		}
		q.Step = coarseStep
	}
	if !s.haveMetrics(rq) {
		return
	}
	series, err := s.opts.Metrics.QueryAggregate(rq.ctx, q, keys)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, aggregateToWire(name, len(keys), q, series))
}

// haveMetrics reports whether metrics are collected, answering UNIMPLEMENTED
// if not (501, or 400 to gcloud: writeError).
func (s *Server) haveMetrics(rq *request) bool {
	if s.opts.Metrics == nil {
		s.writeError(rq, model.Errorf(model.ErrUnimplemented, "metrics are not collected by this server"))
		return false
	}
	return true
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
	return apiv1.VolumeMetrics{Volume: volume, StartTime: apiv1.FormatTime(q.Start), EndTime: apiv1.FormatTime(q.End),
		Step: q.Step.String(), Series: seriesToWire(series)}
}

func aggregateToWire(name string, volumes int, q model.MetricsQuery, series []model.MetricSeries) apiv1.AggregateMetrics {
	return apiv1.AggregateMetrics{Name: name, VolumeCount: volumes, StartTime: apiv1.FormatTime(q.Start),
		EndTime: apiv1.FormatTime(q.End), Step: q.Step.String(), Series: seriesToWire(series)}
}

// seriesToWire turns series into their wire form: unknown values null, absent
// extremes left out.
func seriesToWire(series []model.MetricSeries) []apiv1.MetricSeries {
	num := func(f float64) *float64 {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return &f
	}
	out := make([]apiv1.MetricSeries, 0, len(series))
	for _, s := range series {
		ws := apiv1.MetricSeries{Metric: s.Metric, Unit: s.Unit, Points: make([]apiv1.MetricPoint, 0, len(s.Points))}
		for _, p := range s.Points {
			ws.Points = append(ws.Points, apiv1.MetricPoint{Time: apiv1.FormatTime(p.Time), Value: num(p.Value), Min: num(p.Min), Max: num(p.Max)})
		}
		out = append(out, ws)
	}
	return out
}
