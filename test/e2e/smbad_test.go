package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSMBActiveDirectory: a real Samba AD DC beside a Basin server; an Active
// Directory policy created through the v1 API with the DC's delegated user; a pool
// using it; an SMB volume. The volume's mount options name its server
// (PREFIX-XXXX.realm), whose computer object is in the policy's OU and whose name
// resolves through the AD's DNS to the volume's endpoint; from a client host a
// domain user writes and reads back the same bytes, a wrong password is refused;
// deleting the volume and the pool leaves the domain.
func TestSMBActiveDirectory(t *testing.T) {
	l := newSMBLab(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sh := l.volume("docs", map[string]any{"unixPermissions": "0777"})

	// The computer object is in the policy's OU, and the server's name resolves
	// through the AD's DNS to the volume's endpoint.
	if ou, ok, err := l.dc.ComputerExists(ctx, sh.Machine); err != nil || !ok || !strings.EqualFold(ou, l.dc.OU) {
		t.Fatalf("computer %s: in %q, found %v, err %v; want it in %s", sh.Machine, ou, ok, err, l.dc.OU)
	}
	if addrs, err := l.dc.LookupA(ctx, sh.Server); err != nil || !slices.Contains(addrs, sh.Endpoint.String()) {
		t.Fatalf("%s resolves to %v (%v), want %s", sh.Server, addrs, err, sh.Endpoint)
	}

	// A domain user writes and reads back the same bytes; a wrong password is refused.
	dir := t.TempDir()
	data := make([]byte, 3<<20+12345)
	rand.Read(data)
	in, out := filepath.Join(dir, "in.bin"), filepath.Join(dir, "out.bin")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	alice := l.user("alice")
	if o, err := l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", "put "+in+" f.bin; get f.bin "+out); err != nil {
		t.Fatalf("smbclient as %s: %v\n%s", alice.Name, err, o)
	}
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (%v), want the %d written", len(got), err, len(data))
	}
	wrong := alice
	wrong.Password = "not-" + alice.Password
	if o, err := l.smbclient(ctx, sh, wrong, "-m", "SMB3", "-c", "ls"); err == nil || !strings.Contains(o, "LOGON_FAILURE") {
		t.Fatalf("a wrong password: %v\n%s", err, o)
	}

	// The last pool's removal leaves the domain.
	mutate(t, l.c, "DELETE", loc+"/volumes/docs", nil)
	mutate(t, l.c, "DELETE", loc+"/storagePools/smb", nil)
	if _, ok, err := l.dc.ComputerExists(ctx, sh.Machine); err != nil || ok {
		t.Fatalf("computer %s still in the domain after the last pool went (err %v)", sh.Machine, err)
	}
}
