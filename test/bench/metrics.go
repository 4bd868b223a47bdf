package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/basin-nas/basin/internal/dataplane"
	"github.com/basin-nas/basin/internal/metrics"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/internal/qos"
	"github.com/basin-nas/basin/internal/runner"
)

// metricsResult is the metrics section: what one sampling pass costs at several
// numbers of volumes, reading Ganesha export by export and in batches.
type metricsResult struct {
	// Date is when it ran: results.json's own date is the first section's.
	Date   string       `json:"date"`
	Passes int          `json:"passes"`
	Rows   []metricsRow `json:"rows"`
}

type metricsRow struct {
	Volumes int `json:"volumes"`
	// Mode is how the sampler reads Ganesha: "per-export" (five DBus calls per
	// volume: GetNFSv3IO … GetNFSv42IO, GetTotalOPS) or "batched" (GetNFSIO once,
	// GetTotalOPS per volume); "batched, tc" also reads traffic control's
	// counters, every volume with a class (--qos).
	Mode      string `json:"mode"`
	DBusCalls int    `json:"dbusCallsPerPass"`
	// Medians over the passes: wall time and the sampling process's CPU time
	// (getrusage).
	WallMillis       float64 `json:"wallMillis"`
	SamplerCPUMillis float64 `json:"samplerCpuMillis"`
	// Means over the passes (/proc/<pid>/stat counts CPU in 10 ms ticks, too
	// coarse for a median of one pass): Ganesha's and the dbus-daemon's CPU time.
	GaneshaCPUMillis float64 `json:"ganeshaCpuMillis"`
	DBusCPUMillis    float64 `json:"dbusCpuMillis"`
	// AllocBytes is the median of the bytes the sampling process allocated per
	// pass; HeapBytes the live heap the sampler holds after the passes (its
	// series, with rings of Passes+1 points: a day's ring adds 439 KiB per volume).
	AllocBytes float64 `json:"allocBytesPerPass"`
	HeapBytes  float64 `json:"heapBytes"`
}

// corePercent is the row's CPU time (sampler, Ganesha, dbus-daemon) as a share
// of one core at the sampler's 10 s interval.
func (r metricsRow) corePercent() float64 {
	return (r.SamplerCPUMillis + r.GaneshaCPUMillis + r.DBusCPUMillis) / float64(metrics.DefaultInterval/time.Millisecond) * 100
}

// The metrics section's network: the host is .1 on the bridge, every export on .10.
const (
	metricsBridge = "bmet0"
	metricsCIDR   = "10.99.232.0/24"
)

// perExport hides dataplane.Manager's batched read: the sampler then reads every
// export on its own, as it did before the batched read existed.
type perExport struct{ m *dataplane.Manager }

func (p perExport) ExportIO(ctx context.Context, network string, id uint64) (nfs.ExportIO, error) {
	return p.m.ExportIO(ctx, network, id)
}

// fixedTargets are the volumes the sampler samples.
type fixedTargets []metrics.Volume

func (f fixedTargets) Volumes(context.Context) ([]metrics.Volume, error) { return f, nil }

