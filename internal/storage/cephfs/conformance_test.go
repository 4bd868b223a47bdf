package cephfs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/mountinfo"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/storage/storagetest"
	"github.com/basin-nas/basin/test/ceph"
)

// cluster starts the package's cluster once (about 16 s) for every test that
// asks for it; each test then works in a subvolume group of its own.
func cluster(t *testing.T) *ceph.Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cephfs tests need root (network namespaces, FUSE mounts)")
	}
	if _, err := exec.LookPath("ceph-fuse"); err != nil {
		t.Skip("ceph-fuse not installed (run scripts/setup.sh --test)")
	}
	if shared.c == nil && !shared.failed {
		shared.failed = true
		makeBridge(t)
		shared.c = ceph.StartT(&keepAlive{T: t}, ceph.Options{Name: "cfsst", Dir: shared.dir, Bridge: bridge, Addr: "10.99.79.2/24"})
		shared.failed = false
	}
	if shared.c == nil {
		t.Skip("the cluster did not start (see the first test)")
	}
	return shared.c
}

const bridge = "bcephst0"

var shared struct {
	c      *ceph.Cluster
	dir    string
	failed bool
}

var groups atomic.Int32

// keepAlive is a testing.T whose cleanups run when the package's tests end
// (TestMain), not when the first test does: the cluster serves them all.
type keepAlive struct{ *testing.T }

func (k *keepAlive) Cleanup(f func()) { cleanups = append(cleanups, f) }

// The cleanups run after every test is done: they report to stderr.
func (k *keepAlive) Failed() bool                    { return false }
func (k *keepAlive) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (k *keepAlive) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
}

var cleanups []func()

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "basin-cephfs-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared.dir = dir
	code := m.Run()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// makeBridge makes the package's bridge with the host address 10.99.79.1/24;
// it goes when the package's tests end.
func makeBridge(t *testing.T) {
	ceph.MakeBridge(&keepAlive{T: t}, bridge, "10.99.79.1/24")
}

// newBackend is a started backend over the package's cluster, as client.admin,
// in a subvolume group of its own; at the test's end its volumes go and
// nothing of it stays mounted.
func newBackend(t *testing.T) *Backend {
	t.Helper()
	return newBackendCaps(t, "")
}

// newBackendCaps is newBackend whose user has extraMon beside Caps's.
func newBackendCaps(t *testing.T, extraMon string) *Backend {
	t.Helper()
	c := cluster(t)
	dataDir := t.TempDir()
	ctx := context.Background()
	// Basin's own user, with no more than Caps.
	group := fmt.Sprintf("t%d", groups.Add(1))
	mon, mgr := Caps(ceph.FSName, group)
	if extraMon != "" {
		mon += ", " + extraMon
	}
	ring, err := c.Ceph(ctx, "auth", "get-or-create", "client.basin-"+group, "mon", mon, "mgr", mgr)
	if err != nil {
		t.Fatal(err)
	}
	keyring := filepath.Join(dataDir, "basin.keyring")
	if err := os.WriteFile(keyring, ring, 0o600); err != nil {
		t.Fatal(err)
	}
	b := New(Options{Conf: c.Conf, ID: "basin-" + group, Keyring: keyring, Group: group, DataDir: dataDir})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	t.Cleanup(func() {
		inv, err := b.Inventory(ctx)
		if err != nil {
			t.Errorf("inventory: %v", err)
		}
		for _, k := range inv.Volumes {
			if err := b.DeleteVolume(ctx, k); err != nil {
				t.Errorf("delete %s: %v", k, err)
			}
		}
		// Whatever a failed test left mounted.
		es, _ := mountinfo.Under(dataDir)
		for _, e := range es {
			exec.Command("umount", "-l", e.MountPoint).Run() //nolint:errcheck
		}
		// What Basin's user may not do, as the cluster's admin.
		if _, err := c.Ceph(ctx, "fs", "subvolumegroup", "rm", b.o.FS, b.o.Group); err != nil {
			t.Errorf("remove group: %v", err)
		}
		var users []struct {
			Entity string `json:"entity"`
		}
		out, err := c.Ceph(ctx, "auth", "ls", "-f", "json")
		if err == nil {
			var all struct {
				AuthDump []struct {
					Entity string `json:"entity"`
				} `json:"auth_dump"`
			}
			err = json.Unmarshal(out, &all)
			users = all.AuthDump
		}
		if err != nil {
			t.Errorf("auth ls: %v", err)
		}
		for _, u := range users {
			if strings.HasPrefix(u.Entity, "client."+group+".") {
				t.Errorf("a deleted volume's user is left: %s", u.Entity)
			}
		}
		c.Ceph(ctx, "auth", "rm", "client.basin-"+group) //nolint:errcheck // the cluster goes with the package's tests
	})
	return b
}

