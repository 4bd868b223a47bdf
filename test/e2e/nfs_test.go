package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/clienthost"
)

// host returns a client machine at the n-th address of the server's subnet.
func (s *server) host(n int) *clienthost.Host {
	if n < 128 {
		s.t.Fatalf("client hosts live at .128 and above, outside the endpoint range; got .%d", n)
	}
	a := s.subnet.Addr()
	for range n {
		a = a.Next()
	}
	return clienthost.New(s.t, s.bridge, netip.PrefixFrom(a, s.subnet.Bits()))
}

// addr returns the n-th address of the server's subnet.
func (s *server) addrN(n int) string {
	a := s.subnet.Addr()
	for range n {
		a = a.Next()
	}
	return a.String()
}

// endpoint returns a volume's NFS address (in project p1) from its mountOptions.
func endpoint(t *testing.T, c *client.Client, vol string) netip.Addr {
	t.Helper()
	return endpointIn(t, c, "p1", vol)
}

// endpointIn returns the NFS address of a volume of project from its mountOptions.
func endpointIn(t *testing.T, c *client.Client, project, vol string) netip.Addr {
	t.Helper()
	var v client.Object
	if err := c.Do(context.Background(), "GET", "/v1/projects/"+project+"/locations/us-east4/volumes/"+vol, nil, nil, &v); err != nil {
		t.Fatal(err)
	}
	mo, _ := v["mountOptions"].([]any)
	if len(mo) == 0 {
		t.Fatalf("volume %s has no mountOptions: %v", vol, v)
	}
	a, err := netip.ParseAddr(mo[0].(map[string]any)["ipAddress"].(string))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (s *server) ganeshaPIDs() []int {
	var out []int
	for _, pid := range processesMentioning(filepath.Join(s.dataDir, "sandboxes")) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.HasPrefix(string(comm), "ganesha") {
			out = append(out, pid)
		}
	}
	return out
}

func nfsPool(t *testing.T, c *client.Client) {
	mutate(t, c, "POST", loc+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "100", "network": "projects/p1/global/networks/default"})
}

// openVolume creates a 1 GiB NFSv3 volume in pool1 that every host of the server's
// subnet may use read-write, root kept.
func (s *server) openVolume(c *client.Client, id string) {
	s.t.Helper()
	mutate(s.t, c, "POST", loc+"/volumes?volumeId="+id, map[string]any{"shareName": id, "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3"}, "exportPolicy": map[string]any{"rules": []any{rule(s.subnet.String(), "READ_WRITE", true, false, "true")}}})
}

func rule(clients, access string, v3, v4 bool, root string) map[string]any {
	return map[string]any{"allowedClients": clients, "accessType": access, "nfsv3": v3, "nfsv4": v4, "hasRootAccess": root}
}

