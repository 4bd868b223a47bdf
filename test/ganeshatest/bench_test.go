package ganeshatest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/bench"
)

// TestReadCost compares the patched Ganesha with Debian's on one export:
// 4 KiB random reads (qd 16) and 1 MiB sequential reads (qd 8) with basin
// bench's NFS engine over loopback, medians of 3 interleaved runs. It runs
// only with NFSATK_BENCH=1 (about two minutes).
func TestReadCost(t *testing.T) {
	if os.Getenv("NFSATK_BENCH") == "" {
		t.Skip("set NFSATK_BENCH=1 to measure")
	}
	Need(t)
	root := Scratch(t, "bench")
	fs := NewBtrfs(t, filepath.Join(root, "fs.img"), 1<<30)
	top := filepath.Join(root, "top")
	fs.Mount(top, "")
	Run(t, "btrfs", "-q", "subvolume", "create", filepath.Join(top, "live"))
	Unmount(top)
	dir := filepath.Join(root, "live")
	fs.Mount(dir, "subvol=live")
	fs.Settle()
	os.Chmod(dir, 0o777)
	exports := []Export{{ID: 1, Path: dir, Pseudo: "/vol", Clients: []Client{{IP: "127.0.0.1", Access: "RW", Squash: "no_root_squash"}}}}
	bins := map[string]string{"patched": PatchedBin(), "debian": DebianBin}
	patterns := []struct {
		name, rw string
		bs       int64
		qd       int
	}{{"4k randread qd16", "randread", 4 << 10, 16}, {"1M read qd8", "read", 1 << 20, 8}}
	res := map[string][]float64{}
	for round := range 3 {
		for _, name := range []string{"patched", "debian"} {
			srv := Start(t, bins[name], exports)
			for _, p := range patterns {
				ctx := Context(t, time.Minute)
				e := &bench.NFS{URL: "nfs://127.0.0.1/vol", Conns: 1}
				r, err := bench.Run(ctx, e, bench.Job{Name: "bb-read", RW: p.rw, BS: p.bs, IODepth: p.qd, NumJobs: 1, NrFiles: 1,
					Size: 256 << 20, Runtime: 5 * time.Second, TimeBased: true}, nil)
				e.Close()
				if err != nil {
					t.Fatalf("%s %s: %v\n%s", name, p.name, err, srv.Log())
				}
				var b strings.Builder
				r.WriteJSON(&b)
				var out struct {
					Jobs []struct {
						Read struct {
							BW   float64 `json:"bw_bytes"`
							IOPS float64 `json:"iops"`
						} `json:"read"`
					} `json:"jobs"`
				}
				if err := json.Unmarshal([]byte(b.String()), &out); err != nil || len(out.Jobs) == 0 {
					t.Fatalf("bench output: %v", err)
				}
				v := out.Jobs[0].Read.IOPS
				if p.bs >= 1<<20 {
					v = out.Jobs[0].Read.BW / (1 << 20)
				}
				res[name+" "+p.name] = append(res[name+" "+p.name], v)
				t.Logf("round %d %s %s: %.0f", round+1, name, p.name, v)
			}
			srv.Stop()
		}
	}
	for _, p := range patterns {
		unit := "IOPS"
		if p.bs >= 1<<20 {
			unit = "MiB/s"
		}
		med := func(k string) float64 { s := slices.Clone(res[k]); slices.Sort(s); return s[len(s)/2] }
		pt, db := med("patched "+p.name), med("debian "+p.name)
		t.Logf("%s: patched %.0f %s, debian %.0f %s (patched/debian %.3f), runs patched %v debian %v",
			p.name, pt, unit, db, unit, pt/db, res["patched "+p.name], res["debian "+p.name])
	}
}
