package e2e

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/nfsraw"
)

// space is what a client's df shows of a mounted volume: its size and the bytes
// used in it (size minus free).
type space struct{ total, used, avail uint64 }

func (s space) String() string {
	return fmt.Sprintf("%.1f MiB of %.1f MiB used, %.1f MiB available", float64(s.used)/(1<<20), float64(s.total)/(1<<20), float64(s.avail)/(1<<20))
}

// withinCap reports whether got is want give or take 1 % of capacity.
func withinCap(got, want, capacity uint64) bool {
	return math.Abs(float64(got)-float64(want)) <= 0.01*float64(capacity)
}

// TestDfShowsTheVolume: NFSv3 FSSTAT and the NFSv4.1 space attributes
// (space_total, space_free, space_avail) of a volume report its capacity and
// what is used in it, within 1 %, and follow data written and a resize, up and
// down; a snapshot reports the same filesystem.
func TestDfShowsTheVolume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Thick: a thin volume's filesystem grows as it fills, not with its capacity.
	s, c, _, _, sv := thickSnapshotVolume(t, ctx)
	v3, v4 := sv.v3, sv.v4
	df := func(path ...string) (space, space) {
		t.Helper()
		fh := v3.Root
		for _, n := range path {
			var err error
			if fh, _, err = v3.Lookup(ctx, fh, n); err != nil {
				t.Fatal(err)
			}
		}
		st, err := v3.FSStat(ctx, fh)
		if err != nil {
			t.Fatalf("FSSTAT: %v", err)
		}
		fh4, err := v4.LookupPath(ctx, append([]string{"vol1"}, path...)...)
		if err != nil {
			t.Fatal(err)
		}
		g := &nfsraw.GetSpace{}
		if err := v4.Run(ctx, &nfsraw.PutFH{FH: fh4}, g); err != nil {
			t.Fatalf("GETATTR space: %v", err)
		}
		return space{st.TotalBytes, st.TotalBytes - st.FreeBytes, st.AvailBytes},
			space{g.Attr.SpaceTotal, g.Attr.SpaceTotal - g.Attr.SpaceFree, g.Attr.SpaceAvail}
	}
	// Basin's own usage of the volume is its filesystem's: statfs of its whole
	// mount, as the btrfs backend reads it.
	key := onlyMount(t, s)
	basinUsed := func() uint64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(filepath.Join(s.dataDir, "fs", key), &st); err != nil {
			t.Fatal(err)
		}
		return (st.Blocks - st.Bfree) * uint64(st.Bsize)
	}
	check := func(when string, capacity, wantUsed uint64) {
		t.Helper()
		// Written data is counted once its transaction commits.
		syscall.Sync()
		var s3, s4 space
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if s3, s4 = df(); withinCap(s3.used, wantUsed, capacity) || time.Now().After(deadline) {
				break
			}
		}
		t.Logf("%s: NFSv3 FSSTAT %v; NFSv4.1 %v", when, s3, s4)
		if b := basinUsed(); !withinCap(s3.used, b, capacity) {
			t.Errorf("%s: NFSv3 FSSTAT says %d bytes are used, the volume's filesystem %d", when, s3.used, b)
		}
		for _, c := range []struct {
			proto string
			sp    space
		}{{"NFSv3 FSSTAT", s3}, {"NFSv4.1 space attributes", s4}} {
			if !withinCap(c.sp.total, capacity, capacity) {
				t.Errorf("%s: %s says the volume holds %d bytes, want %d within 1 %%", when, c.proto, c.sp.total, capacity)
			}
			if !withinCap(c.sp.used, wantUsed, capacity) {
				t.Errorf("%s: %s says %d bytes are used, want %d within 1 %% of %d", when, c.proto, c.sp.used, wantUsed, capacity)
			}
			if c.sp.avail > c.sp.total-c.sp.used {
				t.Errorf("%s: %s says %d bytes are available, more than the %d free", when, c.proto, c.sp.avail, c.sp.total-c.sp.used)
			}
		}
	}
	empty, _ := df()
	check("empty", 1<<30, empty.used)
	if empty.used > (1<<30)/20 {
		t.Fatalf("an empty 1 GiB volume shows %v", empty)
	}

	// 300 MiB written through NFS are 300 MiB more used.
	const written = 300 << 20
	fh, err := v3.Create(ctx, v3.Root, "data", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range written >> 20 {
		for j := range chunk {
			chunk[j] = byte(i + j)
		}
		if _, err := v3.Write(ctx, fh, chunk, int64(i)<<20, nfs3.FileSync); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	check("after 300 MiB written", 1<<30, empty.used+written)

	// A snapshot, in the volume's filesystem, shows that filesystem.
	mutate(t, c, "POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", map[string]any{})
	if s3, s4 := df(".snapshot", "s1"); !withinCap(s3.total, 1<<30, 1<<30) || !withinCap(s4.used, empty.used+written, 1<<30) {
		t.Errorf("df of .snapshot/s1 shows %v, %v: not the volume's", s3, s4)
	}

	// Grown to 2 GiB: df follows at once, with the same data.
	mutate(t, c, "PATCH", loc+"/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": "2"})
	check("after growing to 2 GiB", 2<<30, empty.used+written)
	// Shrunk back to 1 GiB: it follows again.
	mutate(t, c, "PATCH", loc+"/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": "1"})
	check("after shrinking to 1 GiB", 1<<30, empty.used+written)
	s.stop(syscall.SIGTERM)
}
