package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/clienthost"
	"github.com/basin-nas/basin/test/nfsraw"
)

// exported is one NFS volume of a restart test, with the files it and its
// snapshots hold.
type exported struct {
	id, key string
	ep      netip.Addr
	files   map[string]string            // path below the export -> content
	snaps   map[string]map[string]string // snapshot -> its files
	snapdir bool                         // snapshotDirectory: .snapshot at its root
}

// readPath looks path up below root and reads it whole.
func readPath(ctx context.Context, c *nfs3.Client, p string) (string, error) {
	fh := c.Root
	for _, name := range strings.Split(strings.Trim(p, "/"), "/") {
		var err error
		if fh, _, err = c.Lookup(ctx, fh, name); err != nil {
			return "", fmt.Errorf("lookup %s: %w", p, err)
		}
	}
	buf := make([]byte, 1<<16)
	n, _, err := c.Read(ctx, fh, buf, 0)
	return string(buf[:n]), err
}

// writePath creates (or truncates) a file below the export root and writes it.
func writePath(ctx context.Context, c *nfs3.Client, p, content string) error {
	dir := c.Root
	parts := strings.Split(strings.Trim(p, "/"), "/")
	for _, name := range parts[:len(parts)-1] {
		fh, _, err := c.Lookup(ctx, dir, name)
		if errors.Is(err, nfs3.ErrNoEnt) {
			fh, err = c.Mkdir(ctx, dir, name, 0o755)
		}
		if err != nil {
			return err
		}
		dir = fh
	}
	fh, err := c.CreateWith(ctx, dir, parts[len(parts)-1], nfs3.CreateArgs{How: nfs3.Unchecked, Attrs: nfs3.SetAttrs{Mode: nfs3.Mode(0o644), Size: nfs3.Size(0)}})
	if err != nil {
		return err
	}
	_, err = c.Write(ctx, fh, []byte(content), 0, nfs3.FileSync)
	return err
}

// checkServed reads every file of every volume and snapshot back through its
// export (NFSv3, and NFSv4 for volumes), checks that each volume export is the
// volume's own filesystem (its size is the capacity) and that a file written
// through it lands in that filesystem.
func checkServed(ctx context.Context, s *server, h *clienthost.Host, vols []*exported, probe string) error {
	for _, v := range vols {
		var c *nfs3.Client
		if err := h.Within(func() (err error) { c, err = nfs3.Mount(ctx, v.ep.String(), "/"+v.id, nfs3.Options{}); return err }); err != nil {
			return fmt.Errorf("mount %s: %w", v.id, err)
		}
		err := func() error {
			defer c.Close()
			for p, want := range v.files {
				if got, err := readPath(ctx, c, p); err != nil || got != want {
					return fmt.Errorf("%s:%s reads %q (%v), want %q", v.id, p, got, err, want)
				}
			}
			st, err := c.FSStat(ctx, c.Root)
			if err != nil || st.TotalBytes != 1<<30 {
				return fmt.Errorf("%s is not its 1 GiB filesystem: FSSTAT %+v %v", v.id, st, err)
			}
			if err := writePath(ctx, c, probe, probe); err != nil {
				return fmt.Errorf("write %s to %s: %w", probe, v.id, err)
			}
			// Straight from the volume's filesystem (its live data as Basin
			// mounts it whole), not from whatever the mount point shows.
			if got, err := os.ReadFile(filepath.Join(s.dataDir, "fs", v.key, "live", probe)); err != nil || string(got) != probe {
				return fmt.Errorf("%s: a file written through the export is not in the volume's filesystem: %q %v", v.id, got, err)
			}
			return nil
		}()
		if err != nil {
			return err
		}
		var c4 *nfsraw.Client
		if err := h.Within(func() (err error) { c4, err = nfsraw.Dial(ctx, v.ep.String(), 2049, nfsraw.Auth{}); return err }); err != nil {
			return err
		}
		for p, want := range v.files {
			fh, err := c4.LookupPath(ctx, append([]string{v.id}, strings.Split(p, "/")...)...)
			rd := &nfsraw.Read{Count: 1 << 16}
			if err == nil {
				err = c4.Run(ctx, &nfsraw.PutFH{FH: fh}, rd)
			}
			if err != nil || string(rd.Data) != want {
				c4.Close()
				return fmt.Errorf("NFSv4 %s:%s reads %q (%v), want %q", v.id, p, rd.Data, err, want)
			}
		}
		c4.Close()
		if err := checkSnapshotDir(ctx, h, v); err != nil {
			return err
		}
		for snap, files := range v.snaps {
			dir := "/" + v.id + "/.snapshot/" + snap
			var sc *nfs3.Client
			if err := h.Within(func() (err error) { sc, err = nfs3.Mount(ctx, v.ep.String(), dir, nfs3.Options{}); return err }); err != nil {
				return fmt.Errorf("mount %s: %w", dir, err)
			}
			for p, want := range files {
				if got, err := readPath(ctx, sc, p); err != nil || got != want {
					sc.Close()
					return fmt.Errorf("%s/%s reads %q (%v), want %q", dir, p, got, err, want)
				}
			}
			sc.Close()
		}
	}
	return nil
}

