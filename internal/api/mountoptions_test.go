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
