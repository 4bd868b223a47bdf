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
