package apiv1

// Settings are a project's Basin-only settings in one location, at
// projects/{p}/locations/{l}/settings (GET, PATCH with updateMask). They are not
// part of the NetApp Volumes API and never add fields to its resources.
type Settings struct {
	Name string `json:"name,omitempty"`
	// ThroughputCapMibps caps the throughput (read + write, client payload) all the
	// project's volumes in the location share, in MiB/s; 0 = no cap.
	ThroughputCapMibps Double `json:"throughputCapMibps,omitempty"`
	// UpdateTime is when the settings were last changed; absent = never (the
	// server's defaults).
	UpdateTime string `json:"updateTime,omitempty"`
}

// VolumeMetrics is the Basin-only answer of GET …/volumes/{v}/metrics: the
// volume's metrics over [startTime, endTime), one point per step.
type VolumeMetrics struct {
	Volume    string         `json:"volume"`
	StartTime string         `json:"startTime"`
	EndTime   string         `json:"endTime"`
	Step      string         `json:"step"`
	Series    []MetricSeries `json:"series"`
}

// AggregateMetrics is the Basin-only answer of GET …/storagePools/{p}/metrics
// and GET …/locations/{l}/metrics: the metrics of a pool's volumes, or of a
// project's in a location (every location for "-"), combined per step.
type AggregateMetrics struct {
	// Name is the pool's or the location's.
	Name string `json:"name"`
	// VolumeCount is how many volumes were combined: those that exist now.
	VolumeCount int            `json:"volumeCount"`
	StartTime   string         `json:"startTime"`
	EndTime     string         `json:"endTime"`
	Step        string         `json:"step"`
	Series      []MetricSeries `json:"series"`
}

// MetricSeries is one metric's points; unit is UCUM-like ("1/s", "MiB/s", "ms",
// "KiB", "By", "1").
type MetricSeries struct {
	Metric string        `json:"metric"`
	Unit   string        `json:"unit"`
	Points []MetricPoint `json:"points"`
}

// MetricPoint summarises [time, time+step): value is its mean (null: unknown),
// min and max the extremes of its intervals (absent when the step holds one
// interval, or the metric is derived).
type MetricPoint struct {
	Time  string   `json:"time"`
	Value *float64 `json:"value"`
	Min   *float64 `json:"min,omitempty"`
	Max   *float64 `json:"max,omitempty"`
}
