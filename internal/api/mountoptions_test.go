package api

import (
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/smb"
)

// An SMB volume's mount options give its UNC path by the server's name (Kerberos
// needs the name), its endpoint, and sealing on Linux when the share is
// encrypted; before it is shared (no server yet) it has none, and NFS entries are
// unchanged beside it.
func TestSMBMountOptions(t *testing.T) {
	v := &model.Volume{ShareName: "docs", Endpoint: "10.99.0.20", Protocols: []model.Protocol{model.ProtocolSMB, model.ProtocolNFSv3}}
	if mo := mountOptions(v); len(mo) != 1 || mo[0].Protocol != 1 {
		t.Fatalf("not yet shared: %+v, want the NFSv3 entry alone", mo)
	}
	v.SMBServer = "BASIN-1A2B.basin.test"
	v.SMBSettings = []int32{int32(smb.EncryptData)}
	mo := mountOptions(v)
	if len(mo) != 2 {
		t.Fatalf("%+v: want an SMB and an NFSv3 entry", mo)
	}
	s := mo[0]
	if s.ExportFull != `\\basin-1a2b.basin.test\docs` || s.Export != "docs" || s.IPAddress != "10.99.0.20" || s.Protocol != 3 {
		t.Fatalf("SMB entry %+v", s)
	}
	if !strings.Contains(s.Instructions, "net use") || !strings.Contains(s.Instructions, "seal") {
		t.Fatalf("instructions %q: want net use and sealing for an encrypted share", s.Instructions)
	}
	v.SMBSettings = nil
	if s := mountOptions(v)[0]; strings.Contains(s.Instructions, "seal") {
		t.Fatalf("instructions %q: sealing asked for an unencrypted share", s.Instructions)
	}
}

// NFS mount instructions follow the export policy, per protocol: -o ro where the
// rules that apply let clients only read, -o rw where some may write (naming the
// read-only clients, if any), and a word when no rule lets anyone in.
func TestNFSMountOptionsFollowExportPolicy(t *testing.T) {
	str := func(s string) *string { return &s }
	access := func(a int32) *int32 { return &a }
	rule := func(clients string, a int32, v3, v4 bool) model.ExportRule {
		return model.ExportRule{AllowedClients: str(clients), AccessType: access(a), NFSv3: &v3, NFSv4: &v4}
	}
	cases := []struct {
		name       string
		rules      []model.ExportRule
		v3, v4     string // the -o option each protocol's command starts with
		v3Has, not string
	}{
		{"read-write", []model.ExportRule{rule("10.0.0.0/8", model.AccessReadWrite, true, true)}, "-o rw,", "-o rw,", "Only clients its export policy allows", "-o ro"},
		{"read-only", []model.ExportRule{rule("10.0.0.0/8", model.AccessReadOnly, true, true)}, "-o ro,", "-o ro,", "only read it", "-o rw"},
		{"mixed", []model.ExportRule{rule("10.0.0.5", model.AccessReadOnly, true, true), rule("10.0.0.0/8", model.AccessReadWrite, true, true)},
			"-o rw,", "-o rw,", "(10.0.0.5) mount with -o ro", ""},
		{"per protocol", []model.ExportRule{rule("10.0.0.0/8", model.AccessReadWrite, true, false), rule("10.0.0.0/8", model.AccessReadOnly, false, true)},
			"-o rw,", "-o ro,", "Only clients", ""},
		{"read-none only", []model.ExportRule{rule("10.0.0.0/8", model.AccessReadNone, true, true)}, "-o rw,", "-o rw,", "lets no client mount it over NFSv3", ""},
		{"no policy", nil, "-o rw,", "-o rw,", "lets no client mount it over NFSv3", ""},
	}
	for _, tc := range cases {
		v := &model.Volume{ShareName: "v", Endpoint: "10.99.0.20", Protocols: []model.Protocol{model.ProtocolNFSv3, model.ProtocolNFSv4},
			ExportRules: tc.rules, HasExportPolicy: tc.rules != nil}
		mo := mountOptions(v)
		if len(mo) != 2 {
			t.Fatalf("%s: %+v", tc.name, mo)
		}
		if !strings.Contains(mo[0].Instructions, tc.v3) || !strings.Contains(mo[1].Instructions, tc.v4) || !strings.Contains(mo[0].Instructions, tc.v3Has) ||
			(tc.not != "" && strings.Contains(mo[0].Instructions+mo[1].Instructions, tc.not)) {
			t.Errorf("%s:\n v3 %q\n v4 %q\nwant v3 %q … %q, v4 %q, not %q", tc.name, mo[0].Instructions, mo[1].Instructions, tc.v3, tc.v3Has, tc.v4, tc.not)
		}
	}
}

// A Kerberos volume's NFSv4.1 mount names its server by DNS name (its
// tickets are for nfs/<name>) with the strongest flavor its rules admit.
func TestKerberosMountOptions(t *testing.T) {
	yes, clients := true, "10.99.0.0/24"
	rw := model.AccessReadWrite
	v := &model.Volume{ShareName: "krb", Endpoint: "10.99.0.20", Protocols: []model.Protocol{model.ProtocolNFSv4}, KerberosEnabled: true,
		ExportRules: []model.ExportRule{{AllowedClients: &clients, AccessType: &rw, NFSv4: &yes, Kerberos5ReadWrite: &yes, Kerberos5iReadWrite: &yes}}}
	mo := mountOptions(v)
	if len(mo) != 1 || mo[0].ExportFull != "SERVER:/krb" || !strings.Contains(mo[0].Instructions, "known once") {
		t.Fatalf("before its export: %+v", mo)
	}
	v.KerberosServer = "basin-1a2b.basin.test"
	m := mountOptions(v)[0]
	if m.ExportFull != "basin-1a2b.basin.test:/krb" || m.IPAddress != "10.99.0.20" ||
		!strings.Contains(m.Instructions, "-o rw,hard,sec=krb5i,vers=4.1") || !strings.Contains(m.Instructions, "nfs/basin-1a2b.basin.test") {
		t.Fatalf("mount option %+v", m)
	}
	v.ExportRules[0].Kerberos5pReadOnly = &yes
	if m := mountOptions(v)[0]; !strings.Contains(m.Instructions, "-o ro,hard,sec=krb5p,") {
		t.Fatalf("with a read-only krb5p flavor: %q", m.Instructions)
	}
}