// The conformance suite btrfs and the fake run too, on a real CephFS.
func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Backend { return newBackend(t) })
}

// Basin's own user can do what the backend does (the conformance suite runs
// as it) and not more: not remove the filesystem, not reach another group's
// subvolumes, not read a key but its volumes' users'.
func TestBasinUserConfined(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	for _, c := range []struct {
		target string
		cmd    map[string]any
	}{
		{"mgr", map[string]any{"prefix": "fs volume rm", "vol_name": ceph.FSName, "yes-i-really-mean-it": true}},
		{"mgr", map[string]any{"prefix": "fs subvolume create", "vol_name": ceph.FSName, "sub_name": "x", "group_name": "other"}},
		{"mgr", map[string]any{"prefix": "fs subvolume ls", "vol_name": ceph.FSName}},
		{"mon", map[string]any{"prefix": "auth get", "entity": "client.admin"}},
		{"mon", map[string]any{"prefix": "auth get-or-create", "entity": "client." + b.o.Group + ".evil", "caps": []string{"mon", "allow *"}}},
	} {
		out, err := b.ch.call(ctx, c.target, c.cmd)
		if err == nil {
			t.Errorf("Basin's user may run %v:\n%s", c.cmd, out)
		} else if errno(err) != syscall.EACCES && errno(err) != syscall.EPERM {
			t.Errorf("%v: %v, want EACCES", c.cmd, err)
		}
	}
}

// A full cluster faults the store: CephFS holds writes it cannot place, and
// acknowledges none of them.
func TestFullClusterFaultsStore(t *testing.T) {
	b := newBackend(t)
	c := cluster(t)
	ctx := context.Background()
	if err := b.EnsureVolume(ctx, "va", 64<<20, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Mount(ctx, "va"); err != nil {
		t.Fatal(err)
	}
	h, err := b.ObserveHealth(ctx)
	if err != nil || !h.Store.OK() || !h.Volumes["va"].OK() {
		t.Fatalf("a healthy cluster: %+v, %v", h, err)
	}
	// Ratios in order (nearfull <= backfillfull <= full), all below what the
	// OSD holds; Ceph's defaults after.
	ratios := func(near, backfill, full string) error {
		for _, r := range [][2]string{{"set-nearfull-ratio", near}, {"set-backfillfull-ratio", backfill}, {"set-full-ratio", full}} {
			if _, err := c.Ceph(ctx, "osd", r[0], r[1]); err != nil {
				return err
			}
		}
		return nil
	}
	if err := ratios("0.001", "0.001", "0.001"); err != nil {
		t.Fatal(err)
	}
	defer ratios("0.85", "0.9", "0.95") //nolint:errcheck // put back below too
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		h, err = b.ObserveHealth(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h.Store.Reason == storage.FaultReadOnly {
			break
		}
		if time.Now().After(end) {
			detail, _ := c.Ceph(ctx, "health", "detail")
			t.Fatalf("a full cluster is reported %+v; the cluster says:\n%s", h.Store, detail)
		}
	}
	if err := ratios("0.85", "0.9", "0.95"); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if h, err = b.ObserveHealth(ctx); err == nil && h.Store.OK() {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the store stays faulted once the cluster has room: %+v, %v", h.Store, err)
		}
	}
}

