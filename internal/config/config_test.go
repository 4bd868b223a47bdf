package config

import (
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
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
		{"bad metrics listen", func(c *Config) { c.MetricsListen = "9464" }, "--metrics-listen"},
		{"metrics on the API's address", func(c *Config) { c.MetricsListen = c.Listen }, "--metrics-listen"},
		{"bad grpc listen", func(c *Config) { c.GRPCListen = "8790" }, "--grpc-listen"},
		{"grpc on the API's address", func(c *Config) { c.GRPCListen = c.Listen }, "--grpc-listen"},
		{"grpc key without its certificate", func(c *Config) { c.GRPCListen, c.GRPCKeyFile = "127.0.0.1:8790", "/k.pem" }, "go together"},
		{"grpc certificate without grpc", func(c *Config) { c.GRPCCertFile, c.GRPCKeyFile = "/c.pem", "/k.pem" }, "--grpc-listen"},
		{"no location", func(c *Config) { c.Locations = nil }, "--location"},
		{"bad location", func(c *Config) { c.Locations = []string{"US East"} }, "--location"},
		{"duplicate location", func(c *Config) { c.Locations = []string{"a", "a"} }, "twice"},
		{"tiny store", func(c *Config) { c.StoreSize = 1 << 20 }, "--store-size"},
		{"tiny thin volumes", func(c *Config) { c.ThinInitial = 1 << 20 }, "--thin-initial"},
		{"relative store", func(c *Config) { c.Store = "mnt" }, "--store"},
		{"node ID with capitals", func(c *Config) { c.NodeID = "Node1" }, "--node-id"},
		{"node ID with a dot", func(c *Config) { c.NodeID = "node.1" }, "--node-id"},
		{"public URL with a path", func(c *Config) { c.PublicURL = "https://basin.example.com/v1/" }, "--public-url"},
		{"public URL not http", func(c *Config) { c.PublicURL = "ftp://basin.example.com/" }, "--public-url"},
		{"public URL without host", func(c *Config) { c.PublicURL = "https:///" }, "--public-url"},
		{"relative secrets key file", func(c *Config) { c.SecretsKeyFile = "secrets.key" }, "--secrets-key-file"},
		{"database not a URL", func(c *Config) { c.Database = "/var/lib/basin/basin.db" }, "--database"},
		{"database of another kind", func(c *Config) { c.Database = "mysql://db/basin" }, "--database"},
		{"store a URL, not normalized", func(c *Config) { c.Store = "postgres://db/basin" }, "--store"},
		{"volume bounds", func(c *Config) { c.Limits.MaxVolumeGib = 0 }, "volume capacity"},
		{"zero overcommit", func(c *Config) { c.OvercommitRatio = 0 }, "--overcommit-ratio"},
		{"negative overcommit", func(c *Config) { c.OvercommitRatio = -1 }, "--overcommit-ratio"},
		{"NaN overcommit", func(c *Config) { c.OvercommitRatio = math.NaN() }, "--overcommit-ratio"},
		{"negative project cap", func(c *Config) { c.ProjectThroughputCapMibps = -1 }, "--project-throughput-cap-mibps"},
		{"NaN project cap", func(c *Config) { c.ProjectThroughputCapMibps = math.NaN() }, "--project-throughput-cap-mibps"},
		{"huge project cap", func(c *Config) { c.ProjectThroughputCapMibps = 1e12 }, "--project-throughput-cap-mibps"},
		{"no endpoint range", func(c *Config) { c.Networks[0].FirstEndpoint = netip.Addr{} }, "endpoint range"},
		{"range outside the subnet", func(c *Config) { c.Networks[0].LastEndpoint = netip.MustParseAddr("10.99.1.5") }, "endpoint range"},
		{"range on the host address", func(c *Config) { c.Networks[0].FirstEndpoint = netip.MustParseAddr("10.99.0.1") }, "endpoint range"},
		{"range on broadcast", func(c *Config) { c.Networks[0].LastEndpoint = netip.MustParseAddr("10.99.0.255") }, "endpoint range"},
		{"range reversed", func(c *Config) { c.Networks[0].FirstEndpoint = netip.MustParseAddr("10.99.0.200") }, "endpoint range"},
		{"no read timeout", func(c *Config) { c.HTTP.ReadTimeout = 0 }, "--http-read-timeout"},
		{"no header timeout", func(c *Config) { c.HTTP.ReadHeaderTimeout = 0 }, "--http-read-header-timeout"},
		{"no idle timeout", func(c *Config) { c.HTTP.IdleTimeout = -1 }, "--http-idle-timeout"},
		{"write timeout under sync wait", func(c *Config) { c.HTTP.WriteTimeout = c.HTTP.ReadTimeout + time.Second }, "--http-write-timeout"},
		{"tiny headers", func(c *Config) { c.HTTP.MaxHeaderBytes = 100 }, "--http-max-header-bytes"},
		{"no connections", func(c *Config) { c.HTTP.MaxConns = 0 }, "--http-max-conns"},
		{"no stuck bound", func(c *Config) { c.NFSStuckAfter = 0 }, "--nfs-stuck-after"},
		{"stuck bound in ms", func(c *Config) { c.NFSStuckAfter = 500 * time.Millisecond }, "--nfs-stuck-after"},
		{"wedged bound of a week", func(c *Config) { c.NFSWedgedAfter = 7 * 24 * time.Hour }, "--nfs-wedged-after"},
		{"no connections per source", func(c *Config) { c.HTTP.MaxConnsPerSource = 0 }, "--http-max-conns-per-source"},
		{"more per source than in total", func(c *Config) { c.HTTP.MaxConnsPerSource = c.HTTP.MaxConns + 1 }, "--http-max-conns-per-source"},
		{"failover without room for the mounts' address", func(c *Config) {
			c.Database, c.Storage, c.Failover = "postgres://db/basin", "cephfs://basin@cephfs/basin", true
			c.CephNetwork = "bceph0,10.20.0.0/24,10.20.0.200-10.20.0.200" // one network, one address
		}, "no address left for this node's volume mounts"},
	}
	for _, tc := range cases {
		c := Default()
		c.Networks = slices.Clone(c.Networks)
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}

