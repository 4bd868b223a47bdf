package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/clienthost"
)

// Storage health end to end: a volume whose filesystem turns read-only is in
// ERROR with its reason while others serve on, and READY again after the repair;
// a data directory on a small filesystem that fills (the database cannot commit,
// the store turns read-only) unexports nothing.

// volumeState returns a volume's state and stateDetails.
func volumeState(t *testing.T, c *client.Client, project, vol string) (string, string) {
	t.Helper()
	var v client.Object
	if err := c.Do(context.Background(), "GET", "/v1/projects/"+project+"/locations/us-east4/volumes/"+vol, nil, nil, &v); err != nil {
		t.Fatal(err)
	}
	details, _ := v["stateDetails"].(string)
	return v["state"].(string), details
}

// waitState polls a volume until its state is want, and returns its details.
func waitState(t *testing.T, c *client.Client, project, vol, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		state, details := volumeState(t, c, project, vol)
		if state == want {
			return details
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume %s/%s is %s (%q), not %s, after 30 s", project, vol, state, details, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// get returns an unauthenticated GET's status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// auditMethods lists the methods of the project's audit entries for resource.
func auditMethods(t *testing.T, c *client.Client, project, resource string) []string {
	t.Helper()
	var res struct {
		Entries []struct{ Method, Resource, Details string }
	}
	if err := c.Do(context.Background(), "GET", "/v1/projects/"+project+"/auditLogs?pageSize=1000", nil, nil, &res); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range res.Entries {
		if e.Resource == resource && strings.HasPrefix(e.Method, "basin.volumes.storage") {
			out = append(out, e.Method)
		}
	}
	return out
}

// keyOf returns a volume's storage key, from the server's database.
func keyOf(t *testing.T, s *server, id string) string {
	t.Helper()
	vols, _ := records(t, s.dataDir)
	for _, v := range vols {
		if v.ID == id {
			return v.Key
		}
	}
	t.Fatalf("no volume %s in the database", id)
	return ""
}

// nfsClient mounts /vol of ep from host h.
func nfsClient(t *testing.T, h *clienthost.Host, ep, vol string) *nfs3.Client {
	t.Helper()
	var cl *nfs3.Client
	if err := h.Within(func() (err error) {
		cl, err = nfs3.Mount(context.Background(), ep, "/"+vol, nfs3.Options{})
		return err
	}); err != nil {
		t.Fatalf("mount %s:/%s: %v", ep, vol, err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// readsBack mounts vol afresh and reads file: served, as a new client sees it.
func readsBack(h *clienthost.Host, ep, vol, file, want string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cl *nfs3.Client
	if err := h.Within(func() (err error) {
		cl, err = nfs3.Mount(ctx, ep, "/"+vol, nfs3.Options{})
		return err
	}); err != nil {
		return fmt.Errorf("mount %s:/%s: %w", ep, vol, err)
	}
	defer cl.Close()
	got, err := readPath(ctx, cl, file)
	if err != nil || got != want {
		return fmt.Errorf("%s:/%s/%s reads %q (%v), want %q", ep, vol, file, got, err, want)
	}
	return nil
}

func metricLine(t *testing.T, addr, series string) string {
	t.Helper()
	_, body := get(t, "http://"+addr+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, series+" ") {
			return l
		}
	}
	return ""
}

// A volume whose filesystem is remounted read-only is in ERROR with the reason in
// plain words (and no host path), /readyz answers 503 with a reason while
// /healthz stays 200, the metrics count it and the audit log records it; it
// still serves reads, and the other volume reads and writes; remounted
// read-write it is READY again, recorded too.
func TestVolumeReadOnlyIsErrorUntilRepaired(t *testing.T) {
	s := newServer(t, "BASIN_TEST_RESYNC_INTERVAL=1s")
	metricsAddr := freeAddr(t)
	s.start("--metrics-listen", metricsAddr)
	c := s.client()
	nfsPool(t, c)
	s.openVolume(c, "vol1")
	s.openVolume(c, "vol2")
	ep1, ep2 := endpoint(t, c, "vol1").String(), endpoint(t, c, "vol2").String()
	h := s.host(140)
	ctx := context.Background()
	// vol1's file is written on the host: a file Ganesha holds open for writing
	// would make the read-only remount fail (busy).
	key := keyOf(t, s, "vol1")
	if err := os.WriteFile(filepath.Join(s.dataDir, "mounts", key, "hello"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	c1, c2 := nfsClient(t, h, ep1, "vol1"), nfsClient(t, h, ep2, "vol2")
	if err := writePath(ctx, c2, "hello", "hello"); err != nil {
		t.Fatal(err)
	}
	fsPath := filepath.Join(s.dataDir, "fs", key)
	if out, err := exec.Command("mount", "-o", "remount,ro", fsPath).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	details := waitState(t, c, "p1", "vol1", "ERROR")
	if !strings.Contains(details, "read-only") || strings.Contains(details, "/") && strings.Contains(details, s.dataDir) {
		t.Fatalf("stateDetails %q: want the reason in plain words, no path", details)
	}
	if state, _ := volumeState(t, c, "p1", "vol2"); state != "READY" {
		t.Fatalf("vol2 is %s", state)
	}
	if code, body := get(t, "http://"+s.addr+"/readyz"); code != 503 || !strings.Contains(body, "1 volume(s) in ERROR") {
		t.Fatalf("readyz: %d %q", code, body)
	}
	if code, _ := get(t, "http://"+s.addr+"/healthz"); code != 200 {
		t.Fatalf("healthz: %d", code)
	}
	if l := metricLine(t, metricsAddr, `basin_volumes_in_error{reason="read_only"}`); !strings.HasSuffix(l, " 1") {
		t.Fatalf("metric: %q", l)
	}
	// Reads go on, writes are refused; the other volume is untouched.
	if err := readsBack(h, ep1, "vol1", "hello", "hello"); err != nil {
		t.Fatal(err)
	}
	if err := writePath(ctx, c1, "more", "more"); err == nil || !strings.Contains(err.Error(), "ROFS") {
		t.Fatalf("write to the read-only volume: %v, want NFS3ERR_ROFS", err)
	}
	if err := writePath(ctx, c2, "more", "more"); err != nil {
		t.Fatalf("vol2: %v", err)
	}
	if err := readsBack(h, ep2, "vol2", "more", "more"); err != nil {
		t.Fatal(err)
	}

	// The administrator's repair.
	if out, err := exec.Command("mount", "-o", "remount,rw", fsPath).CombinedOutput(); err != nil {
		t.Fatalf("remount read-write: %v: %s", err, out)
	}
	if details := waitState(t, c, "p1", "vol1", "READY"); details != "" {
		t.Fatalf("READY with details %q", details)
	}
	if code, body := get(t, "http://"+s.addr+"/readyz"); code != 200 {
		t.Fatalf("readyz after the repair: %d %q", code, body)
	}
	if err := writePath(ctx, c1, "more", "more"); err != nil {
		t.Fatalf("write after the repair: %v", err)
	}
	if l := metricLine(t, metricsAddr, `basin_volumes_in_error{reason="read_only"}`); !strings.HasSuffix(l, " 0") {
		t.Fatalf("metric after the repair: %q", l)
	}
	got := auditMethods(t, c, "p1", "projects/p1/locations/us-east4/volumes/vol1")
	if strings.Join(got, ",") != "basin.volumes.storageRecovered,basin.volumes.storageFailed" { // newest first
		t.Fatalf("audit entries %v", got)
	}
	s.stop(syscall.SIGTERM)
}

// cleanupBelow unmounts what is mounted below dir and detaches the loop devices
// of files in it: what a server that failed to stop cleanly left of this test's
// own data directory (judged first by the server's own cleanup).
func cleanupBelow(dir string) {
	out, _ := exec.Command("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").Output()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var points []string
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- { // the latest first
		exec.Command("umount", "-l", points[i]).Run()
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && strings.HasPrefix(f[1], dir+"/") {
			exec.Command("losetup", "-d", f[0]).Run()
		}
	}
}

// A data directory on a small filesystem that fills up: the database cannot
// commit. The store, allocated in full when it was made, loses nothing: p1 writes
// on, and no volume is unexported: passes of the reconcile go by while another
// project's client mounts and reads its volume; both stay READY. Stopped, given
// room and started again, Basin serves both volumes READY with what they held.
// (Before the store was allocated, the filling host turned the store's btrfs
// read-only and the reconcile unexported every volume; a store failing under
// Basin is internal/storage/btrfs's TestHealthStoreFillsUp.)
func TestFullDataDirUnexportsNothing(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1536m,mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	data := filepath.Join(mnt, "data")
	t.Cleanup(func() {
		cleanupBelow(data)
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("unmount tmpfs: %v: %s", err, out)
		}
	})
	s := newServer(t, "BASIN_TEST_RESYNC_INTERVAL=1s")
	s.dataDir = data
	// The store sized from the tmpfs (1.25 GiB): volumes' filesystems start at
	// 256 MiB (the e2e servers provision thin).
	start := func() { s.start("--store-size", "auto", "--thin-initial", "256M") }
	start()
	c := s.client()
	nfsPool(t, c)
	mutate(t, c, "POST", "/v1/projects/p2/locations/us-east4/storagePools?storagePoolId=pool2",
		map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "100", "network": "projects/p2/global/networks/default"})
	s.openVolume(c, "vol1")
	mutate(t, c, "POST", "/v1/projects/p2/locations/us-east4/volumes?volumeId=vol2", map[string]any{"shareName": "vol2", "storagePool": "pool2",
		"capacityGib": "1", "protocols": []string{"NFSV3"}, "exportPolicy": map[string]any{"rules": []any{rule(s.subnet.String(), "READ_WRITE", true, false, "true")}}})
	ep1, ep2 := endpoint(t, c, "vol1").String(), endpointIn(t, c, "p2", "vol2").String()
	h := s.host(141)
	ctx := context.Background()
	c1, c2 := nfsClient(t, h, ep1, "vol1"), nfsClient(t, h, ep2, "vol2")
	for _, cl := range []*nfs3.Client{c1, c2} {
		if err := writePath(ctx, cl, "hello", "hello"); err != nil {
			t.Fatal(err)
		}
	}

	// The host filesystem fills, then p1 writes on: into space its volume was
	// given.
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	filler, err := os.Create(filepath.Join(mnt, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(filler.Fd()), 0, 0, int64(st.Bavail)*st.Bsize); err != nil {
		t.Fatal(err)
	}
	filler.Close()
	fh, err := c1.CreateWith(ctx, c1.Root, "big", nfs3.CreateArgs{How: nfs3.Unchecked})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	rand.Read(buf)
	for i := range 64 {
		if _, err := c1.Write(ctx, fh, buf, int64(i)<<20, nfs3.FileSync); err != nil {
			t.Fatalf("p1's write %d on a full host filesystem: %v (its volume's space was allocated)", i, err)
		}
	}
	// The database cannot commit: a snapshot cannot even be recorded.
	var op client.Object
	err = c.Do(ctx, "POST", "/v1/projects/p2/locations/us-east4/volumes/vol2/snapshots?snapshotId=s1", nil, map[string]any{}, &op)
	if err == nil {
		t.Fatalf("a snapshot was recorded on a full disk: %v", op)
	}
	t.Logf("snapshot on a full disk: %v", err)
	// The store's btrfs would find a failure at its next commit (every 30 s, or
	// a sync): there is none.
	if fd, err := unix.Open(filepath.Join(data, "store"), unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
		unix.Syncfs(fd)
		unix.Close(fd)
	}
	// Reconcile passes go by (one a second): p2's client mounts and reads on.
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if err := readsBack(h, ep2, "vol2", "hello", "hello"); err != nil {
			t.Fatalf("p2's volume stopped serving on a full disk: %v", err)
		}
	}
	if err := readsBack(h, ep1, "vol1", "hello", "hello"); err != nil {
		t.Fatalf("p1's volume stopped serving on a full disk: %v", err)
	}
	for _, v := range []struct{ project, id string }{{"p1", "vol1"}, {"p2", "vol2"}} {
		var got client.Object
		if err := c.Do(ctx, "GET", "/v1/projects/"+v.project+"/locations/us-east4/volumes/"+v.id, nil, nil, &got); err != nil || got["state"] != "READY" {
			t.Errorf("%s on a full host filesystem: %v %v (%v)", v.id, got["state"], got["stateDetails"], err)
		}
	}

	// The administrator stops Basin, makes room, starts it again.
	s.stop(syscall.SIGTERM)
	os.Remove(filepath.Join(mnt, "filler"))
	start()
	if err := h.Attach(s.bridge); err != nil { // Basin made its bridge anew
		t.Fatal(err)
	}
	c = s.client()
	for _, v := range []struct{ project, id, ep string }{{"p1", "vol1", ep1}, {"p2", "vol2", ep2}} {
		waitState(t, c, v.project, v.id, "READY")
		// A new sandbox: the client learns its address's new link anew.
		if err := waitForErr(30*time.Second, func() error { return readsBack(h, v.ep, v.id, "hello", "hello") }); err != nil {
			t.Fatalf("after the restart: %v", err)
		}
	}
	if code, body := get(t, "http://"+s.addr+"/readyz"); code != 200 {
		t.Fatalf("readyz after the restart: %d %q", code, body)
	}
	s.stop(syscall.SIGTERM)
}
