package smb

import (
	"net/netip"
	"strings"
	"testing"
)

func TestMountOptions(t *testing.T) {
	mo, err := MountOptions(MountSpec{MachineName: "BASIN-3F2A", Realm: "Basin.Test", Workgroup: "basin", Share: "vol1",
		Address: netip.MustParseAddr("10.99.72.21")})
	if err != nil {
		t.Fatal(err)
	}
	if mo.Export != "vol1" || mo.ExportFull != `\\basin-3f2a.basin.test\vol1` || mo.IPAddress != "10.99.72.21" {
		t.Fatalf("%+v", mo)
	}
	for _, want := range []string{
		`net use Z: \\basin-3f2a.basin.test\vol1`,
		"kinit USER@BASIN.TEST",
		"mount -t cifs //basin-3f2a.basin.test/vol1 /mnt/vol1 -o sec=krb5,cruid=$(id -u),vers=3.1.1.",
		"-o username=USER,domain=BASIN,vers=3.1.1 ",
	} {
		if !strings.Contains(mo.Instructions, want) {
			t.Errorf("instructions lack %q:\n%s", want, mo.Instructions)
		}
	}
	if strings.Contains(mo.Instructions, "seal") {
		t.Error("sealing asked for a share that does not require encryption")
	}

	enc, err := MountOptions(MountSpec{MachineName: "BASIN-3F2A", Realm: "basin.test", Share: "vol1", Encrypt: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(enc.Instructions, "vers=3.1.1,seal") || enc.IPAddress != "" {
		t.Fatalf("%+v", enc)
	}
	// Without a workgroup the realm's first label stands in.
	if !strings.Contains(enc.Instructions, "domain=BASIN,") {
		t.Fatalf("%s", enc.Instructions)
	}
}

func TestMountOptionsInvalid(t *testing.T) {
	ok := MountSpec{MachineName: "BASIN-3F2A", Realm: "basin.test", Share: "vol1"}
	for _, tc := range []struct {
		name, field string
		mod         func(*MountSpec)
	}{
		{"share", "shareName", func(s *MountSpec) { s.Share = `a\b` }},
		{"realm", "domain", func(s *MountSpec) { s.Realm = "basin test" }},
		{"machine", "machineName", func(s *MountSpec) { s.MachineName = "BASIN" }},
		{"workgroup", "workgroup", func(s *MountSpec) { s.Workgroup = "a b" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.mod(&s)
			_, err := MountOptions(s)
			wantField(t, err, tc.field)
		})
	}
}
