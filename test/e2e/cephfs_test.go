package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/internal/storage/cephfs"
	"github.com/basin-nas/basin/test/ceph"
	"github.com/basin-nas/basin/test/clienthost"
	"github.com/basin-nas/basin/test/nfsraw"
)

// cephShared is the package's Ceph cluster (on bridge bce<pid>,
// 10.99.83.0/24), started by the first test that needs one and stopped when
// the package's tests end (atExit): each CephFS test keeps its volumes in a
// subvolume group of its own, as a cephx user of its own.
var cephShared struct {
	c      *ceph.Cluster
	failed bool
}

const cephSubnet = "10.99.83"

func sharedCeph(t *testing.T) *ceph.Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if err := ceph.Check(); err != nil {
		t.Skip(err)
	}
	if cephShared.c == nil && !cephShared.failed {
		cephShared.failed = true
		br := fmt.Sprintf("bce%04d", os.Getpid()%10000)
		removeBridge, err := ceph.NewBridge(br, cephSubnet+".1/24")
		if err != nil {
			t.Fatal(err)
		}
		atExit = append(atExit, func() { removeBridge() }) //nolint:errcheck // best effort at exit
		dir, err := os.MkdirTemp("", "basin-e2e-ceph-")
		if err != nil {
			t.Fatal(err)
		}
		atExit = append(atExit, func() { os.RemoveAll(dir) })
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		c, err := ceph.Start(ctx, ceph.Options{Name: "e2eceph", Dir: dir, Bridge: br, Addr: cephSubnet + ".2/24"})
		if err != nil {
			t.Fatalf("ceph: %v", err)
		}
		t.Logf("ceph: cluster up in %s", c.Startup.Round(time.Millisecond))
		atExit = append(atExit, func() {
			if err := c.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "ceph: close: %v\n", err)
			}
		})
		cephShared.c, cephShared.failed = c, false
	}
	if cephShared.c == nil {
		t.Skip("the Ceph cluster did not start (see the first test that asked)")
	}
	return cephShared.c
}

// cephServer is a server whose volumes live on the package's Ceph cluster, in
// subvolume group group, as cephx user basin-<group> holding no more than
// cephfs.Caps; its NFS sandboxes are linked to the cluster (from .100).
func cephServer(t *testing.T, group string) (*server, *ceph.Cluster) {
	t.Helper()
	return cephServerCaps(t, group, "")
}

// cephServerCaps is cephServer whose user has extraMon beside cephfs.Caps's
// mon caps.
func cephServerCaps(t *testing.T, group, extraMon string) (*server, *ceph.Cluster) {
	t.Helper()
	cl := sharedCeph(t)
	ctx := context.Background()
	mon, mgr := cephfs.Caps(ceph.FSName, group)
	if extraMon != "" {
		mon += ", " + extraMon
	}
	keyring := cephUser(t, cl, "basin-"+group, "mon", mon, "mgr", mgr)
	// The NFS sandboxes keep their NFSv4 client records in RADOS, as the
	// user docs/operations.md describes: pool basin-nfs, the group's
	// namespace alone.
	for _, args := range [][]string{{"osd", "pool", "create", nfsRecoveryPool, "8"}, {"osd", "pool", "application", "enable", nfsRecoveryPool, "nfs"}} {
		if out, err := cl.Ceph(ctx, args...); err != nil {
			t.Fatalf("ceph %v: %v: %s", args, err, out)
		}
	}
	rmon, rosd := cephfs.NFSRecoveryCaps(nfsRecoveryPool, group)
	rkeyring := cephUser(t, cl, "basin-ganesha-"+group, "mon", rmon, "osd", rosd)
	s := newServer(t)
	s.storage = []string{"--storage", "cephfs://basin-" + group + "@" + ceph.FSName + "/" + group + "?conf=" + cl.Conf + "&keyring=" + keyring +
		"&nfs_recovery_pool=" + nfsRecoveryPool + "&nfs_recovery_id=basin-ganesha-" + group + "&nfs_recovery_keyring=" + rkeyring,
		"--ceph-network", "bce" + fmt.Sprintf("%04d", os.Getpid()%10000) + "," + cephSubnet + ".0/24," + cephSubnet + ".100-" + cephSubnet + ".109"}
	return s, cl
}

