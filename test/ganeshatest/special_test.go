package ganeshatest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/nfsops"
	"github.com/basin-nas/basin/test/nfsraw"
)

// nfs3Conns mounts dir over NFSv3 as client ip with conns connections.
func (l *lab) nfs3Conns(t *testing.T, ctx context.Context, ip, dir string, conns int) *nfs3.Client {
	t.Helper()
	c, err := nfs3.Mount(ctx, l.srv.Host, dir, nfs3.Options{NFSPort: l.srv.NFSPort, MountPort: l.srv.MountPort, LocalIP: ip,
		Conns: conns, Auth: nfs3.Auth{Machine: "attacker"}})
	if err != nil {
		t.Fatalf("mount %s as %s: %v", dir, ip, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSpecialFiles attacks the server with special files, as a client with write
// access to its own export: it cannot make devices, and every NFSv3 procedure and
// NFSv4.0/4.1 operation that takes a handle, aimed at a FIFO or a socket (COMMIT
// included), one at a time and 300 at once, comes back at once without the
// object's data ever being opened — while another tenant's client reads its
// export in under 5 s throughout and after.
func TestSpecialFiles(t *testing.T) {
	l := newLab(t)
	ctx := Context(t, 10*time.Minute)
	a := l.nfs3(t, ctx, ipA, "/a")
	b := l.nfs3(t, ctx, ipB, "/b")
	canary, _, err := b.Lookup(ctx, b.Root, "canary-b")
	if err != nil {
		t.Fatal(err)
	}
	r := nfsops.StartReader(ctx, b, canary, "tenant b")
	defer func() { r.Stop() }()

	c4 := l.nfs4(t, ctx, ipA)
	root4, err := c4.LookupPath(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	auth := nfsraw.Auth{LocalIP: ipA, Machine: "attacker"}
	nfsops.AttackSpecialFiles(t, ctx, nfsops.Attacker{
		V3: a, Flood: l.nfs3Conns(t, ctx, ipA, "/a", 8), Root4: root4,
		Dial: map[string]nfsops.Dial4{
			"NFSv4.0": func(ctx context.Context) (*nfsraw.Client, error) {
				return nfsraw.Dial(ctx, l.srv.Host, l.srv.NFSPort, auth)
			},
			"NFSv4.1": func(ctx context.Context) (*nfsraw.Client, error) {
				return nfsraw.Dial41(ctx, l.srv.Host, l.srv.NFSPort, auth)
			},
		},
		OnDisk: func(name string) bool { _, err := os.Lstat(filepath.Join(l.a, name)); return err == nil },
	}, r)

	// After: the other tenant mounts and reads as before.
	time.Sleep(time.Second)
	r.Stop()
	r = nfsops.StartReader(ctx, b, canary, "tenant b")
	mctx, cancel := context.WithTimeout(ctx, nfsops.ReadBound)
	m, err := nfs3.Mount(mctx, l.srv.Host, "/b", nfs3.Options{NFSPort: l.srv.NFSPort, MountPort: l.srv.MountPort, LocalIP: ipB})
	cancel()
	if err != nil {
		t.Errorf("another tenant's MOUNT after the attack: %v", err)
	} else {
		m.Close()
	}
	time.Sleep(2 * time.Second)
	r.Check(t, "after the attack")
	if t.Failed() {
		t.Logf("ganesha log:\n%s", l.srv.Log())
	}
}
