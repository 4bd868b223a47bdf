// Command bench measures Basin's control-plane latencies against a real `basin serve`
// on a real btrfs store (run as root by `make bench`):
//
//   - volume create: API call to READY, as a client sees it;
//   - snapshot create: API call to READY, for an empty volume and for one holding
//     1 GiB, side by side in the same run, plus the bare `btrfs subvolume snapshot`
//     under Basin for reference.
//
// Its other sections (flags -nfs, -smb, -calibrate, -qos, -metrics, -scale,
// -space, -store, -grpc, -cephfs) measure the data path: NFS and SMB volumes against bare servers sharing
// the same directories (the SMB section with a real AD DC, at three protection
// levels), basin bench against fio, service levels, what sampling metrics costs,
// scale, and what reserving space costs (the storage layout before and after
// issue 25, built side by side), the metadata stores, the API over gRPC against
// REST, and CephFS volumes against a bare FSAL_CEPH
// Ganesha and btrfs volumes, with clone and revert costs. -only runs some
// sections alone.
//
// Each figure is the median of several rounds, each round the median of many
// operations. Results go to a JSON file and replace the generated sections of
// docs/benchmarks.md (-render-from rewrites them from a results file alone).
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
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
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
	NFS          []patternResult      `json:"nfs,omitempty"`
	SMB          []patternResult      `json:"smb,omitempty"`
	Krb5         *krb5Section         `json:"krb5,omitempty"`
	Calibration  []calJob             `json:"calibration,omitempty"`
	Scale        *scaleResult         `json:"scale,omitempty"`
	QoS          *qosResult           `json:"qos,omitempty"`
	Metrics      *metricsResult       `json:"metrics,omitempty"`
	Space        *spaceResult         `json:"space,omitempty"`
	Store        *storeResult         `json:"store,omitempty"`
	CephFS       *cephfsResult        `json:"cephfs,omitempty"`
	GRPC         *grpcResult          `json:"grpc,omitempty"`
	Dual         *dualResult          `json:"dualproto,omitempty"`
}