// cephUser makes (or gets) cephx user id with caps and returns the path of a
// keyring file holding its key.
func cephUser(t *testing.T, cl *ceph.Cluster, id string, caps ...string) string {
	t.Helper()
	ring, err := cl.Ceph(context.Background(), append([]string{"auth", "get-or-create", "client." + id}, caps...)...)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), id+".keyring")
	if err := os.WriteFile(path, ring, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// isNFS4Status reports whether err is NFSv4 status want.
func isNFS4Status(err error, want nfsraw.Status) bool {
	st, ok := nfsraw.StatusOf(err)
	return ok && st == want
}

// nfsRecoveryPool is the RADOS pool of the e2e servers' NFSv4 recovery records.
const nfsRecoveryPool = "basin-nfs"

// subvolumeInfo is what the cluster's admin sees of a volume's subvolume.
func subvolumeInfo(t *testing.T, cl *ceph.Cluster, group, name string) (map[string]any, error) {
	t.Helper()
	out, err := cl.Ceph(context.Background(), "fs", "subvolume", "info", ceph.FSName, name, "--group_name", group, "--format", "json")
	if err != nil {
		return nil, err
	}
	var info map[string]any
	return info, json.Unmarshal(out, &info)
}

// TestCephFSVolumeLifecycle: `basin serve --storage cephfs://…` on a real
// cluster. A volume made through the API is a namespace-isolated subvolume
// with its capacity as quota; a client host writes and reads it over NFSv3
// and NFSv4.1 through FSAL_CEPH (the sandbox's Ganesha, linked to the
// cluster) as its export policy allows, and df shows its capacity; a snapshot
// shows in .snapshot; a resize moves the quota; a clone of the snapshot reads
// its data and writes its own; a revert
// brings the snapshot's data back; a delete removes the subvolume and its
// cephx user; a stop leaves nothing mounted or running.
func TestCephFSVolumeLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, cl := cephServer(t, "life")
	s.start()
	c := s.client()
	nfsPool(t, c)
	policy := map[string]any{"rules": []any{rule(s.addrN(201), "READ_WRITE", true, true, "true")}}
	mutate(t, c, "POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3", "NFSV4"}, "snapshotDirectory": true, "unixPermissions": "0777", "exportPolicy": policy})
	key := onlyMount(t, s)
	info, err := subvolumeInfo(t, cl, "life", key)
	if err != nil {
		t.Fatalf("the volume has no subvolume %s: %v", key, err)
	}
	if q, _ := info["bytes_quota"].(float64); q != 1<<30 {
		t.Errorf("subvolume quota %v, want 1 GiB", info["bytes_quota"])
	}
	if ns, _ := info["pool_namespace"].(string); ns == "" {
		t.Errorf("subvolume %s is not namespace-isolated: %v", key, info)
	}

	ep := endpoint(t, c, "vol1")
	h := s.host(201)
	sv := &snapView{t: t, ctx: ctx, vol: "vol1", v3: mount3(t, ctx, h, ep, "/vol1"), v4: dial41(t, ctx, h, ep)}
	if err := writePath(ctx, sv.v3, "f", "before"); err != nil {
		t.Fatalf("NFSv3 write: %v", err)
	}
	// What the client wrote is in the CephFS (seen through the node's ceph-fuse mount).
	if b, err := os.ReadFile(filepath.Join(s.dataDir, "mounts", key, "f")); err != nil || string(b) != "before" {
		t.Fatalf("the volume's mount reads %q, %v", b, err)
	}
	if _, err := sv.v4.LookupPath(ctx, "vol1", "f"); err != nil {
		t.Fatalf("NFSv4.1 LOOKUP vol1/f: %v", err)
	}
	// The export policy holds: a host no rule names cannot mount the volume.
	if err := s.host(202).Within(func() error {
		c, err := nfs3.Mount(ctx, ep.String(), "/vol1", nfs3.Options{})
		if err == nil {
			c.Close()
		}
		return err
	}); err == nil {
		t.Error("a host outside the export policy mounted the volume")
	}
	// df shows the volume's capacity (the subvolume's quota).
	wantSize := func(gib uint64) {
		t.Helper()
		st, err := sv.v3.FSStat(ctx, sv.v3.Root)
		if err != nil || st.TotalBytes != gib<<30 {
			t.Errorf("FSSTAT: total %d bytes, %v; want %d GiB", st.TotalBytes, err, gib)
		}
	}
	wantSize(1)

	mutate(t, c, "POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", map[string]any{})
	if err := writePath(ctx, sv.v3, "f", "after"); err != nil {
		t.Fatal(err)
	}
	sv.wantList("s1")
	sv.wantRead("s1", "f", "before")

	mutate(t, c, "PATCH", loc+"/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": "2"})
	if info, err := subvolumeInfo(t, cl, "life", key); err != nil || info["bytes_quota"] != float64(2<<30) {
		t.Errorf("after a resize to 2 GiB the subvolume says %v, %v", info["bytes_quota"], err)
	}
	wantSize(2)

	// A clone of the snapshot: the manager's background copy, then a volume
	// of its own that reads the snapshot's data over NFS.
	mutate(t, c, "POST", loc+"/volumes?volumeId=clone1", map[string]any{"shareName": "clone1", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3"}, "unixPermissions": "0777", "exportPolicy": policy,
		"restoreParameters": map[string]any{"sourceSnapshot": "projects/p1/locations/us-east4/volumes/vol1/snapshots/s1"}})
	clone := mount3(t, ctx, h, endpoint(t, c, "clone1"), "/clone1")
	if got, err := readPath(ctx, clone, "f"); err != nil || got != "before" {
		t.Errorf("the clone reads %q, %v; want the snapshot's", got, err)
	}
	if err := writePath(ctx, clone, "f", "clone's own"); err != nil {
		t.Fatal(err)
	}
	if got, _ := readPath(ctx, sv.v3, "f"); got != "after" {
		t.Errorf("a write to the clone changed its source: %q", got)
	}
	mutate(t, c, "DELETE", loc+"/volumes/clone1", nil)
	cancelCloneWhileCopied(t, s, cl, c, key)

	mutate(t, c, "POST", loc+"/volumes/vol1:revert", map[string]any{"snapshotId": "s1"})
	if got, err := readPath(ctx, sv.v3, "f"); err != nil || got != "before" {
		t.Errorf("after the revert NFSv3 reads %q, %v; want the snapshot's", got, err)
	}

	mutate(t, c, "DELETE", loc+"/volumes/vol1/snapshots/s1", nil)
	mutate(t, c, "DELETE", loc+"/volumes/vol1", nil)
	if _, err := subvolumeInfo(t, cl, "life", key); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("subvolume %s after the volume's delete: %v", key, err)
	}
	if out, err := cl.Ceph(ctx, "auth", "get", "client.life."+key); err == nil {
		t.Errorf("the volume's cephx user outlived it:\n%s", out)
	}
	s.stop(syscall.SIGTERM)
}