// runMetrics builds a network sandbox as the daemon does (Basin's Ganesha, its
// private dbus-daemon), exports up to the largest of sizes tmpfs directories
// (not btrfs volumes: the sampler reads Ganesha, not the filesystem), writes and
// reads a little in every export over NFSv3 before each pass, and times passes
// of the real sampler with Ganesha as its NFS source and the sandbox's TCP
// tables as its client source (no capacity source: that is the storage backend's
// read).
func runMetrics(sizes []int, passes int) metricsResult {
	res := metricsResult{Date: time.Now().UTC().Format(time.RFC3339), Passes: passes}
	ctx := context.Background()
	dataDir, err := os.MkdirTemp("", "basin-metricsbench-")
	if err != nil {
		fatalf("%v", err)
	}
	atExit(func() { os.RemoveAll(dataDir) })
	mounts := filepath.Join(dataDir, "mounts")
	if err := dataplane.ShareMounts(ctx, runner.Exec{}, mounts); err != nil {
		fatalf("%v", err)
	}
	atExit(func() { dataplane.UnshareMounts(context.Background(), runner.Exec{}, mounts) })
	prefix := netip.MustParsePrefix(metricsCIDR)
	n := dataplane.Network{Name: "met", Bridge: metricsBridge, Prefix: prefix,
		FirstEndpoint: netip.MustParseAddr("10.99.232.10"), LastEndpoint: netip.MustParseAddr("10.99.232.127")}
	m := dataplane.New(dataplane.Options{DataDir: dataDir, Networks: []dataplane.Network{n}})
	if err := m.Start(ctx); err != nil {
		fatalf("metrics: %v", err)
	}
	atExit(func() { m.Stop(context.Background()) })
	addr, host := n.FirstEndpoint, n.HostAddr().String()

	var files [][]byte // each export's file handle, by export id − 1
	var client *nfs3.Client
	for _, size := range sizes {
		t := time.Now()
		for id := len(files) + 1; id <= size; id++ {
			name := fmt.Sprintf("m%04d", id)
			vol := filepath.Join(mounts, name)
			os.MkdirAll(vol, 0o755)
			if err := syscall.Mount("tmpfs", vol, "tmpfs", 0, "size=1m"); err != nil {
				fatalf("metrics: mount %s: %v", vol, err)
			}
			atExit(func() { syscall.Unmount(vol, syscall.MNT_DETACH) })
			if err := os.WriteFile(filepath.Join(vol, "f"), make([]byte, 8192), 0o666); err != nil {
				fatalf("%v", err)
			}
			ex := nfs.Export{ID: uint64(id), Path: vol, Pseudo: "/" + name, Protocols: []int{3, 4},
				Clients: []nfs.Client{{Clients: []string{host}, Access: nfs.AccessRW, Squash: nfs.NoRootSquash, Protocols: []int{3, 4}}}}
			if err := m.Export(ctx, "met", addr, ex); err != nil {
				fatalf("metrics: export %d: %v", id, err)
			}
			c, err := nfs3.Mount(ctx, addr.String(), "/"+name, nfs3.Options{})
			if err != nil {
				fatalf("metrics: mount export %d: %v", id, err)
			}
			fh, _, err := c.Lookup(ctx, c.Root, "f")
			if err != nil {
				fatalf("metrics: export %d: %v", id, err)
			}
			files = append(files, fh)
			if client == nil {
				client = c // one connection serves every export's handles
				atExit(func() { client.Close() })
			} else {
				c.Close()
			}
		}
		log.Printf("metrics: %d exports (%.1f s)", size, time.Since(t).Seconds())
		vols := make(fixedTargets, size)
		for i := range vols {
			vols[i] = metrics.Volume{Key: fmt.Sprintf("k%04d", i+1), Name: fmt.Sprintf("m%04d", i+1), Network: "met",
				Endpoint: addr, ExportID: uint64(i + 1)}
		}
		load := func() { nfsLoad(ctx, client, files[:size]) }
		for _, mode := range []string{"per-export", "batched", "batched, tc"} {
			var src metrics.NFSSource = m
			calls := 1 + size
			if mode == "per-export" {
				src, calls = perExport{m}, 5*size
			}
			var tc metrics.QoSSource
			if mode == "batched, tc" {
				tc = shapeVolumes(ctx, m, vols)
			}
			row := samplePasses(ctx, m, dataDir, vols, src, tc, load, passes)
			row.Volumes, row.Mode, row.DBusCalls = size, mode, calls
			log.Printf("metrics: %d volumes, %s: wall %.1f ms, CPU sampler %.2f / Ganesha %.1f / dbus-daemon %.1f ms per pass (%.3f %% of a core), %.0f KiB allocated per pass",
				size, mode, row.WallMillis, row.SamplerCPUMillis, row.GaneshaCPUMillis, row.DBusCPUMillis, row.corePercent(), row.AllocBytes/1024)
			res.Rows = append(res.Rows, row)
		}
	}
	return res
}

// shapeVolumes gives every volume a traffic-control class on the sandbox's link,
// as --qos does (a project class over one leaf per volume, each leaf with an
// address of its own: addresses no traffic uses, only the dumps' size matters),
// and returns the driver's counters as the sampler's source. The classes stay
// until the next call's tree replaces them, or the sandbox goes.
func shapeVolumes(ctx context.Context, m *dataplane.Manager, vols fixedTargets) metrics.QoSSource {
	link, ok := m.QoSLink("met")
	if !ok {
		fatalf("metrics: no link to shape")
	}
	tree := qos.Tree{Classes: []qos.Class{{Key: "project", Rate: 100000 << 20, Ceil: 100000 << 20}}}
	for i, v := range vols {
		tree.Classes = append(tree.Classes, qos.Class{Key: v.Name, Parent: "project", Rate: 1 << 20, Ceil: 100 << 20,
			Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, 99, byte(233 + i/250), byte(1 + i%250)})}})
	}
	d := qos.New(nil)
	if err := d.Apply(ctx, link, tree); err != nil {
		fatalf("metrics: %v", err)
	}
	return tcSource{d, link}
}

// tcSource reads the link's counters (the daemon's adapter, for one link).
type tcSource struct {
	d    qos.Driver
	link qos.Link
}

func (t tcSource) QoSCounters(ctx context.Context, _ string) (map[string]qos.Counters, error) {
	return t.d.Counters(ctx, t.link)
}

// nfsLoad writes and reads 4 KiB in every file, eight exports at a time.
func nfsLoad(ctx context.Context, c *nfs3.Client, files [][]byte) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	buf := make([]byte, 4096)
	for _, fh := range files {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := c.Write(ctx, fh, buf, 0, nfs3.Unstable); err != nil {
				fatalf("metrics: write: %v", err)
			}
			if _, _, err := c.Read(ctx, fh, make([]byte, 4096), 4096); err != nil {
				fatalf("metrics: read: %v", err)
			}
		}()
	}
	wg.Wait()
}

