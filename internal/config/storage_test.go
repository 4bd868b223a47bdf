package config

import (
	"strings"
	"testing"
)

func TestParseCephFS(t *testing.T) {
	good := map[string]CephFS{
		"cephfs://": {ID: "basin", FS: "cephfs", Group: "basin", Conf: "/etc/ceph/ceph.conf", Keyring: "/etc/ceph/ceph.client.basin.keyring"},
		"cephfs://nas@tank/tenants?conf=/srv/ceph/c1.conf": {ID: "nas", FS: "tank", Group: "tenants", Conf: "/srv/ceph/c1.conf",
			Keyring: "/srv/ceph/ceph.client.nas.keyring"},
		"cephfs://cephfs?keyring=/root/k&conf=/c/ceph.conf": {ID: "basin", FS: "cephfs", Group: "basin", Conf: "/c/ceph.conf", Keyring: "/root/k"},
		"cephfs://basin.n1@/g-1":                            {ID: "basin.n1", FS: "cephfs", Group: "g-1", Conf: "/etc/ceph/ceph.conf", Keyring: "/etc/ceph/ceph.client.basin.n1.keyring"},
		"cephfs://?nfs_recovery_pool=basin-nfs": {ID: "basin", FS: "cephfs", Group: "basin", Conf: "/etc/ceph/ceph.conf", Keyring: "/etc/ceph/ceph.client.basin.keyring",
			NFSRecoveryPool: "basin-nfs", NFSRecoveryID: "basin-ganesha", NFSRecoveryKeyring: "/etc/ceph/ceph.client.basin-ganesha.keyring"},
		"cephfs://?nfs_recovery_pool=p&nfs_recovery_id=g1&nfs_recovery_keyring=/k/g1": {ID: "basin", FS: "cephfs", Group: "basin", Conf: "/etc/ceph/ceph.conf",
			Keyring: "/etc/ceph/ceph.client.basin.keyring", NFSRecoveryPool: "p", NFSRecoveryID: "g1", NFSRecoveryKeyring: "/k/g1"},
	}
	for in, want := range good {
		got, err := ParseCephFS(in)
		if err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"cephfs://basin:AQBsecret==@cephfs":                    "no key in the URL",
		"cephfs://cephfs?conf=etc/ceph.conf":                   "conf must be a clean absolute path",
		"cephfs://cephfs?keyring=/a/../k":                      "keyring must be a clean absolute path",
		"cephfs://cephfs?mon=10.0.0.1":                         `unknown parameter "mon"`,
		"cephfs://cephfs?conf=/a&conf=/b":                      "conf given 2 times",
		"cephfs://ce;ph":                                       "",
		"cephfs://cephfs/a/b":                                  `subvolume group "a/b"`,
		"cephfs://cephfs/_nogroup":                             "use letters",
		"cephfs://-x@cephfs":                                   `user "-x"`,
		"cephfs://cephfs#frag":                                 "fragment",
		"cephfs://cephfs/" + strings.Repeat("g", 64):           "at most 63",
		"cephfs:cephfs":                                        "want cephfs://",
		"cephfs://?nfs_recovery_id=g1":                         "need nfs_recovery_pool",
		"cephfs://?nfs_recovery_pool=p&nfs_recovery_id=basin":  "a user of its own",
		"cephfs://?nfs_recovery_pool=a%20b":                    `nfs_recovery_pool "a b"`,
		"cephfs://?nfs_recovery_pool=p&nfs_recovery_keyring=k": "nfs_recovery_keyring must be a clean absolute path",
	}
	for in, want := range bad {
		_, err := ParseCephFS(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", in, err, want)
		}
	}
}

