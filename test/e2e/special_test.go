package e2e

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/clienthost"
	"github.com/basin-nas/basin/test/nfsops"
	"github.com/basin-nas/basin/test/nfsraw"
)

// TestTenantIsolationSpecialFiles attacks Basin's NFS service with special files
// as vola's client (read-write, root kept): it cannot make devices over NFSv3 or
// NFSv4; it makes a FIFO and a socket, and every NFSv3 procedure and NFSv4.0/4.1
// operation that takes a handle, aimed at them (COMMIT included), comes back at
// once, those that would open their data refused — one at a time, then 300 at
// once. Meanwhile and afterwards volb's client, another project's, reads its
// volume in under 5 s each time and mounts it again, and Ganesha is never
// restarted.
func TestTenantIsolationSpecialFiles(t *testing.T) {
	l := newIsolationLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pids := l.s.ganeshaPIDs()

	a := mount3(t, ctx, l.x, l.epA, "/vola")
	flood := mount3Conns(t, ctx, l.x, l.epA, "/vola", 8)
	b := mount3(t, ctx, l.y, l.epB, "/volb")
	canary, _, err := b.Lookup(ctx, b.Root, "canary-b")
	if err != nil {
		t.Fatal(err)
	}
	r := nfsops.StartReader(ctx, b, canary, "tenant b")
	defer func() { r.Stop() }()

	c4 := dial4(t, ctx, l.x, l.epA)
	root4, err := c4.LookupPath(ctx, "vola")
	if err != nil {
		t.Fatal(err)
	}
	dialer := func(dial func(context.Context, string, int, nfsraw.Auth) (*nfsraw.Client, error)) nfsops.Dial4 {
		return func(ctx context.Context) (c *nfsraw.Client, err error) {
			err = l.x.Within(func() error {
				c, err = dial(ctx, l.epA.String(), 2049, nfsraw.Auth{Machine: "attacker"})
				return err
			})
			return c, err
		}
	}
	nfsops.AttackSpecialFiles(t, ctx, nfsops.Attacker{
		V3: a, Flood: flood, Root4: root4,
		Dial:   map[string]nfsops.Dial4{"NFSv4.0": dialer(nfsraw.Dial), "NFSv4.1": dialer(nfsraw.Dial41)},
		OnDisk: func(name string) bool { _, err := os.Lstat(filepath.Join(l.mountA, name)); return err == nil },
	}, r)

	// After: volb's client mounts and reads as before, from the same Ganesha.
	time.Sleep(time.Second)
	r.Stop()
	r = nfsops.StartReader(ctx, b, canary, "tenant b")
	err = l.y.Within(func() error {
		mctx, cancel := context.WithTimeout(ctx, nfsops.ReadBound)
		defer cancel()
		m, err := nfs3.Mount(mctx, l.epB.String(), "/volb", nfs3.Options{})
		if err == nil {
			m.Close()
		}
		return err
	})
	if err != nil {
		t.Errorf("volb's client cannot mount after the attack: %v", err)
	}
	time.Sleep(2 * time.Second)
	r.Check(t, "after the attack")
	if now := l.s.ganeshaPIDs(); !slices.Equal(now, pids) {
		t.Errorf("Ganesha was restarted during the attack: pids %v, then %v", pids, now)
	}
	if t.Failed() {
		out, _ := exec.Command("tail", "-n", "50", filepath.Join(l.s.dataDir, "sandboxes", "default", "logs", "ganesha.log")).Output()
		t.Logf("ganesha log:\n%s", out)
	}
}

// mount3Conns mounts dir of ep over NFSv3 as host h (root) with conns connections.
func mount3Conns(t *testing.T, ctx context.Context, h *clienthost.Host, ep netip.Addr, dir string, conns int) *nfs3.Client {
	t.Helper()
	var c *nfs3.Client
	err := h.Within(func() (err error) {
		c, err = nfs3.Mount(ctx, ep.String(), dir, nfs3.Options{Conns: conns, Auth: nfs3.Auth{Machine: "attacker"}})
		return err
	})
	if err != nil {
		t.Fatalf("mount %s:%s from %s: %v", ep, dir, h.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// logBound is what Ganesha's log may take in a sandbox, whatever clients send:
// ganesha.log and its one rotated copy, ganesha.log.1, 8 MiB each
// (docs/security.md).
const logBound = 16 << 20

// TestGaneshaLogIsBounded floods an NFS endpoint with malformed calls
// (nfsops.Malformed: NFSv4 COMPOUNDs of a minor version that does not exist, a
// tag that is not UTF-8, no or too many operations; undecodable arguments and
// credentials; unknown programs, versions and procedures) from a client host:
// Ganesha's log grows by a few lines, not one per call, stays under its bound,
// and the volume is still served.
func TestGaneshaLogIsBounded(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	nfsPool(t, c)
	s.openVolume(c, "vol1")
	ep := endpoint(t, c, "vol1")
	h := s.host(201)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logs := filepath.Join(s.dataDir, "sandboxes", "default", "logs")
	size := func() (total int64, files map[string]int64) {
		files = map[string]int64{}
		matches, _ := filepath.Glob(filepath.Join(logs, "ganesha*"))
		for _, m := range matches {
			if st, err := os.Stat(m); err == nil {
				files[filepath.Base(m)] = st.Size()
				total += st.Size()
			}
		}
		return total, files
	}
	before, _ := size()
	const calls = 20000
	t0 := time.Now()
	answered, err := nfsops.SendMalformed(ctx, func(ctx context.Context) (c net.Conn, err error) {
		err = h.Within(func() error {
			var d net.Dialer
			c, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(ep, 2049).String())
			return err
		})
		return c, err
	}, calls)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	time.Sleep(2 * time.Second) // what Ganesha still writes
	after, files := size()
	t.Logf("%d malformed calls in %v, %d answered; Ganesha's log files %v: %d bytes more", calls, took, answered, files, after-before)
	if grew := after - before; grew > 64<<10 {
		t.Errorf("%d malformed calls grew Ganesha's log by %d bytes; want under 64 KiB", calls, grew)
	}
	if after > logBound {
		t.Errorf("Ganesha's log files take %d bytes, over their bound of %d", after, logBound)
	}
	v := mount3(t, ctx, h, ep, "/vol1")
	if _, err := v.ReadDir(ctx, v.Root); err != nil {
		t.Errorf("the volume is not served after the flood: %v", err)
	}
}