// The channel to the cluster outlives its helper: killed, or cut short by a
// caller's deadline, the next command starts another.
func TestChannelRestarts(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	if _, err := b.subvolumeNames(ctx); err != nil {
		t.Fatal(err)
	}
	b.ch.helper().Kill()
	if _, err := b.subvolumeNames(ctx); err != nil {
		t.Fatalf("after the helper died: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, time.Microsecond)
	defer cancel()
	<-short.Done()
	if _, err := b.subvolumeNames(short); err == nil {
		t.Fatal("a command ran past its deadline")
	}
	if _, err := b.subvolumeNames(ctx); err != nil {
		t.Fatalf("after a cut-short command: %v", err)
	}
}

// A volume's cephx user is confined to its own subvolume: its caps name the
// subvolume's path and RADOS namespace, and with its key the Ceph CLI cannot
// read another volume's objects.
func TestVolumeUserConfined(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	for _, k := range []string{"va", "vb"} {
		if err := b.EnsureVolume(ctx, k, 64<<20, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.Mount(ctx, k); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(b.MountPath(k)+"/secret", []byte("secret of "+k), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pa, err := b.path(ctx, "va")
	if err != nil {
		t.Fatal(err)
	}
	caps, err := b.ch.call(ctx, "mon", map[string]any{"prefix": "auth get", "entity": "client." + b.userID("va"), "format": "plain"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"path=" + pa, "namespace=fsvolumens_va"} {
		if !strings.Contains(string(caps), want) {
			t.Errorf("va's caps lack %q:\n%s", want, caps)
		}
	}
	// As va: its own namespace's objects are listed, vb's are refused.
	rados := func(ns string) (string, error) {
		out, err := exec.CommandContext(ctx, "rados", "--conf", b.o.Conf, "--id", b.userID("va"), "--keyring", b.keyring("va"),
			"-p", "cephfs.cephfs.data", "-N", ns, "ls").CombinedOutput()
		return string(out), err
	}
	if out, err := rados("fsvolumens_va"); err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("va cannot list its own objects: %v %s", err, out)
	}
	if out, err := rados("fsvolumens_vb"); err == nil {
		t.Fatalf("va listed vb's objects:\n%s", out)
	}
	if out, err := rados(""); err == nil && strings.TrimSpace(out) != "" {
		t.Fatalf("va listed the default namespace's objects:\n%s", out)
	}
}

// What a node's NFS server is given: the cluster's monitors (ClientConf), and
// each volume's and snapshot's path with the volume's own user and key
// (Attachment, SnapshotAttachment), the snapshot's inside the volume's user's
// path. Stop then leaves nothing of the node mounted.
func TestNodeAttachments(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	conf, err := b.ClientConf(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(conf, cluster(t).Addr) || !strings.Contains(conf, cluster(t).FSID) {
		t.Errorf("client conf names neither the monitor %s nor the fsid %s:\n%s", cluster(t).Addr, cluster(t).FSID, conf)
	}
	if err := b.EnsureVolume(ctx, "va", 64<<20, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Mount(ctx, "va"); err != nil {
		t.Fatal(err)
	}
	a, err := b.Attachment(ctx, "va")
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := b.path(ctx, "va")
	if a.Path != pa || a.FS != ceph.FSName || a.UserID != b.userID("va") || len(a.Secret) < 16 {
		t.Errorf("attachment %+v (secret elided), want path %s", storage.Attachment{FS: a.FS, Path: a.Path, UserID: a.UserID}, pa)
	}
	if err := b.EnsureSnapshot(ctx, "va", "s1"); err != nil {
		t.Fatal(err)
	}
	sa, err := b.SnapshotAttachment(ctx, "va", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sa.Path, pa+"/.snap/_s1_") || sa.UserID != a.UserID || sa.Secret != a.Secret {
		t.Errorf("snapshot attachment path %s user %s, want %s/.snap/_s1_<ino> as %s", sa.Path, sa.UserID, pa, a.UserID)
	}
	if _, err := b.SnapshotAttachment(ctx, "va", "nosuch"); err == nil {
		t.Error("an attachment for a snapshot that does not exist")
	}
	if err := b.MountSnapshot(ctx, "va", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), b.o.DataDir) {
		t.Errorf("mounts left after Stop:\n%s", mi)
	}
	// The data stays: a backend started again serves it.
	b2 := New(b.o)
	if err := b2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b2.Stop(ctx) }) //nolint:errcheck // the test's own cleanup reports leftovers
	if err := b2.Mount(ctx, "va"); err != nil {
		t.Fatal(err)
	}
}

// FenceClients puts a node's addresses on the OSD blocklist, as Basin's user
// with FailoverCap and no more: addresses of the Ceph network only;
// UnfenceClients takes them off, and again is no error.
func TestFenceClients(t *testing.T) {
	b := newBackendCaps(t, FailoverCap("10.99.79."))
	c := cluster(t)
	ctx := context.Background()
	listed := func(addr string) bool {
		out, err := c.Ceph(ctx, "osd", "blocklist", "ls")
		if err != nil {
			t.Fatalf("blocklist ls: %v: %s", err, out)
		}
		return strings.Contains(string(out), addr+":0/0")
	}
	if err := b.FenceClients(ctx, []string{"10.99.79.77", "10.99.79.78"}); err != nil {
		t.Fatal(err)
	}
	if !listed("10.99.79.77") || !listed("10.99.79.78") {
		t.Fatal("the fenced addresses are not on the blocklist")
	}
	if err := b.FenceClients(ctx, []string{"10.98.0.1"}); errno(err) != syscall.EACCES {
		t.Errorf("blocklisting an address off the Ceph network: %v, want EACCES", err)
	}
	for range 2 {
		if err := b.UnfenceClients(ctx, []string{"10.99.79.77", "10.99.79.78"}); err != nil {
			t.Fatal(err)
		}
	}
	if listed("10.99.79.77") || listed("10.99.79.78") {
		t.Fatal("unfenced addresses are still on the blocklist")
	}
}

// A volume whose ceph-fuse died (killed, out of memory) is mounted again: a
// Start of the backend on the same data directory unmounts what the dead
// ceph-fuse left (its mount answers "transport endpoint is not connected",
// as does every bind of it), so that observing the volumes works again, and
// Mount mounts it anew (attach, which the resync's Mount step runs, finds a
// dead mount the same way).
func TestDeadFuseMountedAgain(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	const key = "dead1"
	if err := b.EnsureVolume(ctx, key, 1<<30, nil); err != nil {
		t.Fatal(err)
	}
	kill := func() {
		t.Helper()
		if err := b.Mount(ctx, key); err != nil {
			t.Fatal(err)
		}
		pids := fuseServing(b.fsPath(key))
		if len(pids) == 0 {
			t.Fatal("no ceph-fuse serves the volume")
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		for deadline := time.Now().Add(10 * time.Second); len(fuseServing(b.fsPath(key))) > 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the killed ceph-fuse is still there")
			}
		}
		if _, err := os.Stat(filepath.Join(b.MountPath(key), ".")); !errors.Is(err, syscall.ENOTCONN) {
			t.Fatalf("the dead mount answers %v, want ENOTCONN", err)
		}
	}
	write := func(what string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(b.MountPath(key), what), []byte(what), 0o644); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if err := b.Mount(ctx, key); err != nil {
		t.Fatal(err)
	}
	write("before")
	kill()
	start := time.Now()
	again := New(b.o)
	if err := again.Start(ctx); err != nil {
		t.Fatalf("Start with a dead ceph-fuse mount: %v", err)
	}
	defer again.Close()
	if _, err := again.ObserveVolumes(ctx); err != nil {
		t.Fatalf("observe after Start: %v", err)
	}
	t.Logf("started and observed in %s", time.Since(start).Round(time.Millisecond))
	if err := again.Mount(ctx, key); err != nil {
		t.Fatal(err)
	}
	// A live mount again (a write would wait here for the MDS to time the
	// dead client's session out, a minute, for the caps it held on the
	// directory: measured 63 s).
	var st syscall.Statfs_t
	if err := syscall.Statfs(b.MountPath(key), &st); err != nil {
		t.Fatalf("statfs of the volume mounted again: %v", err)
	}
	if e, ok, err := mountinfo.Lookup(b.fsPath(key)); err != nil || !ok || e.FSType != "fuse.ceph-fuse" || len(fuseServing(b.fsPath(key))) == 0 {
		t.Fatalf("no live ceph-fuse mount: %+v %v %v", e, ok, err)
	}
}
