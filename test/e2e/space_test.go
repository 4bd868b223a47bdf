package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/clienthost"
)

// smallDataDir puts a server's data directory on a filesystem of its own of size
// bytes (ext4 in an image on a loop device: a small disk), unmounted after the
// server's own cleanup has run.
func smallDataDir(t *testing.T, s *server, size int64) {
	t.Helper()
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "disk")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(size)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{"mkfs.ext4", "-q", "-m", "0", img}, {"mount", "-o", "loop", img, mnt}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", argv, err, out)
		}
	}
	// Registered before the server's cleanup would be, it runs after it: but the
	// server was made first, so unmount in a cleanup of the server's own order.
	s.dataDir = filepath.Join(mnt, "data")
	t.Cleanup(func() {
		if s.cmd != nil && s.cmd.ProcessState == nil {
			s.stop(syscall.SIGTERM)
		}
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
	})
}

// spaceWriter writes one file through a volume's export in 1 MiB writes, with a
// COMMIT every 16 MiB, and remembers what the server acknowledged: the bytes up
// to the last COMMIT that succeeded, and their SHA-256.
type spaceWriter struct {
	t    *testing.T
	h    *clienthost.Host
	ep   netip.Addr
	path string // the export's path
	name string
	seed uint64

	acked int64
	sum   [32]byte
}

// write writes up to max bytes and returns the error that stopped it (nil when
// max was written).
func (w *spaceWriter) write(ctx context.Context, max int64) error {
	var werr error
	err := w.h.Within(func() error {
		c, err := nfs3.Mount(ctx, w.ep.String(), w.path, nfs3.Options{})
		if err != nil {
			return err
		}
		defer c.Close()
		fh, err := c.Create(ctx, c.Root, w.name, 0o644)
		if err != nil {
			return err
		}
		r := rand.New(rand.NewPCG(w.seed, w.seed))
		buf := make([]byte, 1<<20)
		h := sha256.New()
		var off int64
		flush := func() error {
			if err := c.Commit(ctx, fh); err != nil {
				return err
			}
			w.acked = off
			copy(w.sum[:], h.Sum(nil))
			return nil
		}
		for off < max {
			for i := range buf {
				buf[i] = byte(r.Uint32())
			}
			if off%(1<<20) != 0 {
				return fmt.Errorf("write offset %d is not whole MiB", off) // a short write was not finished
			}
			// A short write (the server wrote what fitted) is followed, as a
			// client does, by one for the rest.
			for p := buf; len(p) > 0; {
				n, err := c.Write(ctx, fh, p, off, nfs3.Unstable)
				if err == nil && n == 0 {
					err = fmt.Errorf("write at %d: no progress", off)
				}
				if err != nil {
					werr = err
					flush() //nolint:errcheck // what was written before stays acknowledged or not
					return nil
				}
				h.Write(p[:n])
				off += int64(n)
				p = p[n:]
			}
			if off%(16<<20) == 0 && off > 0 {
				if err := flush(); err != nil {
					werr = err
					return nil
				}
			}
		}
		werr = flush()
		return nil
	})
	if err != nil {
		return err
	}
	return werr
}

// check reads the acknowledged bytes back and compares them.
func (w *spaceWriter) check(ctx context.Context) error {
	return w.h.Within(func() error {
		c, err := nfs3.Mount(ctx, w.ep.String(), w.path, nfs3.Options{})
		if err != nil {
			return err
		}
		defer c.Close()
		fh, _, err := c.Lookup(ctx, c.Root, w.name)
		if err != nil {
			return err
		}
		h := sha256.New()
		buf := make([]byte, 1<<20)
		for off := int64(0); off < w.acked; {
			n := min(int64(len(buf)), w.acked-off)
			got, _, err := c.Read(ctx, fh, buf[:n], off)
			if err != nil {
				return fmt.Errorf("read %s at %d: %w", w.name, off, err)
			}
			if got == 0 {
				return fmt.Errorf("%s ends at %d, %d bytes were acknowledged", w.name, off, w.acked)
			}
			h.Write(buf[:got])
			off += int64(got)
		}
		if [32]byte(h.Sum(nil)) != w.sum {
			return fmt.Errorf("%s: the %d MiB acknowledged read back different", w.name, w.acked>>20)
		}
		return nil
	})
}

// spaceLab is a server on a small filesystem with a volume in each of two
// projects, open to the subnet.
type spaceLab struct {
	s      *server
	c      *client.Client
	prom   string
	w1, w2 *spaceWriter
}