func main() {
	// Interrupted, the benchmark still removes its server, daemons and loop devices.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() { fatalf("interrupted by %v", <-sigs) }()
	basin := flag.String("basin", "bin/basin", "basin binary")
	out := flag.String("out", "bench/results.json", "results file")
	doc := flag.String("doc", "docs/benchmarks.md", "markdown file whose generated section is replaced")
	rounds := flag.Int("rounds", 3, "rounds")
	perRound := flag.Int("n", 15, "operations per round and kind")
	withNFS := flag.Bool("nfs", true, "also measure NFS throughput and IOPS (Basin, bare Ganesha, local)")
	withSMB := flag.Bool("smb", true, "also measure SMB through Basin SMB volumes (an AD DC, a joined Samba instance) and a bare smbd: off, sign, encrypt")
	withKrb5 := flag.Bool("krb5", true, "also measure NFSv4.1 with basin bench at sec=sys, krb5, krb5i and krb5p on Basin volumes of a domain pool (a real AD DC)")
	withCal := flag.Bool("calibrate", true, "also compare basin bench --engine local with fio")
	calRuns := flag.Int("calibrate-runs", 5, "interleaved runs per tool and job")
	calSecs := flag.Float64("calibrate-seconds", 5, "seconds per calibration run")
	nfsSecs := flag.Float64("nfs-seconds", 4, "seconds per NFS measurement")
	nfsTargets := flag.String("nfs-targets", "", "comma-separated NFS targets to measure (basin = libnfs on the Basin volume, bare, legacy, local, legacy-local, bbench = basin bench --engine nfs); all when empty. With a subset the NFS tables of -doc are left as they are")
	nfsProfile := flag.String("nfs-cpuprofile", "", "directory for a CPU profile of every basin bench --engine nfs run (pattern and round in the file name)")
	withScale := flag.Bool("scale", true, "also take a server of its own to many volumes, restart it, and one volume to its snapshot limit")
	scaleVols := flag.Int("scale-volumes", 1000, "volumes of 1 GiB the scale section creates")
	scaleSnaps := flag.Int("scale-snapshots", 255, "snapshots the scale section takes of one volume")
	scaleLog := flag.String("scale-log-level", "warn", "the scale server's --log-level (debug logs each operation's steps and their durations)")
	withQoS := flag.Bool("qos", true, "also measure service levels on two servers of their own: achieved / limit at three limits, and the data path with QoS on vs off")
	withMetrics := flag.Bool("metrics", true, "also measure what a metrics sampling pass costs (sampler, Ganesha, dbus-daemon) at 10, 100 and 1,000 exports, export by export and batched")
	metricsPasses := flag.Int("metrics-passes", 20, "measured sampling passes per number of volumes and mode")
	withCP := flag.Bool("controlplane", true, "measure volume and snapshot create latencies (false: skip them, to run other sections alone)")
	withSpace := flag.Bool("space", true, "also measure what space reservation costs: the storage layout before issue 25 (sparse images, the kernel's default discard) and after (allocated images, NOCOW, mixed, nodiscard), made side by side with fio on each, and the time to make their images")
	spaceRounds := flag.Int("space-rounds", 5, "interleaved rounds of the space section")
	spaceSecs := flag.Float64("space-seconds", 3, "seconds per time-based run of the space section (reads)")
	spaceStores := flag.String("space-stores", "16,64", "GiB: store images whose creation the space section times (each skipped if the host filesystem cannot hold it and -space-margin)")
	spaceVolumes := flag.String("space-volumes", "1,32", "GiB: volume images whose creation the space section times")
	spaceMargin := flag.Int64("space-margin", 4, "GiB the host filesystem must keep free beside the space section's largest image")
	withStore := flag.Bool("store", true, "also compare the metadata stores: create→READY and GET latency on a server with SQLite beside one with PostgreSQL")
	storeCreates := flag.Int("store-creates", 10, "volume creates per round and store in the store section")
	storeGets := flag.Int("store-gets", 300, "GETs per round and store in the store section")
	withDual := flag.Bool("dualproto", true, "also measure NFS metadata on dual-protocol volumes (uncached attributes) against an NFS-only one, "+
		"and SMB opens with kernel oplocks against an SMB-only volume (needs the e2e venv, .venv, that scripts/setup.sh --test makes)")
	dualFiles := flag.Int("dualproto-files", 2000, "files per directory in the dualproto section")
	withGRPC := flag.Bool("grpc", true, "also compare the API over gRPC with REST on one server: GET p50 and p99, create→READY, calls alternating")
	grpcGets := flag.Int("grpc-gets", 1000, "volume GETs per round and transport in the grpc section")
	grpcCreates := flag.Int("grpc-creates", 10, "volume creates per round and transport in the grpc section")
	grpcPythonGets := flag.Int("grpc-python-gets", 400, "volume GETs per round and transport by Google's Python client over REST and gRPC in the grpc section (0: none)")
	grpcStatic := flag.Bool("grpc-client-static-windows", false, "in the grpc section, a gRPC client with static HTTP/2 windows (no bandwidth-probe PINGs) instead of grpc-go's default")
	withCephFS := flag.Bool("cephfs", true, "also measure CephFS: NFS sequential throughput of a Basin CephFS volume against a bare patched Ganesha's FSAL_CEPH export of the same (private) cluster and a Basin btrfs volume, and clone and revert per GiB")
	cephfsRounds := flag.Int("cephfs-rounds", 3, "interleaved rounds of the cephfs section")
	cephfsMiB := flag.Int("cephfs-mib", 256, "MiB each write of the cephfs section writes (and its reads read)")
	cephfsSecs := flag.Float64("cephfs-read-seconds", 3, "seconds per read of the cephfs section")
	cephfsGiB := flag.Int("cephfs-clone-gib", 1, "GiB the cephfs section's clone and revert copy")
	only := flag.String("only", "", "comma-separated sections to run alone, the others off whatever their flags say: "+strings.Join(sectionNames, ", "))
	renderFrom := flag.String("render-from", "", "only rewrite -doc's generated sections from this results file (no measurement); with -only, those sections' alone")
	flag.Parse()
	if *only != "" {
		sections := map[string]*bool{"controlplane": withCP, "nfs": withNFS, "smb": withSMB, "krb5": withKrb5, "calibrate": withCal,
			"qos": withQoS, "metrics": withMetrics, "scale": withScale, "space": withSpace, "store": withStore, "grpc": withGRPC, "cephfs": withCephFS, "dualproto": withDual}
		names := strings.Split(*only, ",")
		for _, n := range names {
			if sections[n] == nil {
				fatalf("-only: no section %q (sections: %s)", n, strings.Join(sectionNames, ", "))
			}
		}
		for n, p := range sections {
			*p = slices.Contains(names, n)
		}
	}
	if *renderFrom != "" {
		data, err := os.ReadFile(*renderFrom)
		if err != nil {
			fatalf("%v", err)
		}
		var rep result
		if err := json.Unmarshal(data, &rep); err != nil {
			fatalf("%s: %v", *renderFrom, err)
		}
		// With -only, only those sections are rewritten.
		if !*withCP {
			rep.Millis = nil
		}
		if !*withNFS {
			rep.NFS = nil
		}
		if !*withSMB {
			rep.SMB = nil
		}
		if !*withKrb5 {
			rep.Krb5 = nil
		}
		if !*withCal {
			rep.Calibration = nil
		}
		if !*withQoS {
			rep.QoS = nil
		}
		if !*withMetrics {
			rep.Metrics = nil
		}
		if !*withScale {
			rep.Scale = nil
		}
		if !*withSpace {
			rep.Space = nil
		}
		if !*withStore {
			rep.Store = nil
		}
		if !*withCephFS {
			rep.CephFS = nil
		}
		if !*withGRPC {
			rep.GRPC = nil
		}
		if !*withDual {
			rep.Dual = nil
		}
		if err := updateDoc(*doc, rep); err != nil {
			fatalf("%v", err)
		}
		return
	}
	if os.Geteuid() != 0 {
		fatalf("bench needs root (loop devices, mounts, btrfs)")
	}
	dataDir, err := os.MkdirTemp("", "basin-bench-")
	if err != nil {
		fatalf("%v", err)
	}
	atExit(func() { os.RemoveAll(dataDir) })
	defer runCleanups()
	ctx := context.Background()
	var c *client.Client
	if *withCP || *withNFS || *withSMB || *withKrb5 || *withDual {
		addr := freeAddr()
		// The pool promises far more than the 24 GiB store (allocated in full on the
		// host; volumes are thin-provisioned): allow it.
		// The store must still hold what the benchmarks write (a full store would fail
		// the volumes' writes), 10 GiB or so. Service levels are not enforced here: the
		// NFS tables measure Basin's data path against a bare Ganesha, and the QoS
		// section measures what shaping costs, on servers of its own.
		c = serveBasin(*basin, dataDir, addr, "--store-size", "24G", "--log-level", "warn",
			"--overcommit-ratio", "10000", "--network", "default="+benchBridge+","+benchCIDR, "--qos=false")
		must(mutate(ctx, c, "POST", loc+"/storagePools?storagePoolId=pool", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 100000,
			"network": "projects/bench/global/networks/default"}))
	}

	res := map[string][]float64{}
	if *withCP {
		controlPlane(ctx, c, dataDir, *rounds, *perRound, res)
	}
	med := map[string]float64{}
	for k, v := range res {
		med[k] = median(v)
	}
	rep := result{Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), Rounds: *rounds, PerRound: *perRound, Millis: med, RoundMedians: res}
	if *withNFS {
		rep.NFS = runNFS(ctx, c, dataDir, benchHost, *rounds, *nfsSecs, *nfsTargets, *nfsProfile)
	}
	if *withSMB {
		rep.SMB = runSMB(ctx, c, dataDir, *rounds, *nfsSecs)
	}
	if *withKrb5 {
		rep.Krb5 = &krb5Section{Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), Rounds: *rounds,
			Patterns: runKrb5(ctx, c, dataDir, *rounds, *nfsSecs)}
	}
	if *withDual {
		d := runDual(ctx, c, dataDir, *rounds, *dualFiles)
		rep.Dual = &d
	}
	if *withCal {
		rep.Calibration = calibrate(*basin, *calRuns, *calSecs)
	}
	if *withQoS {
		// Servers of its own, with the first one gone.
		runCleanups()
		q := runQoS(ctx, *basin, *rounds, *nfsSecs)
		rep.QoS = &q
	}
	if *withMetrics {
		// A sandbox of its own, with the servers before it gone.
		runCleanups()
		mr := runMetrics([]int{10, 100, 1000}, *metricsPasses)
		rep.Metrics = &mr
	}
	if *withScale {
		// The first server and its volumes go first: the scale server's thousand
		// filesystems should not share the machine with them.
		runCleanups()
		sc := runScale(*basin, *scaleVols, *scaleSnaps, *scaleLog)
		rep.Scale = &sc
	}
	if *withSpace {
		// Alone on the machine, as far as this benchmark goes.
		runCleanups()
		sp := runSpace(spaceOpts{rounds: *spaceRounds, secs: *spaceSecs, stores: gibList("-space-stores", *spaceStores),
			volumes: gibList("-space-volumes", *spaceVolumes), margin: *spaceMargin << 30})
		rep.Space = &sp
	}
	if *withStore {
		// Two servers of its own, with the others gone.
		runCleanups()
		st := runStore(ctx, *basin, *rounds, *storeCreates, *storeGets)
		rep.Store = &st
	}
	if *withGRPC {
		// A server of its own, with the others gone.
		runCleanups()
		g := runGRPC(ctx, *basin, *rounds, *grpcGets, *grpcCreates, *grpcPythonGets, *grpcStatic)
		rep.GRPC = &g
	}
	if *withCephFS {
		// A cluster and servers of its own, with the others gone.
		runCleanups()
		rep.CephFS = runCephFS(*basin, *cephfsRounds, *cephfsMiB, *cephfsSecs, *cephfsGiB)
		runCleanups()
	}
	data, _ := json.MarshalIndent(keepUnmeasured(*out, rep), "", "  ")
	os.MkdirAll(filepath.Dir(*out), 0o755)
	if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
		fatalf("%v", err)
	}
	if err := updateDoc(*doc, rep); err != nil {
		fatalf("%v", err)
	}
	if *withCP {
		fmt.Printf("volume create %.1f ms; snapshot empty %.1f ms, 1 GiB %.1f ms (ratio %.2f)\n",
			med["volumeCreate"], med["snapshotEmpty"], med["snapshot1GiB"], med["snapshot1GiB"]/med["snapshotEmpty"])
	}
}