// TestExportPolicyMatrix checks every outcome of rules × clients × NFS versions ×
// {read, user write, root write}, from four client namespaces, and that a rule
// change takes effect for new mounts without restarting Ganesha.
func TestExportPolicyMatrix(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	nfsPool(t, c)
	rules := []any{
		rule(s.addrN(201), "READ_WRITE", true, true, "true"),     // rw, root kept
		rule(s.addrN(202), "READ_ONLY", true, true, "true"),      // read only
		rule(s.addrN(203), "READ_WRITE", true, false, "false"),   // rw over v3 only, root squashed
		rule(s.subnet.String(), "READ_NONE", true, true, "true"), // everyone else: nothing (first match wins)
	}
	mutate(t, c, "POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3", "NFSV4"}, "unixPermissions": "0777", "exportPolicy": map[string]any{"rules": rules}})
	ep := endpoint(t, c, "vol1")
	hosts := map[int]*clienthost.Host{201: s.host(201), 202: s.host(202), 203: s.host(203), 204: s.host(204)}
	// Files every test client reads or overwrites, made in the volume before any
	// client has looked them up: a world-readable seed, and one world-writable file
	// per client and version for the "write to an existing file" case.
	mp := filepath.Join(s.dataDir, "mounts", onlyMount(t, s))
	if err := os.WriteFile(filepath.Join(mp, "seed"), []byte("seed data"), 0o644); err != nil {
		t.Fatalf("seeding: %v", err)
	}
	for hostN := range hosts {
		for _, v := range []int{3, 4} {
			f := filepath.Join(mp, fmt.Sprintf("w%d-v%d", hostN, v))
			os.WriteFile(f, []byte("old"), 0o666)
			os.Chmod(f, 0o666)
		}
	}
	type outcome string
	const (
		ok       outcome = "ok"
		readOnly outcome = "read-only error"
		refused  outcome = "refused"
	)
	type want struct {
		read, write, create, rootCreate outcome
		rootOwner                       int // owner of a file root created
	}
	matrix := map[int]map[int]want{
		201: {3: {ok, ok, ok, ok, 0}, 4: {ok, ok, ok, ok, 0}},
		202: {3: {ok, readOnly, readOnly, readOnly, 0}, 4: {ok, readOnly, readOnly, readOnly, 0}},
		203: {3: {ok, ok, ok, ok, 65534}, 4: {refused, refused, refused, refused, 0}},
		204: {3: {refused, refused, refused, refused, 0}, 4: {refused, refused, refused, refused, 0}},
	}
	classify := func(err error) outcome {
		switch {
		case err == nil:
			return ok
		case strings.Contains(err.Error(), "ROFS") || strings.Contains(err.Error(), "Read-only"):
			return readOnly
		default:
			return refused
		}
	}
	for hostN, byVersion := range matrix {
		for version, w := range byVersion {
			name := fmt.Sprintf("client .%d NFSv%d", hostN, version)
			h := hosts[hostN]
			user, root := h.NFS(version, 1000, 1000), h.NFS(version, 0, 0)
			data, err := user.Read(ep, "/vol1/seed")
			if got := classify(err); got != w.read || (err == nil && string(data) != "seed data") {
				t.Errorf("%s read: %s (%v), want %s", name, got, err, w.read)
			}
			existing := fmt.Sprintf("/vol1/w%d-v%d", hostN, version)
			err = user.Write(ep, existing, []byte("new"))
			if got := classify(err); got != w.write {
				t.Errorf("%s write to an existing file: %s (%v), want %s", name, got, err, w.write)
			}
			if got, _ := os.ReadFile(filepath.Join(mp, filepath.Base(existing))); (err == nil) != (string(got) == "new") {
				t.Errorf("%s write: the file holds %q after a write that returned %v", name, got, err)
			}
			file := fmt.Sprintf("/vol1/u%d-v%d", hostN, version)
			err = user.Write(ep, file, []byte("by user"))
			if got := classify(err); got != w.create {
				t.Errorf("%s user create: %s (%v), want %s", name, got, err, w.create)
			}
			if err == nil {
				if e, _ := hosts[201].NFS(3, 0, 0).Stat(ep, file); e.UID != 1000 {
					t.Errorf("%s user write: owner %d, want 1000", name, e.UID)
				}
			}
			file = fmt.Sprintf("/vol1/r%d-v%d", hostN, version)
			err = root.Write(ep, file, []byte("by root"))
			if got := classify(err); got != w.rootCreate {
				t.Errorf("%s root create: %s (%v), want %s", name, got, err, w.rootCreate)
			}
			if err == nil {
				if e, _ := hosts[201].NFS(3, 0, 0).Stat(ep, file); e.UID != w.rootOwner {
					t.Errorf("%s root write: owner %d, want %d (squash)", name, e.UID, w.rootOwner)
				}
			}
		}
	}
	// A rule change reaches new mounts at once, without restarting Ganesha.
	before := s.ganeshaPIDs()
	rules = append([]any{rule(s.addrN(204), "READ_WRITE", true, true, "true")}, rules...)
	mutate(t, c, "PATCH", loc+"/volumes/vol1?updateMask=exportPolicy", map[string]any{"exportPolicy": map[string]any{"rules": rules}})
	if err := hosts[204].NFS(3, 1000, 1000).Write(ep, "/vol1/after-change", []byte("x")); err != nil {
		t.Fatalf("client .204 after the rule change: %v", err)
	}
	if after := s.ganeshaPIDs(); len(before) != 1 || fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("ganesha restarted for a rule change: %v -> %v", before, after)
	}
	// A volume without an export policy is reachable by nobody.
	mutate(t, c, "POST", loc+"/volumes?volumeId=closed", map[string]any{"shareName": "closed", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3", "NFSV4"}})
	closedEP := endpoint(t, c, "closed")
	for _, v := range []int{3, 4} {
		if _, err := hosts[201].NFS(v, 0, 0).Ls(closedEP, "/closed"); err == nil {
			t.Errorf("NFSv%d client reached a volume without an export policy", v)
		}
	}
	s.stop(syscall.SIGTERM)
}

// TestDataAndCapacity: data comes back byte for byte; writing past the capacity fails
// with DQUOT and leaves what was written before intact.
func TestDataAndCapacity(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	nfsPool(t, c)
	mutate(t, c, "POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3", "NFSV4"}, "exportPolicy": map[string]any{"rules": []any{rule(s.subnet.String(), "READ_WRITE", true, true, "true")}}})
	ep := endpoint(t, c, "vol1")
	h := s.host(201)
	nfs := h.NFS(3, 0, 0)
	data := make([]byte, 8<<20)
	rand.Read(data)
	if err := nfs.Write(ep, "/vol1/random.bin", data); err != nil {
		t.Fatal(err)
	}
	got, err := nfs.Read(ep, "/vol1/random.bin")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (err %v), not the %d written", len(got), err, len(data))
	}
	// The volume is a filesystem of its own: clients see its capacity as the size.
	var st nfs3.FSStat
	if err := h.Within(func() error {
		cl, err := nfs3.Mount(context.Background(), ep.String(), "/vol1", nfs3.Options{})
		if err != nil {
			return err
		}
		defer cl.Close()
		st, err = cl.FSStat(context.Background(), cl.Root)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if st.TotalBytes != 1<<30 || st.AvailBytes > 1<<30 || st.AvailBytes < 900<<20 {
		t.Fatalf("FSSTAT: %d bytes in all, %d available; want the volume's 1 GiB", st.TotalBytes, st.AvailBytes)
	}
	// 1.1 GiB into a 1 GiB volume.
	big := filepath.Join(t.TempDir(), "big")
	f, _ := os.Create(big)
	f.Truncate(1100 << 20)
	f.Close()
	err = nfs.WriteFile(ep, "/vol1/big", big)
	if err == nil || !strings.Contains(err.Error(), "NFS3ERR_NOSPC") {
		t.Fatalf("write past capacity: %v, want NFS3ERR_NOSPC", err)
	}
	if got, err := nfs.Read(ep, "/vol1/random.bin"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("earlier data damaged by the failed write: %v", err)
	}
	// The volume is now full: an NFSv4 client gets NFS4ERR_NOSPC too (a small write:
	// libnfs 4.0 cannot send v4 writes over ~3.9 KB).
	err = h.NFS(4, 0, 0).Write(ep, "/vol1/small-v4", make([]byte, 3000))
	if err == nil || !strings.Contains(err.Error(), "NFS4ERR_NOSPC") {
		t.Fatalf("NFSv4 write at capacity: %v, want NFS4ERR_NOSPC", err)
	}
	s.stop(syscall.SIGTERM)
}

// TestGaneshaAndBasinRestarts: Ganesha killed with SIGKILL serves every export again
// within 10 s; Basin killed and restarted serves every export again.
func TestGaneshaAndBasinRestarts(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	nfsPool(t, c)
	vols := []string{"va", "vb", "vc"}
	for _, v := range vols {
		s.openVolume(c, v)
	}
	nfs := s.host(201).NFS(3, 0, 0)
	eps := map[string]netip.Addr{}
	for _, v := range vols {
		eps[v] = endpoint(t, c, v)
		if err := nfs.Write(eps[v], "/"+v+"/f", []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	allServed := func() error {
		for _, v := range vols {
			got, err := nfs.Read(eps[v], "/"+v+"/f")
			if err != nil {
				return err
			}
			if string(got) != v {
				return fmt.Errorf("%s reads %q", v, got)
			}
		}
		return nil
	}
	pids := s.ganeshaPIDs()
	if len(pids) != 1 {
		t.Fatalf("ganesha pids %v", pids)
	}
	syscall.Kill(pids[0], syscall.SIGKILL)
	start := time.Now()
	var err error
	for time.Since(start) < 10*time.Second {
		if err = allServed(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("exports not back 10 s after killing ganesha: %v", err)
	}
	t.Logf("every export served again %.2f s after SIGKILL of ganesha", time.Since(start).Seconds())
	if now := s.ganeshaPIDs(); len(now) != 1 || now[0] == pids[0] {
		t.Fatalf("ganesha not restarted: %v", now)
	}
	// Basin itself killed: its daemons die with it; the next start rebuilds the
	// sandbox and re-exports every volume.
	s.stop(syscall.SIGKILL)
	if err := allServed(); err == nil {
		t.Fatal("exports still served with basin dead: daemons outlived it")
	}
	s.start()
	if err := waitForErr(30*time.Second, allServed); err != nil {
		t.Fatalf("exports after restarting basin: %v", err)
	}
	s.stop(syscall.SIGTERM)
}

func waitForErr(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestStreamUndisturbed: a client reading one volume without pause sees no error
// while other volumes are created and deleted beside it.
func TestStreamUndisturbed(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	nfsPool(t, c)
	open := map[string]any{"rules": []any{rule(s.subnet.String(), "READ_WRITE", true, true, "true")}}
	mutate(t, c, "POST", loc+"/volumes?volumeId=stream", map[string]any{"shareName": "stream", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3"}, "exportPolicy": open})
	ep := endpoint(t, c, "stream")
	nfs := s.host(201).NFS(3, 0, 0)
	data := make([]byte, 16<<20)
	rand.Read(data)
	if err := nfs.Write(ep, "/stream/data", data); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads int
	var streamErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 1000; i++ { // bounded: at most 1000 reads of 16 MiB
			select {
			case <-stop:
				return
			default:
			}
			got, err := nfs.Read(ep, "/stream/data")
			if err == nil && !bytes.Equal(got, data) {
				err = fmt.Errorf("read %d bytes that differ from what was written", len(got))
			}
			if err != nil {
				streamErr = err
				return
			}
			reads++
		}
	}()
	for i := range 4 {
		id := fmt.Sprintf("other%d", i)
		mutate(t, c, "POST", loc+"/volumes?volumeId="+id, map[string]any{"shareName": id, "storagePool": "pool1", "capacityGib": "1",
			"protocols": []string{"NFSV3", "NFSV4"}, "exportPolicy": open})
		mutate(t, c, "PATCH", loc+"/volumes/"+id+"?updateMask=exportPolicy", map[string]any{"exportPolicy": map[string]any{"rules": []any{
			rule(s.addrN(250), "READ_ONLY", true, true, "false")}}})
		if i%2 == 0 {
			mutate(t, c, "DELETE", loc+"/volumes/"+id, nil)
		}
	}
	close(stop)
	wg.Wait()
	if streamErr != nil {
		t.Fatalf("stream failed after %d reads: %v", reads, streamErr)
	}
	if reads < 2 {
		t.Fatalf("only %d reads overlapped the changes", reads)
	}
	t.Logf("%d reads of 16 MiB during 4 creates, 4 updates and 2 deletes", reads)
	s.stop(syscall.SIGTERM)
}

// TestSnapshotDirectoryAndRevert: with snapshotDirectory, a snapshot's content is
// readable, read-only, under /<share>/.snapshot/<id>; after a revert, clients read
// the snapshot's data, not a mix of old and new.
func TestSnapshotDirectoryAndRevert(t *testing.T) {
	s, c, ep, h, _ := snapshotVolume(t, context.Background())
	nfs := h.NFS(3, 0, 0)
	if err := nfs.Write(ep, "/vol1/f", []byte("before")); err != nil {
		t.Fatal(err)
	}
	mutate(t, c, "POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", map[string]any{})
	if err := nfs.Write(ep, "/vol1/f", []byte("after, longer")); err != nil {
		t.Fatal(err)
	}
	if err := nfs.Write(ep, "/vol1/new", []byte("x")); err != nil {
		t.Fatal(err)
	}
	got, err := nfs.Read(ep, "/vol1/.snapshot/s1/f")
	if err != nil || string(got) != "before" {
		t.Fatalf(".snapshot/s1/f = %q, %v; want the content at snapshot time", got, err)
	}
	if err := nfs.Write(ep, "/vol1/.snapshot/s1/g", []byte("x")); err == nil || !strings.Contains(err.Error(), "ROFS") {
		t.Fatalf("writing into a snapshot: %v, want a read-only error", err)
	}
	if got, _ := nfs.Read(ep, "/vol1/f"); string(got) != "after, longer" {
		t.Fatalf("live volume reads %q", got)
	}
	// A client that has the file open across the revert gets a stale handle, never
	// the data of the other file system.
	held, err := nfs.Hold(ep, "/vol1/f")
	if err != nil || held.First != "data: after, longer" {
		t.Fatalf("holding /vol1/f: %v %q", err, held.First)
	}
	defer held.Close()
	mutate(t, c, "POST", loc+"/volumes/vol1:revert", map[string]any{"snapshotId": "s1"})
	if again, err := held.Again(); err != nil || !strings.Contains(again, "STALE") {
		t.Fatalf("read through a handle opened before the revert: %q %v, want NFS3ERR_STALE", again, err)
	}
	if got, err := nfs.Read(ep, "/vol1/f"); err != nil || string(got) != "before" {
		t.Fatalf("after revert f = %q, %v", got, err)
	}
	if _, err := nfs.Read(ep, "/vol1/new"); err == nil {
		t.Fatal("a file written after the snapshot survived the revert")
	}
	if got, err := nfs.Read(ep, "/vol1/.snapshot/s1/f"); err != nil || string(got) != "before" {
		t.Fatalf("snapshot after revert: %q, %v", got, err)
	}
	mutate(t, c, "DELETE", loc+"/volumes/vol1/snapshots/s1", nil)
	if _, err := nfs.Read(ep, "/vol1/.snapshot/s1/f"); err == nil {
		t.Fatal("deleted snapshot still readable")
	}
	s.stop(syscall.SIGTERM)
}

// benchNFS runs `basin bench --engine nfs` on host h against ep's export /vol
// (bounded by 2 minutes) and returns its fio-shaped JSON and its stderr.
func benchNFS(t *testing.T, h *clienthost.Host, ep netip.Addr, vol string, args ...string) (map[string]any, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := h.Command(ctx, basinBin, append([]string{"bench", "--engine", "nfs", "--url", fmt.Sprintf("nfs://%s/%s", ep, vol),
		"--output-format", "json"}, args...)...)
	res, stderr, err := runBenchJSON(t, cmd)
	if err != nil {
		t.Fatalf("basin bench %v: %v\n%s", args, err, stderr)
	}
	return res, stderr
}

// TestBenchNFS: `basin bench --engine nfs` against a real Basin export, run from a
// client host. The bytes it reports are the bytes in the files the server holds
// (read back with another client), and iodepth requests were on the wire at once.
func TestBenchNFS(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	nfsPool(t, c)
	s.openVolume(c, "bench1")
	ep := endpoint(t, c, "bench1")
	h := s.host(203)
	bench := func(args ...string) (map[string]any, string) { return benchNFS(t, h, ep, "bench1", args...) }
	ioBytes := benchIOBytes
	inFlight := func(stderr string) int { return benchInFlight(t, stderr, "nfs: at most %d calls in flight") }

	// What Ganesha itself counted for the volume's export.
	stats := func() (read, write nfs.IOStats) {
		t.Helper()
		confs, _ := filepath.Glob(filepath.Join(s.dataDir, "sandboxes", "default", "exports", "*.conf"))
		for _, f := range confs {
			b, _ := os.ReadFile(f)
			var id uint64
			if !strings.Contains(string(b), `Pseudo = "/bench1"`) {
				continue
			}
			if _, err := fmt.Sscanf(filepath.Base(f), "%d.conf", &id); err != nil {
				t.Fatal(err)
			}
			bus := nfs.DBus{Address: "unix:path=" + filepath.Join(s.dataDir, "sandboxes", "default", "bus.sock")}
			r, w, err := bus.NFSv3IO(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			return r, w
		}
		t.Fatalf("no export config for bench1 among %v", confs)
		return
	}

	// Sequential writes, bounded by size: 2 jobs × 2 files × 8 MiB, iodepth 8, 2 connections.
	_, w0 := stats()
	res, stderr := bench("--name", "w", "--rw", "write", "--bs", "64k", "--iodepth", "8", "--numjobs", "2",
		"--nrfiles", "2", "--size", "8m", "--nconnect", "2")
	if got, want := ioBytes(res, "write"), int64(2*2*8<<20); got != want {
		t.Errorf("write io_bytes = %d, want %d", got, want)
	}
	if _, w1 := stats(); w1.TransferredBytes-w0.TransferredBytes != uint64(ioBytes(res, "write")) || w1.Errors != w0.Errors {
		t.Errorf("Ganesha counted %d bytes written (%d errors); basin bench reported %d", w1.TransferredBytes-w0.TransferredBytes,
			w1.Errors-w0.Errors, ioBytes(res, "write"))
	}
	if n := inFlight(stderr); n < 4 {
		t.Errorf("at most %d calls in flight at iodepth 8 × 2 jobs over 2 connections; want ≥ 4", n)
	}
	other := h.NFS(3, 0, 0)
	for n := range 2 {
		for i := range 2 {
			e, err := other.Stat(ep, fmt.Sprintf("/bench1/w.%d.%d", n, i))
			if err != nil || e.Size != 8<<20 {
				t.Errorf("w.%d.%d on the server: %+v, %v; want 8 MiB", n, i, e, err)
			}
		}
	}

	// Random reads, bounded by size: the file is laid out first, then 4 MiB are read
	// in 4 KiB blocks at iodepth 16 on one connection.
	r0, _ := stats()
	res, stderr = bench("--name", "r", "--rw", "randread", "--bs", "4k", "--iodepth", "16", "--size", "4m")
	if got, want := ioBytes(res, "read"), int64(4<<20); got != want {
		t.Errorf("randread io_bytes = %d, want %d", got, want)
	}
	if r1, _ := stats(); r1.TransferredBytes-r0.TransferredBytes != 4<<20 || r1.Ops-r0.Ops != 1024 {
		t.Errorf("Ganesha counted %d bytes in %d reads; basin bench reported %d in 1024", r1.TransferredBytes-r0.TransferredBytes,
			r1.Ops-r0.Ops, ioBytes(res, "read"))
	}
	if n := inFlight(stderr); n < 8 {
		t.Errorf("at most %d calls in flight at iodepth 16 on one connection; want ≥ 8", n)
	}
	if e, err := other.Stat(ep, "/bench1/r.0.0"); err != nil || e.Size != 4<<20 {
		t.Errorf("laid-out file on the server: %+v, %v; want 4 MiB", e, err)
	}

	// Names cannot leave the export's directory, and a bad URL is refused.
	ctx := context.Background()
	out, err := h.Command(ctx, basinBin, "bench", "--engine", "nfs", "--url", fmt.Sprintf("nfs://%s/bench1", ep), "--name", "../x",
		"--rw", "write", "--size", "1m").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--name") {
		t.Errorf("--name ../x: %v %s", err, out)
	}
	out, err = h.Command(ctx, basinBin, "bench", "--engine", "nfs", "--url", "http://x/y", "--rw", "write", "--size", "1m").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--url") {
		t.Errorf("--url http://x/y: %v %s", err, out)
	}
	s.stop(syscall.SIGTERM)
}