func newSpaceLab(t *testing.T, ratio string, poolGib, volGib int) *spaceLab {
	s := newServer(t)
	smallDataDir(t, s, 5<<30)
	prom := freeAddr(t)
	// Basin's defaults for the store: sized from the filesystem's free space.
	s.start("--store-size", "auto", "--overcommit-ratio", ratio, "--metrics-listen", prom)
	c := s.client()
	l := &spaceLab{s: s, c: c, prom: prom}
	for i, p := range []string{"p1", "p2"} {
		base := "/v1/projects/" + p + "/locations/us-east4"
		mutate(t, c, "POST", base+"/storagePools?storagePoolId=pool", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": fmt.Sprint(poolGib),
			"network": "projects/" + p + "/global/networks/default"})
		id := "vol" + p
		mutate(t, c, "POST", base+"/volumes?volumeId="+id, map[string]any{"shareName": id, "storagePool": "pool", "capacityGib": fmt.Sprint(volGib),
			"protocols": []string{"NFSV3"}, "exportPolicy": map[string]any{"rules": []any{rule(s.subnet.String(), "READ_WRITE", true, false, "true")}}})
		w := &spaceWriter{t: t, h: s.host(201 + i), ep: endpointIn(t, c, p, id), path: "/" + id, name: "data", seed: uint64(i + 1)}
		if i == 0 {
			l.w1 = w
		} else {
			l.w2 = w
		}
	}
	return l
}

// volume returns a volume of project p as the API shows it.
func (l *spaceLab) volume(t *testing.T, p string) client.Object {
	t.Helper()
	var v client.Object
	if err := l.c.Do(context.Background(), "GET", "/v1/projects/"+p+"/locations/us-east4/volumes/vol"+p, nil, nil, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func (l *spaceLab) ready(t *testing.T) {
	t.Helper()
	for _, p := range []string{"p1", "p2"} {
		if v := l.volume(t, p); v["state"] != "READY" {
			t.Errorf("volume of %s is %v (%v), want READY", p, v["state"], v["stateDetails"])
		}
	}
	resp, err := http.Get("http://" + l.s.addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/readyz %d", resp.StatusCode)
	}
}

// metric reads a metric without labels from the server's /metrics.
func (l *spaceLab) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + l.prom + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("%s not on /metrics", name)
	return 0
}

// restart stops the server and starts it again on the same data. A clean stop
// removes the network's bridge: the client hosts are plugged into the new one.
func (l *spaceLab) restart(t *testing.T, ratio string) {
	t.Helper()
	l.s.stop(syscall.SIGTERM)
	l.s.start("--store-size", "auto", "--overcommit-ratio", ratio, "--metrics-listen", l.prom)
	for _, w := range []*spaceWriter{l.w1, l.w2} {
		if err := w.h.Attach(l.s.bridge); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSpacePromisedIsThere: a Basin whose data directory is on a small
// filesystem (5 GiB), on its defaults. The store is sized from that filesystem
// and allocated; a pool it cannot hold is refused when it is made. When one
// project's client fills its volume, another project's client keeps writing,
// every byte acknowledged to either reads back (also after a restart), and both
// volumes stay READY. The full volume then takes a snapshot, is grown, has its
// file deleted and takes another snapshot.
func TestSpacePromisedIsThere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := newSpaceLab(t, "1", 2, 1)
	t.Logf("store: %.2f GiB usable, %.2f GiB free for volumes", l.metric(t, "basin_store_usable_bytes")/(1<<30), l.metric(t, "basin_store_allocatable_bytes")/(1<<30))
	// Refused at once, in plain words, with nothing made.
	var op client.Object
	err := l.c.Do(ctx, "POST", "/v1/projects/p1/locations/us-east4/storagePools?storagePoolId=big", nil,
		map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "20", "network": "projects/p1/global/networks/default"}, &op)
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "capacityGib") {
		t.Fatalf("a 20 GiB pool on a 5 GiB disk: %v, want 400 naming capacityGib", err)
	}

	var wg sync.WaitGroup
	var err2 error
	wg.Add(1)
	go func() { defer wg.Done(); err2 = l.w2.write(ctx, 300<<20) }()
	err1 := l.w1.write(ctx, 2<<30)
	wg.Wait()
	if err1 == nil || !strings.Contains(err1.Error(), "NOSPC") {
		t.Fatalf("filling p1's 1 GiB volume: %v after %d MiB, want NFS3ERR_NOSPC", err1, l.w1.acked>>20)
	}
	if l.w1.acked < 800<<20 {
		t.Errorf("p1's 1 GiB volume took only %d MiB", l.w1.acked>>20)
	}
	if err2 != nil || l.w2.acked != 300<<20 {
		t.Fatalf("p2's writes beside it: %v after %d MiB of 300", err2, l.w2.acked>>20)
	}
	for _, w := range []*spaceWriter{l.w1, l.w2} {
		if err := w.check(ctx); err != nil {
			t.Error(err)
		}
	}
	l.ready(t)

	// The full volume: snapshot, grow, delete, snapshot.
	base := "/v1/projects/p1/locations/us-east4/volumes/volp1"
	mutate(t, l.c, "POST", base+"/snapshots?snapshotId=full", map[string]any{})
	mutate(t, l.c, "PATCH", base+"?updateMask=capacityGib", map[string]any{"capacityGib": "2"})
	if err := l.w1.h.Within(func() error {
		c, err := nfs3.Mount(ctx, l.w1.ep.String(), l.w1.path, nfs3.Options{})
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Remove(ctx, c.Root, l.w1.name)
	}); err != nil {
		t.Fatalf("delete the full volume's file: %v", err)
	}
	mutate(t, l.c, "POST", base+"/snapshots?snapshotId=after", map[string]any{})
	if v := l.volume(t, "p1"); v["state"] != "READY" || v["capacityGib"] != "2" {
		t.Errorf("p1's volume after the sequence: %v", v)
	}

	// After a restart, what p2 was told is on disk.
	l.restart(t, "1")
	if err := l.w2.check(ctx); err != nil {
		t.Error(err)
	}
	l.ready(t)
}

