package model

import "time"

// MaxThroughputCapMibps is the largest project throughput cap a setting may hold.
const MaxThroughputCapMibps = 10_000_000

// Settings are a project's Basin-only settings in one location (the resource
// projects/{p}/locations/{l}/settings, one per project and location). They are not
// part of the v1 API.
type Settings struct {
	Project  string `json:"project"`
	Location string `json:"location"`
	// ThroughputCapMibps caps the throughput (read + write, client payload, MiB/s)
	// all the project's volumes in the location share. 0 = the server default
	// (which may itself be 0: no cap).
	ThroughputCapMibps float64 `json:"throughputCapMibps,omitempty"`
	// UpdateTime is when the settings were last changed; zero = never set (the
	// defaults).
	UpdateTime time.Time `json:"updateTime,omitzero"`
}

// SettingsName is the resource name of a project's settings in a location.
func SettingsName(project, location string) string {
	return LocationName(project, location) + "/settings"
}

// Name is the settings' resource name.
func (s *Settings) Name() string { return SettingsName(s.Project, s.Location) }

// EffectiveThroughputCapMibps is the cap in force: the setting, or def (the
// server's default) where the setting is 0. 0 = no cap.
func (s *Settings) EffectiveThroughputCapMibps(def float64) float64 {
	if s != nil && s.ThroughputCapMibps > 0 {
		return s.ThroughputCapMibps
	}
	return def
}