// cancelCloneWhileCopied clones a snapshot of 384 MiB (seconds of copying on
// the test cluster): the operation says it is copying, a cancel ends it
// CANCELLED at once, and neither the volume nor its subvolume is left.
func cancelCloneWhileCopied(t *testing.T, s *server, cl *ceph.Cluster, c *client.Client, srcKey string) {
	t.Helper()
	ctx := context.Background()
	big := filepath.Join(s.dataDir, "mounts", srcKey, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range 384 {
		chunk[0], chunk[1] = byte(i), byte(i>>8) // no two chunks alike
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		t.Fatal(err)
	}
	mutate(t, c, "POST", loc+"/volumes/vol1/snapshots?snapshotId=s2", map[string]any{})
	var op client.Object
	if err := c.Do(ctx, "POST", loc+"/volumes?volumeId=clone2", nil, map[string]any{"shareName": "clone2", "storagePool": "pool1",
		"capacityGib": "1", "protocols": []string{"NFSV3"},
		"restoreParameters": map[string]any{"sourceSnapshot": "projects/p1/locations/us-east4/volumes/vol1/snapshots/s2"}}, &op); err != nil {
		t.Fatal(err)
	}
	name, _ := op["name"].(string)
	status := func() (bool, string) {
		var cur client.Object
		if err := c.Do(ctx, "GET", "/v1/"+name, nil, nil, &cur); err != nil {
			t.Fatal(err)
		}
		md, _ := cur["metadata"].(map[string]any)
		msg, _ := md["statusMessage"].(string)
		return cur["done"] == true, msg
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		done, msg := status()
		if done {
			t.Fatal("the clone of 384 MiB was whole before it could be cancelled: the test proves nothing")
		}
		if msg == "copying the snapshot's data" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the clone's operation says %q, not that it copies", msg)
		}
	}
	start := time.Now()
	if err := c.Do(ctx, "POST", "/v1/"+name+":cancel", nil, map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	for !func() bool { done, _ := status(); return done }() {
		if time.Since(start) > 30*time.Second {
			t.Fatal("a cancelled clone's operation did not end")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var cur client.Object
	if err := c.Do(ctx, "GET", "/v1/"+name, nil, nil, &cur); err != nil {
		t.Fatal(err)
	}
	if e, _ := cur["error"].(map[string]any); e == nil || e["code"] != float64(1) {
		t.Fatalf("the cancelled clone's operation: %v, want error code 1 (CANCELLED)", cur)
	}
	t.Logf("a clone cancelled while copying ended %v after the cancel", time.Since(start).Round(time.Millisecond))
	if err := c.Do(ctx, "GET", loc+"/volumes/clone2", nil, nil, nil); err == nil {
		t.Error("the cancelled clone's volume is still there")
	}
	out, err := cl.Ceph(ctx, "fs", "subvolume", "ls", ceph.FSName, "--group_name", "life", "--format", "json")
	var subs []struct{ Name string }
	if err == nil {
		err = json.Unmarshal(out, &subs)
	}
	if err != nil || len(subs) != 1 || subs[0].Name != srcKey {
		t.Errorf("subvolumes after the cancelled clone: %s, %v; want only %s", out, err, srcKey)
	}
	mutate(t, c, "DELETE", loc+"/volumes/vol1/snapshots/s2", nil)
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
}

// TestCephFSTenantIsolation attacks CephFS volumes of two projects through
// Basin as a hostile tenant would: the client of p1's volume forges FSAL_CEPH
// handles naming p2's file, directory and root and the file system's root,
// with the live snapid and with snapids 2, 1000, 2^64-16 and p2's snapshot's,
// for GETATTR, READ, READDIRPLUS (READDIR over NFSv4), LOOKUP, WRITE and
// SETATTR over NFSv3 and NFSv4, from its volume's export and from its
// snapshot's; every one is refused and p2's tree does not change. The Ceph
// network cannot reach the sandbox's NFS server. A volume's cephx key, taken from the node, cannot read
// the other volume's objects.
func TestCephFSTenantIsolation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, cl := cephServer(t, "iso")
	s.start()
	c := s.client()
	for _, p := range []string{"p1", "p2"} {
		mutate(t, c, "POST", "/v1/projects/"+p+"/locations/us-east4/storagePools?storagePoolId=pool1",
			map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "10", "network": "projects/" + p + "/global/networks/default"})
	}
	keyA := s.tenantVolume(c, "p1", "vola", rule(s.addrN(201), "READ_WRITE", true, true, "true"))
	keyB := s.tenantVolume(c, "p2", "volb", rule(s.addrN(203), "READ_WRITE", true, true, "true"))
	mountB := filepath.Join(s.dataDir, "mounts", keyB)
	writeFile(t, filepath.Join(s.dataDir, "mounts", keyA, "a-data"), "data of a", 0o644)
	writeFile(t, filepath.Join(mountB, "secret"), "B-SECRET-DATA", 0o600)
	if err := os.Mkdir(filepath.Join(mountB, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"p1/locations/us-east4/volumes/vola", "p2/locations/us-east4/volumes/volb"} {
		mutate(t, c, "POST", "/v1/projects/"+p+"/snapshots?snapshotId=s1", map[string]any{})
	}
	bBefore := nfsraw.Tree(mountB)

	// B's inodes, and its snapshot's id, from B's own client's handles.
	b := mount3(t, ctx, s.host(203), endpointIn(t, c, "p2", "volb"), "/volb")
	bSecret, _, err := b.Lookup(ctx, b.Root, "secret")
	if err != nil {
		t.Fatal(err)
	}
	bDir, _, err := b.Lookup(ctx, b.Root, "dir")
	if err != nil {
		t.Fatal(err)
	}
	bSnap := mount3(t, ctx, s.host(203), endpointIn(t, c, "p2", "volb"), "/volb/.snapshot/s1")
	if !nfsraw.IsCeph(bSecret) || !nfsraw.IsCeph(bSnap.Root) {
		t.Fatalf("not FSAL_CEPH handles: %x %x", bSecret, bSnap.Root)
	}
	targets := map[string]uint64{"B's file": nfsraw.CephIno(bSecret), "B's root": nfsraw.CephIno(b.Root), "B's dir": nfsraw.CephIno(bDir), "/": 1}
	snaps := []uint64{nfsraw.CephNoSnap, 2, 1000, 1<<64 - 16, nfsraw.CephSnap(bSnap.Root)}

	x := s.host(201)
	epA := endpointIn(t, c, "p1", "vola")
	a := mount3(t, ctx, x, epA, "/vola")
	aSnap := mount3(t, ctx, x, epA, "/vola/.snapshot/s1")
	v4 := dial4(t, ctx, x, epA)
	root4, snap4 := &nfsraw.GetFH{}, &nfsraw.GetFH{}
	if err := v4.Run(ctx, &nfsraw.PutRootFH{}, &nfsraw.Lookup{Name: "vola"}, root4); err != nil {
		t.Fatal(err)
	}
	if err := v4.Run(ctx, &nfsraw.PutRootFH{}, &nfsraw.Lookup{Name: "vola"}, &nfsraw.Lookup{Name: ".snapshot"}, &nfsraw.Lookup{Name: "s1"}, snap4); err != nil {
		t.Fatal(err)
	}
	forge := func(h []byte, ino, snap uint64) []byte {
		f, err := nfsraw.ForgeCeph(h, ino, snap)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// Controls: A's own file through both exports, and its root through a
	// handle forged the same way, work.
	buf := make([]byte, 64)
	for _, m := range []struct {
		name string
		c    *nfs3.Client
	}{{"volume", a}, {"snapshot", aSnap}} {
		fh, _, err := m.c.Lookup(ctx, m.c.Root, "a-data")
		if err != nil {
			t.Fatalf("A's %s: LOOKUP a-data: %v", m.name, err)
		}
		if n, _, err := m.c.Read(ctx, fh, buf, 0); err != nil || string(buf[:n]) != "data of a" {
			t.Fatalf("A's %s: READ a-data: %q %v", m.name, buf[:n], err)
		}
		if _, err := m.c.GetAttr(ctx, forge(m.c.Root, nfsraw.CephIno(m.c.Root), nfsraw.CephSnap(m.c.Root))); err != nil {
			t.Fatalf("A's %s: GETATTR of its root through a handle made the same way: %v", m.name, err)
		}
	}

	attacks := 0
	for _, from := range []struct {
		name   string
		c      *nfs3.Client
		root4  []byte
		extras map[string]uint64
	}{{"A's volume", a, root4.FH, nil}, {"A's snapshot", aSnap, snap4.FH, map[string]uint64{"A's live root": nfsraw.CephIno(a.Root)}}} {
		tg := maps.Clone(targets)
		maps.Copy(tg, from.extras)
		for name, ino := range tg {
			for _, snap := range snaps {
				if name == "A's live root" && snap == nfsraw.CephSnap(aSnap.Root) {
					continue // that is the snapshot export's own root
				}
				fh, fh4 := forge(from.c.Root, ino, snap), forge(from.root4, ino, snap)
				what := fmt.Sprintf("from %s: %s, snapid %#x", from.name, name, snap)
				_, err := from.c.GetAttr(ctx, fh)
				handleRefused(t, "v3 GETATTR "+what, err)
				n, _, err := from.c.Read(ctx, fh, buf, 0)
				if err == nil && n > 0 {
					t.Errorf("v3 READ %s read %q", what, buf[:n])
				}
				handleRefused(t, "v3 READ "+what, err)
				_, err = from.c.ReadDirPlus(ctx, fh)
				handleRefused(t, "v3 READDIRPLUS "+what, err)
				_, _, err = from.c.Lookup(ctx, fh, "secret")
				handleRefused(t, "v3 LOOKUP "+what, err)
				// A snapshot's export is read-only: NFSv3 refuses a change
				// there before it looks at the handle.
				changeRefused := handleRefused
				if from.c == aSnap {
					changeRefused = rofsOrHandleRefused
				}
				_, err = from.c.Write(ctx, fh, []byte("OVERWRITTEN"), 0, nfs3.FileSync)
				changeRefused(t, "v3 WRITE "+what, err)
				changeRefused(t, "v3 SETATTR "+what, from.c.SetAttr(ctx, fh, nfs3.SetAttrs{Mode: nfs3.Mode(0o777)}))
				handleRefused(t, "v4 GETATTR "+what, v4.Run(ctx, &nfsraw.PutFH{FH: fh4}, &nfsraw.GetAttr{}))
				rd := &nfsraw.Read{Count: 64}
				err = v4.Run(ctx, &nfsraw.PutFH{FH: fh4}, rd)
				if err == nil && len(rd.Data) > 0 {
					t.Errorf("v4 READ %s read %q", what, rd.Data)
				}
				handleRefused(t, "v4 READ "+what, err)
				rdd := &nfsraw.ReadDir{}
				err = v4.Run(ctx, &nfsraw.PutFH{FH: fh4}, rdd)
				if err == nil && len(rdd.Entries) > 0 {
					t.Errorf("v4 READDIR %s listed %d entries", what, len(rdd.Entries))
				}
				handleRefused(t, "v4 READDIR "+what, err)
				handleRefused(t, "v4 LOOKUP "+what, v4.Run(ctx, &nfsraw.PutFH{FH: fh4}, &nfsraw.Lookup{Name: "secret"}))
				handleRefused(t, "v4 WRITE "+what, v4.Run(ctx, &nfsraw.PutFH{FH: fh4}, &nfsraw.Write{Data: []byte("OVERWRITTEN")}))
				attacks += 11
			}
		}
	}
	t.Logf("%d forged-handle attacks (snapids: A's snapshot %#x, B's %#x)", attacks, nfsraw.CephSnap(aSnap.Root), nfsraw.CephSnap(bSnap.Root))
	if after := nfsraw.Tree(mountB); after != bBefore {
		t.Errorf("B's volume changed:\nbefore:\n%s\nafter:\n%s", bBefore, after)
	}

	// Nothing on the Ceph network reaches the sandbox: from the cluster's own
	// namespace, its NFS and rpcbind ports on the sandbox's Ceph address do
	// not answer (the control: the monitor's port does).
	connect := func(addr string) error {
		return exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+cl.Netns, "timeout", "3",
			"bash", "-c", "exec 3<>/dev/tcp/"+strings.Replace(addr, ":", "/", 1)).Run()
	}
	if err := connect(cl.Addr + ":3300"); err != nil {
		t.Fatalf("control: the monitor's port from its namespace: %v", err)
	}
	for _, port := range []string{"2049", "111"} {
		if err := connect(cephSubnet + ".100:" + port); err == nil {
			t.Errorf("the Ceph network reached the sandbox's port %s", port)
		}
	}

	// A's cephx key, as the node keeps it, reads A's objects and not B's.
	rados := func(ns string) (string, error) {
		out, err := exec.CommandContext(ctx, "rados", "--conf", cl.Conf, "--id", "iso."+keyA,
			"--keyring", filepath.Join(s.dataDir, "cephfs", "keys", keyA+".keyring"), "-p", "cephfs.cephfs.data", "-N", ns, "ls").CombinedOutput()
		return string(out), err
	}
	if out, err := rados("fsvolumens_" + keyA); err != nil || strings.TrimSpace(out) == "" {
		t.Errorf("A's key cannot list A's objects: %v %s", err, out)
	}
	if out, err := rados("fsvolumens_" + keyB); err == nil {
		t.Errorf("A's key listed B's objects:\n%s", out)
	}
}

// rofsOrHandleRefused is handleRefused, or NFS3ERR_ROFS.
func rofsOrHandleRefused(t *testing.T, what string, err error) {
	t.Helper()
	if st, ok := nfs3.StatusOf(err); ok && st == nfs3.ErrROFS {
		return
	}
	handleRefused(t, what, err)
}

// TestCephFSRestart: Basin on CephFS stops and starts (SIGTERM, then SIGKILL)
// with its data plane serving, as on btrfs: the NFS client reads and writes
// through the stop, the next Basin adopts the same Ganesha (its Ceph link and
// ceph.conf with it) and exports a new volume; a second Basin on the same
// cluster serves beside it; basin teardown leaves no ceph-fuse, mount or
// process behind.
func TestCephFSRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, _ := cephServer(t, "rst")
	s.keep = true
	s.start()
	c := s.client()
	nfsPool(t, c)
	policy := map[string]any{"rules": []any{rule(s.addrN(201), "READ_WRITE", true, true, "true")}}
	var h *clienthost.Host // one client host: a second at its address would take its replies
	volume := func(id string) *nfs3.Client {
		mutate(t, c, "POST", loc+"/volumes?volumeId="+id, map[string]any{"shareName": id, "storagePool": "pool1", "capacityGib": "1",
			"protocols": []string{"NFSV3"}, "unixPermissions": "0777", "exportPolicy": policy})
		if h == nil {
			h = s.host(201) // once the network's bridge is up, with the first volume
		}
		return mount3(t, ctx, h, endpoint(t, c, id), "/"+id)
	}
	v := volume("vol1")
	if err := writePath(ctx, v, "f", "first"); err != nil {
		t.Fatal(err)
	}
	_, ganesha := daemonPIDs(s.dataDir, "ganesha.nfsd")
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Logf("stopping Basin (%v)", sig)
		s.stop(sig)
		want := fmt.Sprintf("written while Basin was down (%v)", sig)
		if err := writePath(ctx, v, "f", want); err != nil {
			t.Fatalf("NFS write with Basin stopped (%v): %v", sig, err)
		}
		s.start()
		c = s.client()
		if got, err := readPath(ctx, v, "f"); err != nil || got != want {
			t.Fatalf("after the restart (%v): %q, %v", sig, got, err)
		}
		if _, now := daemonPIDs(s.dataDir, "ganesha.nfsd"); !slices.Equal(now, ganesha) {
			t.Errorf("Ganesha %v after the restart (%v), was %v: not adopted", now, sig, ganesha)
		}
		t.Logf("restarted after %v; a new volume", sig)
		nv := volume(fmt.Sprintf("new%d", i))
		t.Logf("new volume mounted")
		if err := writePath(ctx, nv, "g", "new"); err != nil {
			t.Fatalf("a volume made after the restart (%v): %v", sig, err)
		}
	}

	// A second Basin on the same cluster (its own bridge, group and cephx
	// users) exports its first volume under the ID of this one's first: each
	// sandbox's host name keeps their CephFS sessions apart (with the host's
	// name for both, FSAL_CEPH named them alike and the MDS refused the
	// second: "duplicated session uuid"), and both serve on.
	s2, _ := cephServer(t, "rst2")
	s2.start()
	c2 := s2.client()
	nfsPool(t, c2)
	mutate(t, c2, "POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3"}, "unixPermissions": "0777",
		"exportPolicy": map[string]any{"rules": []any{rule(s2.addrN(201), "READ_WRITE", true, true, "true")}}})
	v2 := mount3(t, ctx, s2.host(201), endpoint(t, c2, "vol1"), "/vol1")
	if err := writePath(ctx, v2, "f", "the second Basin's"); err != nil {
		t.Fatalf("the second Basin's volume: %v", err)
	}
	if got, err := readPath(ctx, v, "f"); err != nil || got != "written while Basin was down (killed)" {
		t.Errorf("the first Basin's volume beside the second's: %q, %v", got, err)
	}
	s2.stop(syscall.SIGTERM)
	s.stop(syscall.SIGTERM)
}

