package metrics

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/basin-nas/basin/internal/model"
)

// summed are the stored values an aggregate adds up over its volumes: rates,
// space, clients and limits.
var summed = []int{readOps, writeOps, metaOps, readBytes, writeBytes, limitBytes, usedBytes, snapshotBytes, clients,
	wireReadBytes, wireWriteBytes, droppedPackets}

// QueryAggregate answers a query (the rules of Query; q.Series is ignored) about
// a group of volumes, a pool's or a project's, given by their storage keys. Each
// step combines the volumes' means over it: requests and bytes per second (wire
// bytes and dropped packets too), space, clients and throughput limits are summed; the latency per direction is
// the mean over every volume's requests (each volume's weighted by its request
// rate); atLimitShare is the largest of any volume (the share of the step the
// most throttled volume spent at its limit); block sizes, concurrency and the
// read share follow from the combined values. A volume counts with its mean
// over the intervals of the step it was sampled in; one with no samples in a
// step adds nothing to it. Points carry no min and max.
func (s *Sampler) QueryAggregate(ctx context.Context, q model.MetricsQuery, keys []string) ([]model.MetricSeries, error) {
	pq, err := s.plan(q)
	if err != nil {
		return nil, err
	}
	type step struct {
		v            [numStored]float64
		known        [numStored]bool
		latSum, latW [2]float64 // Σ latency × requests per second, Σ requests per second; read, write
		atLimit      float64
		atLimitKnown bool
	}
	steps := map[int64]*step{}
	for _, key := range keys {
		buckets, err := s.buckets(ctx, key, pq)
		if err != nil {
			return nil, err
		}
		for b, a := range buckets {
			if a.empty() {
				continue
			}
			m := a.means()
			st := steps[b]
			if st == nil {
				st = &step{}
				steps[b] = st
			}
			for _, i := range summed {
				if !math.IsNaN(m[i]) {
					st.v[i] += m[i]
					st.known[i] = true
				}
			}
			for d, k := range [][2]int{{readOps, readLatency}, {writeOps, writeLatency}} {
				if ops, lat := m[k[0]], m[k[1]]; ops > 0 && !math.IsNaN(lat) {
					st.latSum[d] += lat * ops
					st.latW[d] += ops
				}
			}
			if !math.IsNaN(m[atLimit]) {
				st.atLimit = max(st.atLimit, m[atLimit])
				st.atLimitKnown = true
			}
		}
	}
	starts := make([]int64, 0, len(steps))
	for b := range steps {
		starts = append(starts, b)
	}
	slices.Sort(starts)
	out := make([]model.MetricSeries, len(pq.metrics))
	for i, m := range pq.metrics {
		out[i] = model.MetricSeries{Metric: m.Name, Unit: m.Unit, Points: make([]model.MetricPoint, 0, len(starts))}
	}
	for _, b := range starts {
		st := steps[b]
		var vals [numStored]float64
		for i := range vals {
			vals[i] = math.NaN()
		}
		for _, i := range summed {
			if st.known[i] {
				vals[i] = st.v[i]
			}
		}
		for d, i := range []int{readLatency, writeLatency} {
			if st.latW[d] > 0 {
				vals[i] = st.latSum[d] / st.latW[d]
			}
		}
		if st.atLimitKnown {
			vals[atLimit] = st.atLimit
		}
		for i, m := range pq.metrics {
			out[i].Points = append(out[i].Points, model.MetricPoint{Time: time.Unix(b, 0).UTC(), Value: m.value(&vals), Min: math.NaN(), Max: math.NaN()})
		}
	}
	return out, nil
}