// TestSpaceThinProvisioned: the same small filesystem with --overcommit-ratio 4:
// two 8 GiB volumes on a store of under 5 GiB. Their filesystems grow as they
// fill, until the store has no more to give; then each refuses writes with a clean
// NFS3ERR_NOSPC, nothing acknowledged is lost (also after a restart), both stay
// READY, their state details say why, and /metrics warns.
func TestSpaceThinProvisioned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := newSpaceLab(t, "4", 8, 8)
	if v := l.metric(t, "basin_store_thin"); v != 1 {
		t.Errorf("basin_store_thin %v", v)
	}
	var wg sync.WaitGroup
	var err2 error
	wg.Add(1)
	go func() { defer wg.Done(); err2 = l.w2.write(ctx, 512<<20) }()
	err1 := l.w1.write(ctx, 8<<30)
	wg.Wait()
	if err1 == nil || !strings.Contains(err1.Error(), "NOSPC") {
		t.Fatalf("p1 writing past what the store holds: %v after %d MiB, want NFS3ERR_NOSPC", err1, l.w1.acked>>20)
	}
	t.Logf("p1 was given %d MiB of its 8 GiB, p2 %d MiB", l.w1.acked>>20, l.w2.acked>>20)
	if l.w1.acked < 1536<<20 {
		t.Errorf("p1's volume took %d MiB: its filesystem did not grow as it filled", l.w1.acked>>20)
	}
	if err2 != nil {
		t.Fatalf("p2's 512 MiB, within what its volume was given: %v after %d MiB", err2, l.w2.acked>>20)
	}
	// p2 now wants more than the store has left: a clean refusal too.
	more := &spaceWriter{t: t, h: l.w2.h, ep: l.w2.ep, path: l.w2.path, name: "more", seed: 9}
	if err := more.write(ctx, 4<<30); err == nil || !strings.Contains(err.Error(), "NOSPC") {
		t.Fatalf("p2 writing past what the store holds: %v after %d MiB, want NFS3ERR_NOSPC", err, more.acked>>20)
	}
	for _, w := range []*spaceWriter{l.w1, l.w2, more} {
		if err := w.check(ctx); err != nil {
			t.Error(err)
		}
	}
	l.ready(t)
	if v := l.metric(t, "basin_store_short_bytes"); v <= 0 {
		t.Errorf("basin_store_short_bytes %v: no warning that promises cannot be kept", v)
	}
	// The resync (every 30 s) puts each short volume's note on its details.
	deadline := time.Now().Add(90 * time.Second)
	for _, p := range []string{"p1", "p2"} {
		for {
			d, _ := l.volume(t, p)["stateDetails"].(string)
			if strings.Contains(d, "thin provisioning") && strings.Contains(d, "refused") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("volume of %s: stateDetails %q, want why its writes are refused", p, d)
			}
			time.Sleep(time.Second)
		}
	}
	l.restart(t, "4")
	for _, w := range []*spaceWriter{l.w1, l.w2, more} {
		if err := w.check(ctx); err != nil {
			t.Error(err)
		}
	}
	l.ready(t)
}
