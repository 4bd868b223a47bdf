package model

// Limits are the configurable bounds the API validates against. Most defaults are
// limits the upstream services publish (NetApp Volumes, or Azure NetApp Files where
// it publishes none: 255 snapshots per volume, manual QoS 1–4,500 MiB/s).
type Limits struct {
	MinVolumeGib        int64 // default 1
	MaxVolumeGib        int64 // default 100 TiB
	MinPoolGib          int64 // default 1
	MaxPoolGib          int64 // default 10 PiB
	MaxSnapshotsPerVol  int   // default 255
	MaxExportRules      int   // default 64
	FlexMaxThroughput   float64
	MaxVolumeThroughput float64 // per-volume cap for AUTO levels, MiB/s; default 4500
	// MinVolumeThroughput is the floor of an AUTO volume's ceiling, MiB/s
	// (default 4), so that small volumes stay usable: capacity × level alone
	// gives a 1 GiB Standard volume 16 KiB/s.
	MinVolumeThroughput  float64
	MinManualThroughput  float64 // default 1
	MaxManualThroughput  float64 // default 4500
	FlexCustomMinThrough int64   // default 64
	FlexCustomMaxThrough int64   // default 5120
}

// DefaultLimits returns the limits Basin uses unless configured otherwise.
func DefaultLimits() Limits {
	return Limits{
		MinVolumeGib:         1,
		MaxVolumeGib:         100 * 1024,
		MinPoolGib:           1,
		MaxPoolGib:           10 * 1024 * 1024,
		MaxSnapshotsPerVol:   255,
		MaxExportRules:       64,
		FlexMaxThroughput:    1638,
		MaxVolumeThroughput:  4500,
		MinVolumeThroughput:  4,
		MinManualThroughput:  1,
		MaxManualThroughput:  4500,
		FlexCustomMinThrough: 64,
		FlexCustomMaxThrough: 5120,
	}
}

// RateMibpsPerTiB is a service level's throughput density, as NetApp Volumes
// publishes it.
func RateMibpsPerTiB(l ServiceLevel) float64 {
	switch l {
	case LevelStandard, LevelFlex:
		return 16
	case LevelPremium:
		return 64
	case LevelExtreme:
		return 128
	}
	return 0
}

// PoolBudgetMibps is the pool's throughput budget: capacity × rate, with Flex's cap or
// its custom performance setting.
func PoolBudgetMibps(p *Pool, lim Limits) float64 {
	if p.ServiceLevel == LevelFlex && p.CustomPerformanceEnabled && p.TotalThroughputMibps > 0 {
		return float64(p.TotalThroughputMibps)
	}
	b := float64(p.CapacityGib) / 1024 * RateMibpsPerTiB(p.ServiceLevel)
	if p.ServiceLevel == LevelFlex && lim.FlexMaxThroughput > 0 && b > lim.FlexMaxThroughput {
		b = lim.FlexMaxThroughput
	}
	return b
}

// VolumeThroughputMibps is the ceiling a volume gets, and what traffic control
// holds it to: capacity × rate for AUTO pools (between the floor and the cap per
// volume), the pool's shared budget for Flex, the assigned value for MANUAL pools.
func VolumeThroughputMibps(v *Volume, p *Pool, lim Limits) float64 {
	if p.QosType == QosManual {
		return v.ThroughputMibps
	}
	if p.ServiceLevel == LevelFlex {
		return PoolBudgetMibps(p, lim)
	}
	t := float64(v.CapacityGib) / 1024 * RateMibpsPerTiB(p.ServiceLevel)
	if t < lim.MinVolumeThroughput {
		t = lim.MinVolumeThroughput
	}
	if lim.MaxVolumeThroughput > 0 && t > lim.MaxVolumeThroughput {
		t = lim.MaxVolumeThroughput
	}
	return t
}