// With room for it, the same failover configuration is valid: the refusal
// above is the mounts' address alone.
func TestValidateFailoverMountAddr(t *testing.T) {
	c := Default()
	c.Database, c.Storage, c.Failover = "postgres://db/basin", "cephfs://basin@cephfs/basin", true
	c.CephNetwork = "bceph0,10.20.0.0/24,10.20.0.200-10.20.0.201"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// The dataplane's --network parser and the API's fallback give a subnet the same
// default endpoint range.
func TestDefaultEndpointRangesAgree(t *testing.T) {
	for _, cidr := range []string{"10.99.0.0/24", "10.99.0.0/25", "10.99.7.0/27", "10.99.7.0/28", "10.98.0.0/16", "10.0.0.0/8"} {
		n, err := ParseNetwork("n=br0," + cidr)
		if err != nil {
			t.Fatal(err)
		}
		f, l := model.DefaultEndpoints(n.Prefix)
		if f != n.FirstEndpoint || l != n.LastEndpoint {
			t.Errorf("%s: dataplane %s-%s, model %s-%s", cidr, n.FirstEndpoint, n.LastEndpoint, f, l)
		}
		c := Default()
		c.Networks = []Network{n}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", cidr, err)
		}
	}
}

// Whatever --network spec the parser accepts gives a network Validate accepts.
func FuzzParseNetwork(f *testing.F) {
	for _, s := range []string{"default=basin0,10.99.0.0/24", "n=br1,10.99.0.0/24,10.99.0.200-10.99.0.250", "n=br1,10.99.7.0/28",
		"n=br1,10.0.0.0/8", "n=br1,10.99.0.0/24,10.99.0.2-10.99.0.254", "n=b,1.2.3.4/28,1.2.3.2-1.2.3.14"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		n, err := ParseNetwork(spec)
		if err != nil {
			return
		}
		if err := checkEndpointRange(n); err != nil {
			t.Fatalf("%q parsed to %+v, which Validate refuses: %v", spec, n, err)
		}
	})
}

// --store postgres://… is taken as --database (the URL is no directory); a
// directory stays the volume store; two different databases are refused.
func TestNormalizeDatabase(t *testing.T) {
	c := Default()
	c.Store = "postgresql://basin@db.example/basin?sslmode=verify-full"
	if err := c.Normalize(); err != nil || c.Database != "postgresql://basin@db.example/basin?sslmode=verify-full" || c.Store != "" {
		t.Errorf("Normalize: %v; Database %q, Store %q", err, c.Database, c.Store)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("normalized config invalid: %v", err)
	}
	c = Default()
	c.Store, c.Database = "/srv/volumes", "postgres://db/basin"
	if err := c.Normalize(); err != nil || c.Store != "/srv/volumes" || c.Database != "postgres://db/basin" {
		t.Errorf("Normalize of a directory: %v; %+v", err, c)
	}
	c = Default()
	c.Store, c.Database = "postgres://a/basin", "postgres://b/basin"
	if err := c.Normalize(); err == nil || !strings.Contains(err.Error(), "--database") {
		t.Errorf("two databases: %v", err)
	}
}

func TestNodeIDOrHost(t *testing.T) {
	for host, want := range map[string]string{"nas-01.example.com": "nas-01", "NAS_02": "nas-02", "": "local", "---": "local",
		strings.Repeat("a", 70): strings.Repeat("a", 63)} {
		c := Default()
		if got := c.NodeIDOrHost(host); got != want || !nodeIDRE.MatchString(got) {
			t.Errorf("host %q: node ID %q, want %q", host, got, want)
		}
	}
	c := Default()
	c.NodeID = "n1"
	if got := c.NodeIDOrHost("other"); got != "n1" {
		t.Errorf("--node-id n1: %q", got)
	}
}