// TestCephFSServiceLevelAndMetrics: a CephFS volume's service level and
// metrics hold as a btrfs volume's do. A volume limited to 16 MiB/s reads
// and writes at 95–100 % of its limit (median of 3, as TestQoSLimits);
// the metrics API counts the requests and bytes a write load made, saw it at
// the limit, and reports the space the subvolume uses.
func TestCephFSServiceLevelAndMetrics(t *testing.T) {
	s, _ := cephServer(t, "qos")
	s.start(qosFlags...)
	c := s.client()
	// A 4 GiB volume assigned 16 MiB/s in a manual-QoS pool: the test
	// cluster has a few GiB, and a volume's quota counts whole against it.
	qpool(t, c, "p1", "manual", "PREMIUM", 1024, map[string]any{"qosType": "MANUAL"})
	v := s.qvolume(c, "p1", "std", "manual", 4, 16, map[string]any{"throughputMibps": 16})
	v.layOut(t) // through the volume's ceph-fuse mount on the server
	h := s.host(201)
	for _, rw := range []string{"read", "write"} {
		ramp := map[string]float64{"read": 1, "write": 3}[rw]
		got := medianOf3(t, h, load{v: v, rw: rw, secs: 4, ramp: ramp})[0]
		within(t, fmt.Sprintf("CephFS %s (median of 3)", rw), got, v.limit, 0.95, 1.00)
	}

	// A sampling pass between the loads and the phase.
	sampledPast(t, c, "std", time.Now().Add(time.Second), "writeIops", false)
	t0 := time.Now()
	res, _ := benchNFS(t, h, v.ep, "std", "--name", "m", "--rw", "write", "--bs", "1m", "--iodepth", "4", "--size", "64m")
	t1 := time.Now()
	ios, bytes, _, _, _ := benchJob(res, "write")
	ph := measurePhase(t, c, "std", t0, t1, "writeIops", "writeMibps", "atLimitShare", "usedBytes")
	t.Logf("CephFS write: bench %.0f writes, %.0f bytes in %s; metrics %.0f writes, %.0f bytes, at the limit up to %.2f of the time, %.0f bytes used",
		ios, bytes, t1.Sub(t0).Round(time.Millisecond), ph.total["writeIops"], ph.total["writeMibps"]*(1<<20), ph.max["atLimitShare"], ph.max["usedBytes"])
	checkCounted(t, ph, "write", ios, bytes)
	// 64 MiB at 16 MiB/s: four seconds against the limit.
	if ph.max["atLimitShare"] < 0.2 {
		t.Errorf("atLimitShare at most %.2f while a write ran at the limit", ph.max["atLimitShare"])
	}
	// The subvolume holds the files laid out, this load's file and the write
	// loads' eight files of at most 32 MiB (CephFS's recursive byte count,
	// which lags writes by seconds).
	least := float64(readJobs*readSize) + bytes
	if used := ph.max["usedBytes"]; used < least || used > least+8*32<<20 {
		t.Errorf("usedBytes %.0f; the volume holds %.0f to %.0f", used, least, least+8*32<<20)
	}
	s.stop(syscall.SIGTERM)
}