// checkSnapshotDir checks .snapshot inside a mount of v's export, as a client
// walks it over NFSv3 and NFSv4.1: it lists exactly v's snapshots, each of which
// reads as it was taken (no empty directory where a snapshot should be); a
// volume without snapshotDirectory has none.
func checkSnapshotDir(ctx context.Context, h *clienthost.Host, v *exported) error {
	var c *nfs3.Client
	var c4 *nfsraw.Client
	err := h.Within(func() (err error) {
		if c, err = nfs3.Mount(ctx, v.ep.String(), "/"+v.id, nfs3.Options{}); err != nil {
			return err
		}
		c4, err = nfsraw.Dial41(ctx, v.ep.String(), 2049, nfsraw.Auth{})
		return err
	})
	if c != nil {
		defer c.Close()
	}
	if c4 != nil {
		defer c4.Close()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", v.id, err)
	}
	dir, _, err := c.Lookup(ctx, c.Root, ".snapshot")
	_, err4 := c4.LookupPath(ctx, v.id, ".snapshot")
	if !v.snapdir {
		if s, ok := nfs3.StatusOf(err); !ok || s != nfs3.ErrNoEnt {
			return fmt.Errorf("%s has no snapshot directory, yet NFSv3 LOOKUP .snapshot: %v", v.id, err)
		}
		if s, ok := nfsraw.StatusOf(err4); !ok || s != nfsraw.ErrNoEnt {
			return fmt.Errorf("%s has no snapshot directory, yet NFSv4.1 LOOKUP .snapshot: %v", v.id, err4)
		}
		return nil
	}
	if err != nil || err4 != nil {
		return fmt.Errorf("%s: LOOKUP .snapshot: NFSv3 %v, NFSv4.1 %v", v.id, err, err4)
	}
	ents, err := c.ReadDir(ctx, dir)
	if err != nil {
		return fmt.Errorf("%s: READDIR .snapshot: %w", v.id, err)
	}
	var names, want []string
	for _, e := range ents {
		if e.Name != "." && e.Name != ".." {
			names = append(names, e.Name)
		}
	}
	for snap := range v.snaps {
		want = append(want, snap)
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		return fmt.Errorf("%s/.snapshot lists %v, want %v", v.id, names, want)
	}
	for snap, files := range v.snaps {
		for p, content := range files {
			if got, err := readPath(ctx, c, ".snapshot/"+snap+"/"+p); err != nil || got != content {
				return fmt.Errorf("NFSv3 %s/.snapshot/%s/%s reads %q (%v), want %q", v.id, snap, p, got, err, content)
			}
			fh, err := c4.LookupPath(ctx, append([]string{v.id, ".snapshot", snap}, strings.Split(p, "/")...)...)
			rd := &nfsraw.Read{Count: 1 << 16}
			if err == nil {
				err = c4.Run(ctx, &nfsraw.PutFH{FH: fh}, rd)
			}
			if err != nil || string(rd.Data) != content {
				return fmt.Errorf("NFSv4.1 %s/.snapshot/%s/%s reads %q (%v), want %q", v.id, snap, p, rd.Data, err, content)
			}
		}
	}
	return nil
}

