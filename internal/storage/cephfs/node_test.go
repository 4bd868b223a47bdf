package cephfs

import "testing"

// confValue reads a key of the minimal ceph.conf the monitors generate.
func TestConfValue(t *testing.T) {
	conf := "# minimal ceph.conf for 5a3c0b9e-1f2d-4c55-9a7b-0d6a1f5e2c11\n[global]\n\tfsid = 5a3c0b9e-1f2d-4c55-9a7b-0d6a1f5e2c11\n\tmon_host = [v2:10.99.77.2:3300/0,v1:10.99.77.2:6789/0]\n"
	if v, ok := confValue(conf, "fsid"); !ok || v != "5a3c0b9e-1f2d-4c55-9a7b-0d6a1f5e2c11" {
		t.Fatalf("fsid: %q %v", v, ok)
	}
	if v, ok := confValue(conf, "mon_host"); !ok || v != "[v2:10.99.77.2:3300/0,v1:10.99.77.2:6789/0]" {
		t.Fatalf("mon_host: %q %v", v, ok)
	}
	if _, ok := confValue(conf, "fs"); ok {
		t.Fatal("found a key the conf lacks")
	}
}