// TestCephFSSMB: a CephFS volume shared over SMB to an Active Directory user,
// as a btrfs volume is (Samba in the network's instance serves the volume's
// ceph-fuse mount): alice writes and reads back, the share's size is the
// volume's capacity (the subvolume's quota), and a snapshot is a Previous
// Version holding the data of its time, read-only.
func TestCephFSSMB(t *testing.T) {
	s, _ := cephServer(t, "smb")
	l := startSMBLab(t, s, nil, "--overcommit-ratio", "100000")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sh := l.volume("csmb", map[string]any{"capacityGib": 5, "smbSettings": []string{"SHOW_PREVIOUS_VERSIONS", "BROWSABLE"}})
	alice := l.user("alice")
	fs := l.mount(ctx, sh, alice, sh.Share)
	if err := fs.WriteFile("hello.txt", []byte("before"), 0o644); err != nil {
		t.Fatalf("SMB write: %v", err)
	}
	if got, err := fs.ReadFile("hello.txt"); err != nil || string(got) != "before" {
		t.Fatalf("SMB read: %q, %v", got, err)
	}
	st, err := fs.Statfs(".")
	if err != nil {
		t.Fatal(err)
	}
	if size := st.BlockSize() * st.TotalBlockCount(); size != 5<<30 {
		t.Errorf("the share's size is %d bytes, want the volume's 5 GiB", size)
	}

	mutate(t, l.c, "POST", loc+"/volumes/csmb/snapshots?snapshotId=s1", map[string]any{})
	var snap map[string]any
	if err := l.c.Do(ctx, "GET", loc+"/volumes/csmb/snapshots/s1", nil, nil, &snap); err != nil {
		t.Fatal(err)
	}
	created, err := time.Parse(time.RFC3339Nano, fmt.Sprint(snap["createTime"]))
	if err != nil {
		t.Fatalf("createTime %v: %v", snap["createTime"], err)
	}
	gmt := created.UTC().Format("@GMT-2006.01.02-15.04.05")
	if err := fs.WriteFile("hello.txt", []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if o, err := l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", "allinfo hello.txt"); err != nil || !strings.Contains(o, gmt) {
		t.Fatalf("allinfo does not list %s (%v):\n%s", gmt, err, o)
	}
	if o, err := l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", `get "`+gmt+`\hello.txt" `+out); err != nil {
		t.Fatalf("get the previous version: %v\n%s", err, o)
	}
	if got, _ := os.ReadFile(out); string(got) != "before" {
		t.Errorf("the previous version holds %q, want %q", got, "before")
	}
	if o, err := l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", `put `+out+` "`+gmt+`\new.txt"`); err == nil && !strings.Contains(o, "NT_STATUS_") {
		t.Errorf("wrote into a previous version:\n%s", o)
	}
	if got, err := fs.ReadFile("hello.txt"); err != nil || string(got) != "after" {
		t.Errorf("SMB read after the snapshot: %q, %v", got, err)
	}
}