// sectionNames are the sections -only may name.
var sectionNames = []string{"controlplane", "nfs", "smb", "krb5", "dualproto", "calibrate", "qos", "metrics", "scale", "space", "store", "grpc", "cephfs"}

// gibList parses a comma-separated list of GiB.
func gibList(flagName, s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			fatalf("%s: %q is not a number of GiB", flagName, f)
		}
		out = append(out, n)
	}
	return out
}

// keepUnmeasured returns rep with the sections this run did not measure taken
// from the results file at path, if there is one: a run of some sections
// (-only) replaces theirs and keeps the others. The date, machine and rounds
// belong to the sections that do not record their own (all but krb5, space, store, grpc and cephfs), and are
// kept with them when none of those ran.
func keepUnmeasured(path string, rep result) result {
	data, err := os.ReadFile(path)
	if err != nil {
		return rep
	}
	var old result
	if err := json.Unmarshal(data, &old); err != nil {
		log.Printf("%s: %v; writing this run's sections alone", path, err)
		return rep
	}
	others := len(rep.Millis) > 0 || rep.NFS != nil || rep.SMB != nil || rep.Calibration != nil || rep.Scale != nil || rep.QoS != nil || rep.Metrics != nil
	if !others {
		rep.Date, rep.Machine, rep.Rounds, rep.PerRound = old.Date, old.Machine, old.Rounds, old.PerRound
	}
	if len(rep.Millis) == 0 {
		rep.Millis, rep.RoundMedians = old.Millis, old.RoundMedians
	}
	if rep.NFS == nil {
		rep.NFS = old.NFS
	}
	if rep.SMB == nil {
		rep.SMB = old.SMB
	}
	if rep.Krb5 == nil {
		rep.Krb5 = old.Krb5
	}
	if rep.Calibration == nil {
		rep.Calibration = old.Calibration
	}
	if rep.Scale == nil {
		rep.Scale = old.Scale
	}
	if rep.QoS == nil {
		rep.QoS = old.QoS
	}
	if rep.Metrics == nil {
		rep.Metrics = old.Metrics
	}
	if rep.Space == nil {
		rep.Space = old.Space
	}
	if rep.Store == nil {
		rep.Store = old.Store
	}
	if rep.CephFS == nil {
		rep.CephFS = old.CephFS
	}
	if rep.GRPC == nil {
		rep.GRPC = old.GRPC
	}
	if rep.Dual == nil {
		rep.Dual = old.Dual
	}
	return rep
}

