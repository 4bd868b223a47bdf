package config

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	if c := Default(); c.Validate() != nil {
		t.Fatalf("defaults invalid: %v", c.Validate())
	}
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"relative data dir", func(c *Config) { c.DataDir = "data" }, "--data-dir"},
		{"bad listen", func(c *Config) { c.Listen = "8780" }, "--listen"},
		{"no location", func(c *Config) { c.Locations = nil }, "--location"},
		{"bad location", func(c *Config) { c.Locations = []string{"US East"} }, "--location"},
		{"duplicate location", func(c *Config) { c.Locations = []string{"a", "a"} }, "twice"},
		{"tiny store", func(c *Config) { c.StoreSize = 1 << 20 }, "--store-size"},
		{"relative store", func(c *Config) { c.Store = "mnt" }, "--store"},
		{"volume bounds", func(c *Config) { c.Limits.MaxVolumeGib = 0 }, "volume capacity"},
		{"zero overcommit", func(c *Config) { c.OvercommitRatio = 0 }, "--overcommit-ratio"},
		{"negative overcommit", func(c *Config) { c.OvercommitRatio = -1 }, "--overcommit-ratio"},
		{"NaN overcommit", func(c *Config) { c.OvercommitRatio = math.NaN() }, "--overcommit-ratio"},
		{"negative reserve", func(c *Config) { c.StoreReserveGib = -1 }, "--store-reserve-gib"},
		{"no read timeout", func(c *Config) { c.HTTP.ReadTimeout = 0 }, "--http-read-timeout"},
		{"no header timeout", func(c *Config) { c.HTTP.ReadHeaderTimeout = 0 }, "--http-read-header-timeout"},
		{"no idle timeout", func(c *Config) { c.HTTP.IdleTimeout = -1 }, "--http-idle-timeout"},
		{"write timeout under sync wait", func(c *Config) { c.HTTP.WriteTimeout = c.HTTP.ReadTimeout + time.Second }, "--http-write-timeout"},
		{"tiny headers", func(c *Config) { c.HTTP.MaxHeaderBytes = 100 }, "--http-max-header-bytes"},
		{"no connections", func(c *Config) { c.HTTP.MaxConns = 0 }, "--http-max-conns"},
	}
	for _, tc := range cases {
		c := Default()
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}