// TestCephFSNFSv4StateInRADOS: a CephFS network's sandbox keeps its NFSv4
// client records in RADOS (nfs_recovery_pool: pool basin-nfs, the group's
// namespace) under its own node id and grace database, not under its recov/
// directory, and names itself to clients (EXCHANGE_ID's server owner and
// scope) by that node id. An NFSv4.1 client holding an open (deny write) and
// a write lock reclaims both after its Ganesha is killed and Basin starts it
// again, and reads back what it wrote; another client meanwhile is held off
// by grace, and gets in once Ganesha lifts it, woken by Basin's grace kicks.
func TestCephFSNFSv4StateInRADOS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, cl := cephServer(t, "rec")
	s.start()
	c := s.client()
	nfsPool(t, c)
	mutate(t, c, "POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV4"}, "unixPermissions": "0777",
		"exportPolicy": map[string]any{"rules": []any{rule(s.addrN(201), "READ_WRITE", true, true, "true"), rule(s.addrN(202), "READ_WRITE", true, true, "true")}}})
	ep := endpoint(t, c, "vol1")
	h := s.host(201)
	within := func(fn func() error) {
		t.Helper()
		if err := h.Within(fn); err != nil {
			t.Fatal(err)
		}
	}
	var cli *nfsraw.Client
	within(func() (err error) {
		cli, err = nfsraw.Dial41With(ctx, ep.String(), 2049, nfsraw.Auth{Machine: "rec-a"}, nfsraw.Options41{Owner: "rec-a", Verifier: [8]byte{'r', 'e', 'c'}})
		return err
	})
	defer func() { cli.Close() }()
	node := "basin-" + s.bridge
	// (Ganesha 4.3 sends the scope with its C string's terminating NUL.)
	if o := cli.ServerOwner(); o.Major != node || o.Scope != node+"\x00" {
		t.Errorf("server owner %q, scope %q: want both %q (the node id of its records)", o.Major, o.Scope, node)
	}
	root, err := cli.LookupPath(ctx, "vol1")
	if err != nil {
		t.Fatal(err)
	}
	openOwner, lkOwner := []byte("rec-a/open"), []byte("rec-a/lock")
	fh, open, err := cli.OpenFile(ctx, root, "data", nfsraw.ShareAccessBoth, nfsraw.ShareDenyWrite, openOwner, true)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	lk := &nfsraw.Lock{Type: nfsraw.WriteLock, Length: 4096, NewOwner: true, OpenStateID: open, Owner: nfsraw.LockOwner{ClientID: cli.ClientID(), Owner: lkOwner}}
	if err := cli.Run(ctx, &nfsraw.PutFH{FH: fh}, lk); err != nil {
		t.Fatalf("lock: %v", err)
	}
	data := bytes.Repeat([]byte("kept in RADOS. "), 274)[:4096]
	if w := (&nfsraw.Write{StateID: lk.StateID, Data: data}); cli.Run(ctx, &nfsraw.PutFH{FH: fh}, w) != nil || w.Count != 4096 {
		t.Fatalf("write under the lock: %d bytes", w.Count)
	}

	// The records are RADOS objects in the group's namespace: the grace
	// database and the node's client records; none in recov/.
	objects := func() []string {
		t.Helper()
		out, err := exec.CommandContext(ctx, "rados", "-c", cl.Conf, "-p", nfsRecoveryPool, "-N", "rec", "ls").Output()
		if err != nil {
			t.Fatalf("rados ls: %v", err)
		}
		return strings.Fields(string(out))
	}
	if objs := objects(); !slices.Contains(objs, "grace-"+node) || !slices.ContainsFunc(objs, func(o string) bool {
		return strings.HasPrefix(o, "rec-") && strings.HasSuffix(o, ":"+node)
	}) {
		t.Fatalf("RADOS objects of namespace rec: %v; want grace-%s and rec-…:%s", objs, node, node)
	}
	if recs, _ := filepath.Glob(filepath.Join(s.dataDir, "sandboxes", "*", "recov", "*", "*")); len(recs) != 0 {
		t.Errorf("client records under recov/ too: %v", recs)
	}

	pids := s.ganeshaPIDs()
	if len(pids) != 1 {
		t.Fatalf("Ganesha processes %v", pids)
	}
	killed := time.Now()
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The client notices, sets up a new session (same owner and verifier),
	// and reclaims what it held.
	for {
		err := cli.Run(ctx, &nfsraw.PutFH{FH: fh}, &nfsraw.Read{StateID: lk.StateID, Count: 16})
		if nfsraw.NeedsReestablish(err) {
			break
		}
		if err != nil {
			t.Fatalf("the killed Ganesha's session answered %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		var err error
		within(func() error { _, err = cli.Reestablish(ctx); return nil })
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("reestablish: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("new session %v after the kill", time.Since(killed).Round(time.Millisecond))
	// Another client, new, is held off while the first may reclaim.
	var other *nfsraw.Client
	if err := s.host(202).Within(func() (err error) {
		other, err = nfsraw.Dial41(ctx, ep.String(), 2049, nfsraw.Auth{Machine: "rec-b"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	oroot, err := other.LookupPath(ctx, "vol1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.OpenFile(ctx, oroot, "data", nfsraw.ShareAccessWrite, nfsraw.ShareDenyNone, []byte("rec-b/open"), false); !isNFS4Status(err, nfsraw.ErrGrace) {
		t.Errorf("another client's OPEN in grace: %v, want NFS4ERR_GRACE", err)
	}
	open, err = cli.ReclaimOpen(ctx, fh, nfsraw.ShareAccessBoth, nfsraw.ShareDenyWrite, openOwner)
	if err != nil {
		t.Fatalf("reclaim open: %v", err)
	}
	rlk := &nfsraw.Lock{Type: nfsraw.WriteLock, Reclaim: true, Length: 4096, NewOwner: true, OpenStateID: open,
		Owner: nfsraw.LockOwner{ClientID: cli.ClientID(), Owner: lkOwner}}
	if err := cli.Run(ctx, &nfsraw.PutFH{FH: fh}, rlk); err != nil {
		t.Fatalf("reclaim lock: %v", err)
	}
	if err := cli.Run(ctx, &nfsraw.ReclaimComplete{}); err != nil {
		t.Fatalf("reclaim complete: %v", err)
	}
	t.Logf("open and lock reclaimed %v after the kill", time.Since(killed).Round(time.Millisecond))
	reclaimed := time.Now()
	rd := &nfsraw.Read{StateID: rlk.StateID, Count: 4096}
	if err := cli.Run(ctx, &nfsraw.PutFH{FH: fh}, rd); err != nil || !bytes.Equal(rd.Data, data) {
		t.Fatalf("read back under the reclaimed lock: %v (%d bytes)", err, len(rd.Data))
	}
	// Every client it recorded has reclaimed, so Ganesha may lift its grace.
	// Its reaper looks every 10 s, or when its grace database is written:
	// Basin writes it once a second while Ganesha is in grace (gracekick.go),
	// and says so in its log when the grace is over.
	for {
		_, _, err := other.OpenFile(ctx, oroot, "data", nfsraw.ShareAccessRead, nfsraw.ShareDenyNone, []byte("rec-b/open2"), false)
		if err == nil {
			break
		}
		if !isNFS4Status(err, nfsraw.ErrGrace) {
			t.Fatalf("another client's OPEN after the reclaim: %v", err)
		}
		if time.Since(reclaimed) > time.Minute {
			t.Fatalf("still in grace a minute after the only client reclaimed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("grace over %v after the reclaim, %v after the kill", time.Since(reclaimed).Round(100*time.Millisecond), time.Since(killed).Round(100*time.Millisecond))
	// The kick that woke the reaper ends after its own notify, which waits
	// 3 s for the killed Ganesha's watch: its log line comes that much later.
	lifted := regexp.MustCompile(`grace lifted.* kicks=[1-9]`)
	for end := time.Now().Add(20 * time.Second); !lifted.MatchString(s.log.String()); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Errorf("the log does not show a grace lifted after Basin's kicks:\n%s", s.log)
			break
		}
	}
}