// The first server's network: the host is .1 on the bridge, endpoints .10 to .127;
// the bare Ganesha of the NFS section sits at .200 on the same bridge.
const (
	benchBridge = "bbench0"
	benchCIDR   = "10.99.251.0/24"
	benchHost   = "10.99.251.1"
)

// controlPlane times volume creates and snapshots (empty and 1 GiB) in rounds.
func controlPlane(ctx context.Context, c *client.Client, dataDir string, rounds, perRound int, res map[string][]float64) {
	// Two volumes to snapshot: one empty, one holding 1 GiB of incompressible data.
	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId=empty", volBody("empty")))
	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId=full", volBody("full")))
	fullMount := mountOf(dataDir, "full")
	if err := fill(filepath.Join(fullMount, "data"), 1<<30); err != nil {
		fatalf("%v", err)
	}
	seq := 0
	for r := range rounds {
		var create, snapEmpty, snapFull, rawEmpty, rawFull []float64
		for range perRound {
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
			rawEmpty = append(rawEmpty, rawSnapshot(dataDir, "empty"))
			rawFull = append(rawFull, rawSnapshot(dataDir, "full"))
		}
		for k, v := range map[string][]float64{"volumeCreate": create, "snapshotEmpty": snapEmpty, "snapshot1GiB": snapFull,
			"btrfsSnapshotEmpty": rawEmpty, "btrfsSnapshot1GiB": rawFull} {
			res[k] = append(res[k], median(v))
		}
		log.Printf("round %d: create %.1f ms, snapshot empty %.1f ms, snapshot 1 GiB %.1f ms", r+1, median(create), median(snapEmpty), median(snapFull))
		// Keep the volumes below the snapshot limit for the next round.
		for i := seq - perRound + 1; i <= seq; i++ {
			must(mutate(ctx, c, "DELETE", fmt.Sprintf("%s/volumes/empty/snapshots/s%d", loc, i), nil))
			must(mutate(ctx, c, "DELETE", fmt.Sprintf("%s/volumes/full/snapshots/s%d", loc, i), nil))
		}
	}
}

