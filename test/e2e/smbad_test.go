package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/test/addc"
)

// TestSMBActiveDirectory: a real Samba AD DC beside a Basin server; an Active
// Directory policy created through the v1 API with the DC's delegated user; a pool
// using it; an SMB volume. The volume's mount options name its server
// (PREFIX-XXXX.realm), whose computer object is in the policy's OU and whose name
// resolves through the AD's DNS to the volume's endpoint; from a client host a
// domain user writes and reads back the same bytes, a wrong password is refused;
// deleting the volume and the pool leaves the domain.
func TestSMBActiveDirectory(t *testing.T) {
	if err := addc.Check(); err != nil {
		t.Skipf("no Samba AD DC here: %v", err)
	}
	s := newServer(t)
	s.start()
	c := s.client()
	// The network's bridge comes with its sandbox: an NFS volume brings it up, and
	// the DC joins the bridge before any SMB pool exists.
	nfsPool(t, c)
	s.openVolume(c, "first")
	dc := addc.StartT(t, addc.Options{Name: "bead", Dir: t.TempDir(), Bridge: s.bridge, Addr: s.addrN(200) + "/24"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	realm := strings.ToLower(dc.Realm)
	mutate(t, c, "POST", loc+"/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": realm, "dns": dc.Addr,
		"netBiosPrefix": "BASIN", "organizationalUnit": dc.OU, "username": dc.Delegated.Name, "password": dc.Delegated.Password})
	adName := strings.TrimPrefix(loc, "/v1/") + "/activeDirectories/ad1"
	mutate(t, c, "POST", loc+"/storagePools?storagePoolId=smb", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 2048,
		"network": "projects/p1/global/networks/default", "activeDirectory": adName})
	mutate(t, c, "POST", loc+"/volumes?volumeId=docs", map[string]any{"shareName": "docs", "storagePool": "smb",
		"capacityGib": 100, "protocols": []string{"SMB"}, "unixPermissions": "0777"})

	var v client.Object
	if err := c.Do(ctx, "GET", loc+"/volumes/docs", nil, nil, &v); err != nil {
		t.Fatal(err)
	}
	mos, _ := v["mountOptions"].([]any)
	if len(mos) != 1 {
		t.Fatalf("mountOptions %v: want one SMB entry", v["mountOptions"])
	}
	mo := mos[0].(map[string]any)
	unc, _ := mo["exportFull"].(string)
	ep, _ := mo["ipAddress"].(string)
	m := regexp.MustCompile(`^\\\\(basin-[0-9a-f]{4})\.` + regexp.QuoteMeta(realm) + `\\docs$`).FindStringSubmatch(unc)
	if m == nil || ep == "" {
		t.Fatalf("mount option %v: want \\\\basin-xxxx.%s\\docs and the endpoint", mo, realm)
	}
	machine := strings.ToUpper(m[1])

	// The computer object is in the policy's OU, and the server's name resolves
	// through the AD's DNS to the volume's endpoint.
	if ou, ok, err := dc.ComputerExists(ctx, machine); err != nil || !ok || !strings.EqualFold(ou, dc.OU) {
		t.Fatalf("computer %s: in %q, found %v, err %v; want it in %s", machine, ou, ok, err, dc.OU)
	}
	if addrs, err := dc.LookupA(ctx, strings.ToLower(machine)+"."+realm); err != nil || !slices.Contains(addrs, ep) {
		t.Fatalf("%s.%s resolves to %v (%v), want %s", machine, realm, addrs, err, ep)
	}

	// A domain user writes and reads back the same bytes; a wrong password is refused.
	h := s.host(150)
	dir := t.TempDir()
	data := make([]byte, 3<<20+12345)
	rand.Read(data)
	in, out := filepath.Join(dir, "in.bin"), filepath.Join(dir, "out.bin")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	alice := dc.Users[0]
	smbclient := func(user, password, cmds string) (string, error) {
		return h.Run(ctx, "smbclient", "//"+ep+"/docs", "-m", "SMB3", "-U", dc.Domain+`\`+user+"%"+password, "-c", cmds)
	}
	if o, err := smbclient(alice.Name, alice.Password, "put "+in+" f.bin; get f.bin "+out); err != nil {
		t.Fatalf("smbclient as %s: %v\n%s", alice.Name, err, o)
	}
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (%v), want the %d written", len(got), err, len(data))
	}
	if o, err := smbclient(alice.Name, "not-"+alice.Password, "ls"); err == nil || !strings.Contains(o, "LOGON_FAILURE") {
		t.Fatalf("a wrong password: %v\n%s", err, o)
	}

	// The last pool's removal leaves the domain.
	mutate(t, c, "DELETE", loc+"/volumes/docs", nil)
	mutate(t, c, "DELETE", loc+"/storagePools/smb", nil)
	if _, ok, err := dc.ComputerExists(ctx, machine); err != nil || ok {
		t.Fatalf("computer %s still in the domain after the last pool went (err %v)", machine, err)
	}
}
