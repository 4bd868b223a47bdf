package dataplane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/storage/cephfs"
	"github.com/basin-nas/basin/test/ceph"
)

// TestCarryGraceOnCeph: a carry on a real cluster, through rados_ops.py and
// Ceph's Python bindings, as the recovery user Basin gives its Ganeshas (no
// more than cephfs.NFSRecoveryCaps), read back with Ganesha's own
// ganesha-rados-grace and the rados CLI. The old database is made and joined
// by ganesha-rados-grace as a Ganesha would; the carried one reads as a
// database of one enforcing member at the new generation's epoch, a Ganesha's
// join of it starts a grace period reading the copy, and the old instance's
// objects are untouched.
func TestCarryGraceOnCeph(t *testing.T) {
	grace := filepath.Join(DefaultGaneshaPrefix, "bin", "ganesha-rados-grace")
	if _, err := os.Stat(grace); err != nil {
		t.Skipf("no %s: run scripts/setup.sh", grace)
	}
	br := fmt.Sprintf("bcr%04d", os.Getpid()%10000)
	if os.Geteuid() == 0 {
		ceph.MakeBridge(t, br, "10.99.87.1/24")
	}
	cl := ceph.StartT(t, ceph.Options{Name: "crg", Dir: t.TempDir(), Bridge: br, Addr: "10.99.87.2/24"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const pool, ns, id, node = "basin-nfs", "grp", "basin-ganesha-grp", "basin-bcr-n1"
	for _, args := range [][]string{{"osd", "pool", "create", pool, "8"}, {"osd", "pool", "application", "enable", pool, "nfs"}} {
		if out, err := cl.Ceph(ctx, args...); err != nil {
			t.Fatalf("ceph %v: %v: %s", args, err, out)
		}
	}
	mon, osd := cephfs.NFSRecoveryCaps(pool, ns)
	ring, err := cl.Ceph(ctx, "auth", "get-or-create", "client."+id, "mon", mon, "osd", osd)
	if err != nil {
		t.Fatal(err)
	}
	// Where the cluster's ceph.conf has every client look for its keyring.
	if err := os.WriteFile(filepath.Join(cl.Dir, "keys", "ceph.client."+id+".keyring"), ring, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(argv ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
		return string(out)
	}
	graceTool := func(oid string, args ...string) string {
		t.Helper()
		return run(append([]string{grace, "--cephconf", cl.Conf, "--userid", id, "--pool", pool, "--ns", ns, "--oid", oid}, args...)...)
	}
	radosTool := func(args ...string) string {
		t.Helper()
		return run(append([]string{"rados", "-c", cl.Conf, "--id", id, "-p", pool, "-N", ns}, args...)...)
	}
	// Generation 0 as Basin makes it (joinGraceDB), then a Ganesha's start
	// (join: C=2, R=1) and its clients' records under epoch 2.
	from, to := "grace-"+node, "grace-"+node+".e1"
	graceTool(from, "add", node)
	graceTool(from, "start", node)
	radosTool("create", recOID(2, node))
	radosTool("setomapval", recOID(2, node), "client-a", "a-record")
	radosTool("setomapval", recOID(2, node), "client-b", "b-record")
	before := graceTool(from, "dump")

	c := newRADOSChannel(nil, cl.Conf, id, pool, ns)
	defer c.Close()
	n, done, err := carryGrace(ctx, c, node, from, to, 1)
	if err != nil || !done || n != 2 {
		t.Fatalf("carryGrace = %d, %v, %v; want 2 clients", n, done, err)
	}
	k := uint64(1) << 32
	if d := graceTool(to, "dump"); !strings.Contains(d, fmt.Sprintf("cur=%d rec=0", k)) || !strings.Contains(d, node+"\t E") {
		t.Fatalf("the carried database:\n%s\nwant cur=%d rec=0 and %s enforcing, not needing grace", d, k, node)
	}
	if keys := strings.Fields(radosTool("listomapkeys", recOID(k, node))); strings.Join(keys, " ") != "client-a client-b" {
		t.Fatalf("carried records %v", keys)
	}
	if v := radosTool("getomapval", recOID(k, node), "client-b"); !strings.Contains(v, "b-record") {
		t.Fatalf("client-b's carried record: %s", v)
	}
	// A Ganesha's start on it: a grace period from the copy's epoch.
	graceTool(to, "start", node)
	if d := graceTool(to, "dump"); !strings.Contains(d, fmt.Sprintf("cur=%d rec=%d", k+1, k)) || !strings.Contains(d, node+"\tNE") {
		t.Fatalf("after a join:\n%s\nwant cur=%d rec=%d and %s needing grace", d, k+1, k, node)
	}
	if after := graceTool(from, "dump"); after != before {
		t.Fatalf("the old database changed:\n%s\nwas\n%s", after, before)
	}
	if n, done, err := carryGrace(ctx, c, node, from, to, 1); err != nil || !done || n != 0 {
		t.Fatalf("a second carry: %d, %v, %v", n, done, err)
	}

	// The tool exits cleanly (Ganesha patch 0017): it returned with its
	// librados client connected, and exit's destructors raced the client's
	// threads; 19 of 300 dumps beside a CPU hog died (SIGABRT, SIGSEGV), their
	// work done and their output lost. The same here, with a hog of the
	// test's own for the loop's length.
	stop := make(chan struct{})
	var hogs sync.WaitGroup
	for range runtime.NumCPU() {
		hogs.Go(func() {
			for x := 0; ; x++ {
				select {
				case <-stop:
					return
				default:
				}
				for range 1 << 16 {
					x ^= x << 1
				}
			}
		})
	}
	var crashed []string
	for i := range 150 {
		out, err := exec.CommandContext(ctx, grace, "--cephconf", cl.Conf, "--userid", id, "--pool", pool, "--ns", ns, "--oid", to, "dump").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "cur=") {
			crashed = append(crashed, fmt.Sprintf("dump %d: %v %q", i, err, out))
		}
	}
	close(stop)
	hogs.Wait()
	if len(crashed) > 0 {
		t.Errorf("%d of 150 dumps failed:\n%s", len(crashed), strings.Join(crashed, "\n"))
	}
}