func volBody(id string) map[string]any {
	return map[string]any{"shareName": id, "storagePool": "pool", "capacityGib": 4, "protocols": []string{"NFSV3"}}
}

// serveBasin starts `basin serve` on dataDir, listening on addr, with more
// flags; stops it (SIGTERM) at exit, taking its data plane down with it
// (--teardown-on-exit: a bench server does not come back); and returns a client
// once it is ready.
func serveBasin(basin, dataDir, addr string, flags ...string) *client.Client {
	startBasin(basin, dataDir, addr, flags...)
	c, err := client.New("http://"+addr, filepath.Join(dataDir, "owner-key.json"))
	if err != nil {
		fatalf("%v", err)
	}
	return c
}

// startBasin starts basin serve on dataDir, stopped at exit, and waits until
// it is ready.
func startBasin(basin, dataDir, addr string, flags ...string) {
	cmd := exec.Command(basin, append([]string{"serve", "--data-dir", dataDir, "--listen", addr, "--teardown-on-exit"}, flags...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		fatalf("%v", err)
	}
	atExit(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	waitReady(addr)
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

// rawSnapshot times `btrfs subvolume snapshot -r` of a volume's live data inside
// its own filesystem, the floor under Basin's snapshot.
func rawSnapshot(dataDir, id string) float64 {
	top := filepath.Join(dataDir, "fs", keyOf(dataDir, id))
	dst := filepath.Join(top, "snapshots", "bench-raw")
	start := time.Now()
	if out, err := exec.Command("btrfs", "subvolume", "snapshot", "-r", filepath.Join(top, "live"), dst).CombinedOutput(); err != nil {
		fatalf("raw snapshot: %v %s", err, out)
	}
	ms := float64(time.Since(start).Microseconds()) / 1000
	if out, err := exec.Command("btrfs", "subvolume", "delete", "--commit-after", dst).CombinedOutput(); err != nil {
		fatalf("delete raw snapshot: %v %s", err, out)
	}
	return ms
}

// mountOf returns a volume's mount point.
func mountOf(dataDir, id string) string { return filepath.Join(dataDir, "mounts", keyOf(dataDir, id)) }

// keyOf returns a volume's storage key, read from the store (SQLite in WAL mode
// takes a second reader while the server runs).
func keyOf(dataDir, id string) string {
	st, err := store.OpenSQLite(context.Background(), filepath.Join(dataDir, "basin.db"))
	if err != nil {
		fatalf("%v", err)
	}
	defer st.Close()
	var v *model.Volume
	if err := st.View(context.Background(), func(tx store.Tx) (err error) {
		v, err = store.Get[model.Volume](tx, store.KindVolume, strings.TrimPrefix(loc, "/v1/")+"/volumes/"+id)
		return err
	}); err != nil {
		fatalf("%v", err)
	}
	return v.Key
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
	return fmt.Sprintf("%d cores (%s), kernel %s, btrfs on a loop-mounted image allocated in full", runtime.NumCPU(), cpu, rel)
}

// replaceSection rewrites the text between a generated section's markers.
func replaceSection(doc, name, body string) (string, error) {
	begin, end := "<!-- "+name+":begin (generated by make bench) -->", "<!-- "+name+":end -->"
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("no generated section %q", name)
	}
	return doc[:i] + begin + "\n" + body + end + doc[j+len(end):], nil
}

func updateDoc(path string, r result) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	m := r.Millis
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s; median of %d rounds × %d operations each.\n\n", r.Date, r.Machine, r.Rounds, r.PerRound)
	fmt.Fprintf(&b, "| what (API call → READY, as a client sees it) | median |\n|---|---|\n")
	fmt.Fprintf(&b, "| create a 4 GiB volume (image, mkfs, attach, mount, mode, export) | %.1f ms |\n", m["volumeCreate"])
	fmt.Fprintf(&b, "| snapshot of an empty volume | %.1f ms |\n", m["snapshotEmpty"])
	fmt.Fprintf(&b, "| snapshot of a volume holding 1 GiB | %.1f ms |\n", m["snapshot1GiB"])
	fmt.Fprintf(&b, "| **ratio 1 GiB / empty** | **%.2f** |\n", m["snapshot1GiB"]/m["snapshotEmpty"])
	fmt.Fprintf(&b, "| for reference: bare `btrfs subvolume snapshot -r` in the volume's filesystem, empty / 1 GiB | %.1f / %.1f ms |\n", m["btrfsSnapshotEmpty"], m["btrfsSnapshot1GiB"])
	doc := string(data)
	if len(m) > 0 {
		if doc, err = replaceSection(doc, "bench", b.String()); err != nil {
			return err
		}
	}
	if len(r.NFS) > 0 && nfsComplete(r.NFS[0]) {
		var n strings.Builder
		fmt.Fprintf(&n, "Measured %s on the same machine; NFSv3 over one TCP connection, median of %d interleaved runs per target.\n\n", r.Date, r.Rounds)
		n.WriteString("| workload | Basin volume | bare Ganesha | local (fio) | Basin / bare | Basin / local | basin bench --engine nfs | basin bench / libnfs |\n|---|---|---|---|---|---|---|---|\n")
		for _, x := range r.NFS {
			unit, get := x.headline()
			fmt.Fprintf(&n, "| %s | %.0f %s | %.0f %s | %.0f %s | %.2f | %.2f | %.0f %s | %.2f |\n", x.Pattern, get["basin"], unit, get["bare"], unit,
				get["local"], unit, get["basin"]/get["bare"], get["basin"]/get["local"], get["bbench"], unit, get["bbench"]/get["basin"])
		}
		if doc, err = replaceSection(doc, "nfsbench", n.String()); err != nil {
			return err
		}
		var iso strings.Builder
		fmt.Fprintf(&iso, "Measured %s on the same machine, in the same interleaved runs as the table above.\n\n", r.Date)
		iso.WriteString("| workload | Basin volume (own filesystem, patched Ganesha, sandbox) | previous layout (stock Ganesha, subvolume of the shared store) | Basin / previous | fio: own filesystem | fio: shared-store subvolume | own / shared |\n|---|---|---|---|---|---|---|\n")
		for _, x := range r.NFS {
			unit, get := x.headline()
			fmt.Fprintf(&iso, "| %s | %.0f %s | %.0f %s | %.2f | %.0f %s | %.0f %s | %.2f |\n", x.Pattern, get["basin"], unit, get["legacy"], unit,
				get["basin"]/get["legacy"], get["local"], unit, get["legacy-local"], unit, get["local"]/get["legacy-local"])
		}
		if doc, err = replaceSection(doc, "isolationbench", iso.String()); err != nil {
			return err
		}
	}
	if len(r.SMB) > 0 {
		if doc, err = replaceSection(doc, "smbbench", smbMarkdown(r.Date, r.Rounds, r.SMB)); err != nil {
			return err
		}
	}
	if r.Krb5 != nil && len(r.Krb5.Patterns) > 0 {
		if doc, err = replaceSection(doc, "krb5bench", krb5Markdown(r.Krb5)); err != nil {
			return err
		}
	}
	if len(r.Calibration) > 0 {
		var c strings.Builder
		fmt.Fprintf(&c, "Measured %s on the same machine (a file on the root filesystem, `direct=1`, 1 s ramp, interleaved runs, medians).\n\n", r.Date)
		c.WriteString("| job | fio (libaio) | basin bench --engine local | basin / fio |\n|---|---|---|---|\n")
		for _, j := range r.Calibration {
			fmt.Fprintf(&c, "| %s | %.0f IOPS | %.0f IOPS | %.2f |\n", j.Name, j.Fio, j.Basin, j.Basin/j.Fio)
		}
		if doc, err = replaceSection(doc, "calibrate", c.String()); err != nil {
			return err
		}
	}
	if r.QoS != nil {
		if doc, err = replaceSection(doc, "qosbench", r.QoS.markdown(r.Date)); err != nil {
			return err
		}
	}
	if r.Metrics != nil {
		if doc, err = replaceSection(doc, "metricsbench", r.Metrics.markdown()); err != nil {
			return err
		}
	}
	if r.Scale != nil {
		if doc, err = replaceSection(doc, "scalebench", r.Scale.markdown(r.Date)); err != nil {
			return err
		}
	}
	if r.Space != nil {
		if doc, err = replaceSection(doc, "spacebench", r.Space.markdown()); err != nil {
			return err
		}
	}
	if r.Store != nil {
		if doc, err = replaceSection(doc, "storebench", r.Store.markdown()); err != nil {
			return err
		}
	}
	if r.Dual != nil {
		if doc, err = replaceSection(doc, "dualbench", r.Dual.markdown()); err != nil {
			return err
		}
	}
	if r.CephFS != nil {
		if doc, err = replaceSection(doc, "cephfsbench", r.CephFS.markdown()); err != nil {
			return err
		}
	}
	if r.GRPC != nil {
		if doc, err = replaceSection(doc, "grpcbench", r.GRPC.markdown()); err != nil {
			return err
		}
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("%v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitReady(addr string) { waitReadyFor(addr, 30*time.Second) }

func waitReadyFor(addr string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	fatalf("basin serve did not become ready")
}

func must(err error) {
	if err != nil {
		fatalf("%v", err)
	}
}

// cleanups run on a fatal error too, so a failed benchmark leaves no server,
// daemon, mount or loop device behind.
var cleanups []func()

func atExit(f func()) { cleanups = append(cleanups, f) }

func runCleanups() {
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanups = nil
}

func fatalf(format string, args ...any) {
	log.Printf(format, args...)
	runCleanups()
	os.Exit(1)
}
