package model

import (
	"net/netip"
	"testing"
)

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
	// A 10 TiB Extreme manual pool has 1,280 MiB/s to distribute (10 TiB × 128).
	if got := PoolBudgetMibps(&Pool{ServiceLevel: LevelExtreme, CapacityGib: 10240}, lim); got != 1280 {
		t.Errorf("budget = %v", got)
	}
}

func TestDefaultEndpoints(t *testing.T) {
	for cidr, want := range map[string][2]string{
		"10.99.0.0/24": {"10.99.0.10", "10.99.0.127"},
		"10.99.0.0/25": {"10.99.0.10", "10.99.0.63"},
		"10.99.7.0/27": {"10.99.7.10", "10.99.7.15"},
		"10.99.7.0/28": {"10.99.7.2", "10.99.7.7"},
		"10.98.0.0/16": {"10.98.0.10", "10.98.127.255"},
	} {
		f, l := DefaultEndpoints(netip.MustParsePrefix(cidr))
		if f.String() != want[0] || l.String() != want[1] {
			t.Errorf("%s: %s-%s, want %s-%s", cidr, f, l, want[0], want[1])
		}
	}
}