// TestRestartsServeEveryExport: NFS volumes with data and snapshots are served
// whole — every file through every export, from the volume's own filesystem —
// after basin is stopped with SIGTERM, after it is killed with SIGKILL, and after
// Ganesha is killed while the sandbox starts. (Before, a clean restart started
// Ganesha from a saved export list before the volumes were mounted and served
// their empty mount points.)
func TestRestartsServeEveryExport(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	nfsPool(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var vols []*exported
	for i, id := range []string{"va", "vb", "vc"} {
		mounts := inspect(t, s.dataDir).mounts
		mutate(t, c, "POST", loc+"/volumes?volumeId="+id, map[string]any{"shareName": id, "storagePool": "pool1", "capacityGib": "1",
			"protocols": []string{"NFSV3", "NFSV4"}, "snapshotDirectory": i < 2,
			"exportPolicy": map[string]any{"rules": []any{rule(s.subnet.String(), "READ_WRITE", true, true, "true")}}})
		v := &exported{id: id, files: map[string]string{"f": id + " data", "d/e/g": id + " deep"}, snaps: map[string]map[string]string{}, snapdir: i < 2}
		for _, k := range inspect(t, s.dataDir).mounts {
			if !strings.Contains(strings.Join(mounts, " "), k) {
				v.key = k
			}
		}
		v.ep = endpoint(t, c, id)
		vols = append(vols, v)
	}
	h := s.host(201)
	for _, v := range vols {
		var cl *nfs3.Client
		if err := h.Within(func() (err error) { cl, err = nfs3.Mount(ctx, v.ep.String(), "/"+v.id, nfs3.Options{}); return err }); err != nil {
			t.Fatal(err)
		}
		for p, content := range v.files {
			if err := writePath(ctx, cl, p, content); err != nil {
				t.Fatal(err)
			}
		}
		cl.Close()
	}
	// Snapshots of the first two, then the live data moves on.
	for _, v := range vols[:2] {
		mutate(t, c, "POST", loc+"/volumes/"+v.id+"/snapshots?snapshotId=s1", map[string]any{})
		v.snaps["s1"] = map[string]string{"f": v.files["f"], "d/e/g": v.files["d/e/g"]}
		v.files["f"] = v.id + " data, later"
		var cl *nfs3.Client
		if err := h.Within(func() (err error) { cl, err = nfs3.Mount(ctx, v.ep.String(), "/"+v.id, nfs3.Options{}); return err }); err != nil {
			t.Fatal(err)
		}
		if err := writePath(ctx, cl, "f", v.files["f"]); err != nil {
			t.Fatal(err)
		}
		cl.Close()
	}
	// Basin is ready once its first reconcile pass is done: every export (and
	// .snapshot) must be served by then, not by a later pass. A Ganesha killed
	// needs a moment to come back.
	check := func(when string, limit time.Duration) {
		t.Helper()
		// Basin made the bridge; a clean stop removed it, and a start makes it anew.
		if err := h.Attach(s.bridge); err != nil {
			t.Fatal(err)
		}
		probe := "probe-" + strings.ReplaceAll(when, " ", "-")
		// The client may be a moment early for a Ganesha that restarted.
		start := time.Now()
		var first error
		if err := waitForErr(limit, func() error {
			err := checkServed(ctx, s, h, vols, probe)
			if first == nil {
				first = err
			}
			return err
		}); err != nil {
			t.Fatalf("%s: %v\n%s", when, err, ganeshaLog(s))
		}
		t.Logf("%s: every export served after %.1f s (first try: %v)", when, time.Since(start).Seconds(), first)
		for _, v := range vols {
			v.files[probe] = probe
		}
	}
	check("before any restart", 5*time.Second)

	s.stop(syscall.SIGTERM)
	s.start()
	check("after SIGTERM and start", 5*time.Second)

	s.stop(syscall.SIGKILL)
	s.start()
	check("after SIGKILL and start", 5*time.Second)

	// Ganesha killed while it serves: the sandbox loads every export again, each
	// snapshot directory before the snapshots in it.
	pids := s.ganeshaPIDs()
	if len(pids) != 1 {
		t.Fatalf("ganesha pids %v", pids)
	}
	syscall.Kill(pids[0], syscall.SIGKILL)
	check("after ganesha was killed while serving", 30*time.Second)

	// Ganesha killed as soon as it appears, while the sandbox starts: the
	// supervisor restarts it and the exports come back onto mounted volumes only.
	s.stop(syscall.SIGTERM)
	killed := make(chan string, 1)
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if pids := s.ganeshaPIDs(); len(pids) > 0 {
				syscall.Kill(pids[0], syscall.SIGKILL)
				killed <- fmt.Sprintf("killed ganesha %d", pids[0])
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		killed <- ""
	}()
	s.start()
	if what := <-killed; what == "" {
		t.Fatal("ganesha never appeared to be killed")
	} else {
		t.Log(what)
	}
	check("after ganesha was killed mid-start", 30*time.Second)
	s.stop(syscall.SIGTERM)
}

func ganeshaLog(s *server) string {
	out, _ := exec.Command("tail", "-n", "30", filepath.Join(s.dataDir, "sandboxes", "default", "logs", "ganesha.log")).Output()
	return string(out)
}

// TestEndpointsComeAndGoAlone deletes the volume holding the subnet's first
// endpoint address (the primary one on the sandbox's interface) while clients
// stream from other volumes: their addresses stay, and the streams run on.
func TestEndpointsComeAndGoAlone(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	nfsPool(t, c)
	ids := []string{"first", "second", "third", "fourth"}
	eps := map[string]netip.Addr{}
	for _, id := range ids {
		s.openVolume(c, id)
		eps[id] = endpoint(t, c, id)
	}
	if first := eps["first"]; first != netip.MustParseAddr(s.addrN(10)) {
		t.Fatalf("the first volume's endpoint is %s, want the subnet's first endpoint %s", first, s.addrN(10))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := s.host(201)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	streamers := []string{"second", "third"}
	clients := map[string]*nfs3.Client{}
	for _, id := range streamers {
		var cl *nfs3.Client
		if err := h.Within(func() (err error) { cl, err = nfs3.Mount(ctx, eps[id].String(), "/"+id, nfs3.Options{}); return err }); err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := writePath(ctx, cl, "data", string(data)); err != nil {
			t.Fatal(err)
		}
		clients[id] = cl
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, len(streamers))
	reads := make([]int, len(streamers))
	for i, id := range streamers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := clients[id]
			fh, _, err := cl.Lookup(ctx, cl.Root, "data")
			if err != nil {
				errs <- err
				return
			}
			buf := make([]byte, len(data))
			for n := 0; n < 100000; n++ { // bounded: stopped well before
				select {
				case <-stop:
					return
				default:
				}
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				got, _, err := cl.Read(cctx, fh, buf, 0)
				ccancel()
				if err != nil || got != len(data) || !bytes.Equal(buf, data) {
					errs <- fmt.Errorf("stream from %s (%s) after %d reads: %d bytes, %v", id, eps[id], n, got, err)
					return
				}
				reads[i]++
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	mutate(t, c, "DELETE", loc+"/volumes/first", nil)
	time.Sleep(2 * time.Second) // the streams run on past the delete
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("reads per stream across the delete: %v", reads)
	out, err := exec.Command("ip", "-n", "basin-"+s.bridge, "-o", "-4", "addr", "show", "dev", "eth0").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[1:] {
		if !strings.Contains(string(out), " "+eps[id].String()+"/") {
			t.Errorf("endpoint %s of %s is gone after deleting %s:\n%s", eps[id], id, "first", out)
		}
	}
	if strings.Contains(string(out), " "+eps["first"].String()+"/") {
		t.Errorf("the deleted volume's endpoint %s is still there", eps["first"])
	}
	// New clients reach every remaining volume.
	for _, id := range ids[1:] {
		if _, err := h.NFS(3, 0, 0).Ls(eps[id], "/"+id); err != nil {
			t.Errorf("%s unreachable after the delete: %v", id, err)
		}
	}
	s.stop(syscall.SIGTERM)
}