// --storage takes btrfs or a cephfs:// URL; --store cephfs://… is taken as
// --storage; the btrfs-only flags are refused beside a CephFS.
func TestStorageConfig(t *testing.T) {
	c := Default()
	c.Store = "cephfs://basin@cephfs/basin"
	if err := c.Normalize(); err != nil || c.Storage != "cephfs://basin@cephfs/basin" || c.Store != "" {
		t.Fatalf("Normalize: %v; Storage %q, Store %q", err, c.Storage, c.Store)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("CephFS config invalid: %v", err)
	}
	if cf, ok := c.CephFS(); !ok || cf.FS != "cephfs" || cf.ID != "basin" {
		t.Errorf("CephFS(): %+v %v", cf, ok)
	}
	c = Default()
	c.Store, c.Storage = "cephfs://a", "cephfs://b"
	if err := c.Normalize(); err == nil || !strings.Contains(err.Error(), "--storage") {
		t.Errorf("two CephFS: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"unknown backend", func(c *Config) { c.Storage = "zfs" }, "--storage"},
		{"bad URL", func(c *Config) { c.Storage = "cephfs://x?conf=rel" }, "conf"},
		{"store size beside CephFS", func(c *Config) { c.Storage, c.StoreSize = "cephfs://", 2<<30 }, "--store-size"},
		{"store dir beside CephFS", func(c *Config) { c.Storage, c.Store = "cephfs://", "/srv" }, "--store"},
		{"reserve beside CephFS", func(c *Config) { c.Storage, c.StoreReserve = "cephfs://", -1 }, "--store-reserve"},
		{"thin beside CephFS", func(c *Config) { c.Storage, c.ThinInitial = "cephfs://", 1<<30 }, "--thin-initial"},
	} {
		c := Default()
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	c = Default()
	c.Storage = "btrfs"
	if err := c.Validate(); err != nil {
		t.Errorf("--storage btrfs: %v", err)
	}
	if _, ok := c.CephFS(); ok {
		t.Error("btrfs config reports a CephFS")
	}
}

func TestCephNetwork(t *testing.T) {
	cn, err := ParseCephNetwork("bceph0,10.99.79.0/24,10.99.79.100-10.99.79.101")
	if err != nil {
		t.Fatal(err)
	}
	nets := []Network{{Name: "a"}, {Name: "b"}}
	addrs, err := cn.Addrs(nets)
	if err != nil || addrs["a"].String() != "10.99.79.100/24" || addrs["b"].String() != "10.99.79.101/24" {
		t.Errorf("Addrs: %v %v", addrs, err)
	}
	if _, err := cn.Addrs(append(nets, Network{Name: "c"})); err == nil || !strings.Contains(err.Error(), "2 addresses for 3 networks") {
		t.Errorf("short range: %v", err)
	}
	// The node's mounts take the last address, which the sandboxes leave free.
	if a, err := cn.MountAddr(nets[:1]); err != nil || a.String() != "10.99.79.101/24" {
		t.Errorf("MountAddr with one network: %v %v", a, err)
	}
	if _, err := cn.MountAddr(nets); err == nil || !strings.Contains(err.Error(), "no address left for this node's volume mounts") {
		t.Errorf("MountAddr with the range full: %v", err)
	}
	if a, err := cn.MountAddr(nil); err != nil || a.String() != "10.99.79.101/24" {
		t.Errorf("MountAddr without networks: %v %v", a, err)
	}
	for in, want := range map[string]string{
		"bceph0,10.99.79.0/24":                                    "want BRIDGE,CIDR,FIRST-LAST",
		"bceph0,10.99.79.0/24,10.99.79.0-10.99.79.9":              "host addresses",
		"bceph0,10.99.79.0/24,10.99.79.9-10.99.79.255":            "host addresses",
		"bceph0,10.99.79.0/24,10.99.79.9-10.99.80.3":              "host addresses",
		"bceph0,10.99.79.0/24,10.99.79.9-10.99.79.3":              "FIRST not above LAST",
		"bceph0,fd00::/64,fd00::2-fd00::3":                        "not an IPv4 subnet",
		"averyverylongbridge,10.99.79.0/24,10.99.79.2-10.99.79.3": "longer than 15",
	} {
		if _, err := ParseCephNetwork(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
	c := Default()
	c.Storage, c.CephNetwork = "cephfs://", "bceph0,10.99.79.0/24,10.99.79.100-10.99.79.119"
	if err := c.Validate(); err != nil {
		t.Errorf("valid --ceph-network: %v", err)
	}
	c.CephNetwork = "basin0,10.99.79.0/24,10.99.79.100-10.99.79.119"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "tenants would reach the cluster") {
		t.Errorf("Ceph link on a tenant bridge: %v", err)
	}
	c.CephNetwork = "bceph0,10.99.0.0/16,10.99.79.100-10.99.79.119"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "tenants would reach the cluster") {
		t.Errorf("Ceph subnet over a tenant subnet: %v", err)
	}
	c = Default()
	c.CephNetwork = "bceph0,10.99.79.0/24,10.99.79.100-10.99.79.119"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--ceph-network is for CephFS") {
		t.Errorf("--ceph-network beside btrfs: %v", err)
	}
	// --failover: PostgreSQL and CephFS, both.
	for _, f := range []struct{ db, storage string }{{"", "cephfs://"}, {"postgres://db/basin", ""}, {"postgres://db/basin", "btrfs"}} {
		c = Default()
		c.Failover, c.Database, c.Storage = true, f.db, f.storage
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--failover needs") {
			t.Errorf("--failover with database %q, storage %q: %v", f.db, f.storage, err)
		}
	}
	c = Default()
	c.Failover, c.Database, c.Storage = true, "postgres://db/basin", "cephfs://"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--failover needs --ceph-network") {
		t.Errorf("--failover without --ceph-network: %v", err)
	}
	c.CephNetwork = "bceph0,10.99.79.0/24,10.99.79.100-10.99.79.119"
	if err := c.Validate(); err != nil {
		t.Errorf("--failover on PostgreSQL and CephFS: %v", err)
	}
}
