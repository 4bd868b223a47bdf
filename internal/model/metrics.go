package model

import "time"

// MetricsQuery asks for a volume's metrics (internal/metrics) over a time range.
type MetricsQuery struct {
	// Series names the volume's series: its storage key.
	Series string
	// Metrics to return, by name; none = every metric.
	Metrics    []string
	Start, End time.Time
	// Step is the width of a point: each point summarises [Time, Time+Step).
	Step time.Duration
}

// MetricSeries is one metric of a volume over time.
type MetricSeries struct {
	Metric string
	Unit   string
	Points []MetricPoint
}

// MetricPoint summarises one step: Value is the mean (for latencies, over the
// requests; for block sizes, bytes over requests), Min and Max the extremes of the
// intervals in it. NaN means unknown.
type MetricPoint struct {
	Time            time.Time
	Value, Min, Max float64
}
