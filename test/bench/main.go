// Command bench measures Basin's control-plane latencies against a real `basin serve`
// on a real btrfs store (run as root by `make bench`):
//
//   - volume create: API call to READY, as a client sees it;
//   - snapshot create: API call to READY, for an empty volume and for one holding
//     1 GiB, side by side in the same run, plus the bare `btrfs subvolume snapshot`
//     under Basin for reference.
//
// Each figure is the median of several rounds, each round the median of many
// operations. Results go to a JSON file and replace the generated section of
// docs/benchmarks.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

const loc = "/v1/projects/bench/locations/local"

type result struct {
	Date         string               `json:"date"`
	Machine      string               `json:"machine"`
	Rounds       int                  `json:"rounds"`
	PerRound     int                  `json:"perRound"`
	Millis       map[string]float64   `json:"medianMillis"`
	RoundMedians map[string][]float64 `json:"roundMedianMillis"`
}

func main() {
	basin := flag.String("basin", "bin/basin", "basin binary")
	out := flag.String("out", "bench/results.json", "results file")
	doc := flag.String("doc", "docs/benchmarks.md", "markdown file whose generated section is replaced")
	rounds := flag.Int("rounds", 3, "rounds")
	perRound := flag.Int("n", 15, "operations per round and kind")
	flag.Parse()
	if os.Geteuid() != 0 {
		log.Fatal("bench needs root (loop devices, mounts, btrfs)")
	}
	dataDir, err := os.MkdirTemp("", "basin-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dataDir)
	addr := freeAddr()
	cmd := exec.Command(*basin, "serve", "--data-dir", dataDir, "--listen", addr, "--store-size", "16G", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	waitReady(addr)
	c, err := client.New("http://"+addr, filepath.Join(dataDir, "owner-key.json"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	must(mutate(ctx, c, "POST", loc+"/storagePools?storagePoolId=pool", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 100000,
		"network": "projects/bench/global/networks/default"}))

	res := map[string][]float64{}
	// Two volumes to snapshot: one empty, one holding 1 GiB of incompressible data.
	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId=empty", volBody("empty")))
	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId=full", volBody("full")))
	fullMount := mountOf(dataDir, "full")
	if err := fill(filepath.Join(fullMount, "data"), 1<<30); err != nil {
		log.Fatal(err)
	}
	seq := 0
	for r := range *rounds {
		var create, snapEmpty, snapFull, rawEmpty, rawFull []float64
		for range *perRound {
			seq++
			id := fmt.Sprintf("v%d", seq)
			create = append(create, timed(func() error { return mutate(ctx, c, "POST", loc+"/volumes?volumeId="+id, volBody(id)) }))
			// Interleave the two snapshot kinds so machine noise hits both alike.
			snapEmpty = append(snapEmpty, timed(func() error {
				return mutate(ctx, c, "POST", fmt.Sprintf("%s/volumes/empty/snapshots?snapshotId=s%d", loc, seq), map[string]any{})
			}))
			snapFull = append(snapFull, timed(func() error {
				return mutate(ctx, c, "POST", fmt.Sprintf("%s/volumes/full/snapshots?snapshotId=s%d", loc, seq), map[string]any{})
			}))
			rawEmpty = append(rawEmpty, rawSnapshot(mountOf(dataDir, "empty"), dataDir))
			rawFull = append(rawFull, rawSnapshot(fullMount, dataDir))
		}
		for k, v := range map[string][]float64{"volumeCreate": create, "snapshotEmpty": snapEmpty, "snapshot1GiB": snapFull,
			"btrfsSnapshotEmpty": rawEmpty, "btrfsSnapshot1GiB": rawFull} {
			res[k] = append(res[k], median(v))
		}
		log.Printf("round %d: create %.1f ms, snapshot empty %.1f ms, snapshot 1 GiB %.1f ms", r+1, median(create), median(snapEmpty), median(snapFull))
		// Keep the volumes below the snapshot limit for the next round.
		for i := seq - *perRound + 1; i <= seq; i++ {
			must(mutate(ctx, c, "DELETE", fmt.Sprintf("%s/volumes/empty/snapshots/s%d", loc, i), nil))
			must(mutate(ctx, c, "DELETE", fmt.Sprintf("%s/volumes/full/snapshots/s%d", loc, i), nil))
		}
	}
	med := map[string]float64{}
	for k, v := range res {
		med[k] = median(v)
	}
	rep := result{Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), Rounds: *rounds, PerRound: *perRound, Millis: med, RoundMedians: res}
	data, _ := json.MarshalIndent(rep, "", "  ")
	os.MkdirAll(filepath.Dir(*out), 0o755)
	if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := updateDoc(*doc, rep); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("volume create %.1f ms; snapshot empty %.1f ms, 1 GiB %.1f ms (ratio %.2f)\n",
		med["volumeCreate"], med["snapshotEmpty"], med["snapshot1GiB"], med["snapshot1GiB"]/med["snapshotEmpty"])
}

func volBody(id string) map[string]any {
	return map[string]any{"shareName": id, "storagePool": "pool", "capacityGib": 4, "protocols": []string{"NFSV3"}}
}

func mutate(ctx context.Context, c *client.Client, method, path string, body any) error {
	var op client.Object
	if err := c.Do(ctx, method, path, nil, body, &op); err != nil {
		return err
	}
	_, err := c.Wait(ctx, op)
	return err
}

func timed(f func() error) float64 {
	start := time.Now()
	must(f())
	return float64(time.Since(start).Microseconds()) / 1000
}

// rawSnapshot times `btrfs subvolume snapshot -r` of a mounted volume, the floor
// under Basin's snapshot, and deletes the result.
func rawSnapshot(mount, dataDir string) float64 {
	dst := filepath.Join(dataDir, "store", "bench-raw")
	start := time.Now()
	if out, err := exec.Command("btrfs", "subvolume", "snapshot", "-r", mount, dst).CombinedOutput(); err != nil {
		log.Fatalf("raw snapshot: %v %s", err, out)
	}
	ms := float64(time.Since(start).Microseconds()) / 1000
	if out, err := exec.Command("btrfs", "subvolume", "delete", "--commit-after", dst).CombinedOutput(); err != nil {
		log.Fatalf("delete raw snapshot: %v %s", err, out)
	}
	return ms
}

// mountOf returns a volume's mount point, reading its storage key from the store
// (SQLite in WAL mode takes a second reader while the server runs).
func mountOf(dataDir, id string) string {
	st, err := store.OpenSQLite(context.Background(), filepath.Join(dataDir, "basin.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	var v *model.Volume
	if err := st.View(context.Background(), func(tx store.Tx) (err error) {
		v, err = store.Get[model.Volume](tx, store.KindVolume, strings.TrimPrefix(loc, "/v1/")+"/volumes/"+id)
		return err
	}); err != nil {
		log.Fatal(err)
	}
	return filepath.Join(dataDir, "mounts", v.Key)
}

func fill(path string, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, n); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func machine() string {
	cpu := "unknown cpu"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	var u syscall.Utsname
	syscall.Uname(&u)
	rel := make([]byte, 0, len(u.Release))
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		rel = append(rel, byte(c))
	}
	return fmt.Sprintf("%d cores (%s), kernel %s, btrfs on a loop-mounted sparse image", runtime.NumCPU(), cpu, rel)
}

const begin, end = "<!-- bench:begin (generated by make bench) -->", "<!-- bench:end -->"

func updateDoc(path string, r result) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(data)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no generated section markers", path)
	}
	m := r.Millis
	var b strings.Builder
	fmt.Fprintf(&b, "%s\nMeasured %s on %s; median of %d rounds × %d operations each.\n\n", begin, r.Date, r.Machine, r.Rounds, r.PerRound)
	fmt.Fprintf(&b, "| what (API call → READY, as a client sees it) | median |\n|---|---|\n")
	fmt.Fprintf(&b, "| create a 4 GiB volume (qgroup, subvolume, limit, mode, mount) | %.1f ms |\n", m["volumeCreate"])
	fmt.Fprintf(&b, "| snapshot of an empty volume | %.1f ms |\n", m["snapshotEmpty"])
	fmt.Fprintf(&b, "| snapshot of a volume holding 1 GiB | %.1f ms |\n", m["snapshot1GiB"])
	fmt.Fprintf(&b, "| **ratio 1 GiB / empty** | **%.2f** |\n", m["snapshot1GiB"]/m["snapshotEmpty"])
	fmt.Fprintf(&b, "| for reference: bare `btrfs subvolume snapshot -r`, empty / 1 GiB | %.1f / %.1f ms |\n", m["btrfsSnapshotEmpty"], m["btrfsSnapshot1GiB"])
	b.WriteString(end)
	s = s[:i] + b.String() + s[j+len(end):]
	return os.WriteFile(path, []byte(s), 0o644)
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitReady(addr string) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	log.Fatal("basin serve did not become ready")
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
