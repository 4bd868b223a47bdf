package model

import "testing"

func TestThroughput(t *testing.T) {
	lim := DefaultLimits()
	cases := []struct {
		name string
		pool Pool
		vol  Volume
		want float64
	}{
		{"premium 1500 GiB", Pool{ServiceLevel: LevelPremium, CapacityGib: 4096}, Volume{CapacityGib: 1500}, 93.75},
		{"extreme 4 TiB", Pool{ServiceLevel: LevelExtreme, CapacityGib: 8192}, Volume{CapacityGib: 4096}, 512},
		{"standard 2 TiB", Pool{ServiceLevel: LevelStandard, CapacityGib: 4096}, Volume{CapacityGib: 2048}, 32},
		{"premium 100 GiB", Pool{ServiceLevel: LevelPremium, CapacityGib: 4096}, Volume{CapacityGib: 100}, 6.25},
		{"extreme capped per volume", Pool{ServiceLevel: LevelExtreme, CapacityGib: 100 << 10}, Volume{CapacityGib: 100 << 10}, 4500},
		{"flex shares the pool", Pool{ServiceLevel: LevelFlex, CapacityGib: 10240}, Volume{CapacityGib: 1}, 160},
		{"flex capped", Pool{ServiceLevel: LevelFlex, CapacityGib: 200 << 10}, Volume{CapacityGib: 1}, 1638},
		{"flex custom", Pool{ServiceLevel: LevelFlex, CapacityGib: 1024, CustomPerformanceEnabled: true, TotalThroughputMibps: 300}, Volume{}, 300},
		{"manual", Pool{ServiceLevel: LevelPremium, CapacityGib: 1024, QosType: QosManual}, Volume{CapacityGib: 10, ThroughputMibps: 42}, 42},
	}
	for _, tc := range cases {
		if got := VolumeThroughputMibps(&tc.vol, &tc.pool, lim); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// A 10 TiB Extreme manual pool has 1,280 MiB/s to distribute (API.md §10.5).
	if got := PoolBudgetMibps(&Pool{ServiceLevel: LevelExtreme, CapacityGib: 10240}, lim); got != 1280 {
		t.Errorf("budget = %v", got)
	}
}