// samplePasses runs a fresh sampler: one pass to set its baseline (and dial the
// bus), then passes measured ones, each after load, on a clock that advances by
// the interval.
func samplePasses(ctx context.Context, m *dataplane.Manager, dataDir string, vols fixedTargets, src metrics.NFSSource, tc metrics.QoSSource, load func(), passes int) metricsRow {
	clk := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapAlloc
	s := metrics.New(metrics.Options{Targets: vols, NFS: src, Clients: metrics.NetnsClients{PID: m.GaneshaPID}, QoS: tc,
		Now: func() time.Time { return clk }})
	ganesha := m.GaneshaPID("met")
	bus := dbusPID(dataDir)
	if ganesha == 0 || bus == 0 {
		fatalf("metrics: ganesha pid %d, dbus-daemon pid %d", ganesha, bus)
	}
	must(s.Sample(ctx))
	var wall, cpu, alloc []float64
	var gCPU, bCPU float64
	for range passes {
		load()
		clk = clk.Add(metrics.DefaultInterval)
		runtime.GC() // the load's garbage is not the pass's to collect
		runtime.ReadMemStats(&ms)
		a0 := ms.TotalAlloc
		g0, b0, c0 := procCPU(ganesha), procCPU(bus), selfCPU()
		t0 := time.Now()
		must(s.Sample(ctx))
		wall = append(wall, float64(time.Since(t0).Microseconds())/1000)
		cpu = append(cpu, float64((selfCPU()-c0).Microseconds())/1000)
		gCPU += float64((procCPU(ganesha) - g0).Milliseconds())
		bCPU += float64((procCPU(bus) - b0).Milliseconds())
		runtime.ReadMemStats(&ms)
		alloc = append(alloc, float64(ms.TotalAlloc-a0))
	}
	// The passes read Ganesha: the last volume's last interval has its reads
	// (and, with traffic control, a wire rate: 0, its address unused).
	last := vols[len(vols)-1].Key
	got, err := s.Query(ctx, model.MetricsQuery{Series: last, Metrics: []string{"readIops", "wireReadMibps"}, Start: clk.Add(-metrics.DefaultInterval), End: clk, Step: metrics.DefaultInterval})
	if err != nil || len(got) != 2 || len(got[0].Points) != 1 || !(got[0].Points[0].Value > 0) {
		fatalf("metrics: the sampler read no NFS reads of %s: %+v, %v", last, got, err)
	}
	if tc != nil && (len(got[1].Points) != 1 || got[1].Points[0].Value != 0) {
		fatalf("metrics: the sampler read no traffic control counters of %s: %+v", last, got[1])
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap := float64(ms.HeapAlloc) - float64(heap0)
	runtime.KeepAlive(s)
	return metricsRow{WallMillis: median(wall), SamplerCPUMillis: median(cpu), GaneshaCPUMillis: gCPU / float64(passes),
		DBusCPUMillis: bCPU / float64(passes), AllocBytes: median(alloc), HeapBytes: heap}
}

// selfCPU is this process's user and system CPU time (getrusage).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is process pid's user and system CPU time, every thread's
// (/proc/<pid>/stat fields 14 and 15, in clock ticks of 10 ms).
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		fatalf("metrics: %v", err)
	}
	// The command name, in parentheses, may hold spaces: fields start after it.
	i := bytes.LastIndexByte(data, ')')
	f := strings.Fields(string(data[i+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		fatalf("metrics: /proc/%d/stat: %q", pid, data)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// dbusPID finds the sandbox's dbus-daemon: the one whose configuration lies
// under dataDir.
func dbusPID(dataDir string) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		args := strings.Split(string(cmd), "\x00")
		if len(args) > 1 && filepath.Base(args[0]) == "dbus-daemon" && strings.Contains(string(cmd), "--config-file="+dataDir+"/") {
			return pid
		}
	}
	return 0
}

func (r *metricsResult) markdown() string {
	var b strings.Builder
	date := r.Date
	fmt.Fprintf(&b, "Measured %s on the same machine: a network sandbox as Basin runs it (Basin's Ganesha, its private dbus-daemon) with tmpfs directories as exports, 4 KiB written and read over NFSv3 in every export before each pass; per pass, medians of %d passes (Ganesha's and the dbus-daemon's CPU: means, their counters tick every 10 ms).\n\n", date, r.Passes)
	b.WriteString("| volumes | Ganesha read | DBus calls per pass | wall | CPU: sampler | CPU: Ganesha | CPU: dbus-daemon | **% of one core (10 s interval)** | allocated per pass | sampler heap |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.Rows {
		fmt.Fprintf(&b, "| %d | %s | %d | %.1f ms | %.2f ms | %.1f ms | %.1f ms | **%.3f %%** | %.0f KiB | %.0f KiB |\n", x.Volumes, x.Mode, x.DBusCalls,
			x.WallMillis, x.SamplerCPUMillis, x.GaneshaCPUMillis, x.DBusCPUMillis, x.corePercent(), x.AllocBytes/1024, x.HeapBytes/1024)
	}
	return b.String()
}
