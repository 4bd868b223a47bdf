package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/internal/store"
)

// scaleResult is the scale section: one server taken to many volumes, and one
// volume to its snapshot limit.
type scaleResult struct {
	Volumes int `json:"volumes"`
	// CreateMillis are the create→READY latencies, in creation order.
	CreateMillis []float64 `json:"createMillis"`
	// ListMillis are full listings of every volume (pages of 1,000), repeated.
	ListMillis []float64 `json:"listMillis"`
	// StopSeconds is how long the server took to stop with --teardown-on-exit
	// (unexport, unmount all); ReadySeconds is from the process's start after
	// it to /readyz answering 200, ServingSeconds to every volume's export
	// serving the file written in it again (the cold start: everything built).
	StopSeconds                  float64 `json:"stopSeconds"`
	ReadySeconds, ServingSeconds float64
	// Restarts are the restarts that leave the data plane serving (a clean
	// stop, a SIGKILL) and the cold one, each with what a client reading one
	// volume on one connection throughout saw.
	Restarts []restartResult `json:"restarts,omitempty"`
	// Footprint is what the host spends on the volumes: read before the first
	// and after the last was created (and, for neighbours, after a client on
	// the host read every volume).
	Footprint      *footprint `json:"footprint,omitempty"`
	Snapshots      int        `json:"snapshots"`
	SnapshotMillis []float64  `json:"snapshotMillis"`
}

// footprint is the host's cost of a server's volumes, read from the kernel.
type footprint struct {
	Before, After hostCounts
	// Neighbours is the host's neighbour (ARP) entries on the bridge once a
	// client on the host has read every volume: one per endpoint address.
	Neighbours int `json:"neighbours"`
}

// hostCounts are host-wide counters.
type hostCounts struct {
	SUnreclaimKiB int64 `json:"sUnreclaimKiB"` // unreclaimable kernel slab memory
	SlabKiB       int64 `json:"slabKiB"`       // all slab memory
	MemAvailKiB   int64 `json:"memAvailableKiB"`
	KernelThreads int   `json:"kernelThreads"` // children of kthreadd
	Tasks         int   `json:"tasks"`         // every thread on the host (each takes a pid)
	LoopDevices   int   `json:"loopDevices"`   // attached
}

// readHostCounts reads hostCounts now.
func readHostCounts() hostCounts {
	var h hostCounts
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			v, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "SUnreclaim:":
				h.SUnreclaimKiB = v
			case "Slab:":
				h.SlabKiB = v
			case "MemAvailable:":
				h.MemAvailKiB = v
			}
		}
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 17 {
			if f[1] == "2" {
				h.KernelThreads++
			}
			n, _ := strconv.Atoi(f[17]) // num_threads
			h.Tasks += n
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	h.LoopDevices = len(loops)
	return h
}

// neighbours counts the host's neighbour entries on dev.
func neighbours(dev string) int {
	out, err := exec.Command("ip", "-4", "neigh", "show", "dev", dev).Output()
	if err != nil {
		return -1
	}
	return strings.Count(string(out), "\n")
}

// restartResult is one restart of the scale server.
type restartResult struct {
	// Kind: "stop" (SIGTERM), "kill" (SIGKILL), "teardown" (SIGTERM of a
	// server run with --teardown-on-exit, then a start that builds everything).
	Kind           string  `json:"kind"`
	StopSeconds    float64 `json:"stopSeconds"`
	ReadySeconds   float64 `json:"readySeconds"`
	ServingSeconds float64 `json:"servingSeconds"`
	// ProbeFailures counts the probe's reads that failed (each retried on a
	// new connection after 50 ms); LongestPauseMillis is the longest time
	// between two of its reads that succeeded.
	ProbeFailures      int     `json:"probeFailures"`
	LongestPauseMillis float64 `json:"longestPauseMillis"`
}

const (
	scaleBridge = "bscale0"
	scaleCIDR   = "10.99.240.0/21" // endpoints .240.10 to .243.255: 1,014 of them
	scaleHost   = "10.99.240.1"
)

// runScale starts a server of its own, creates nVols volumes of 1 GiB in one pool
// (each served over NFSv3 with a file in it), lists them, restarts the server and
// times until every export serves its file again, then takes nSnaps snapshots of
// one volume whose snapshot directory is exported.
func runScale(basin string, nVols, nSnaps int, logLevel string) scaleResult {
	res := scaleResult{Volumes: nVols, Snapshots: nSnaps}
	dataDir, err := os.MkdirTemp("", "basin-scale-")
	if err != nil {
		fatalf("%v", err)
	}
	atExit(func() { os.RemoveAll(dataDir) })
	addr := freeAddr()
	var cmd *exec.Cmd
	// 1,000 thin volumes start with 64 MiB each (the smallest --thin-initial):
	// 62.5 GiB of a 68 GiB store, which keeps no reserve.
	start := func(extra ...string) time.Time {
		cmd = exec.Command(basin, append([]string{"serve", "--data-dir", dataDir, "--listen", addr, "--store-size", "68G", "--store-reserve", "none", "--thin-initial", "64M", "--log-level", logLevel,
			"--overcommit-ratio", "10000", "--network", "default=" + scaleBridge + "," + scaleCIDR}, extra...)...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		t := time.Now()
		if err := cmd.Start(); err != nil {
			fatalf("%v", err)
		}
		return t
	}
	stop := func() time.Duration {
		t := time.Now()
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		return time.Since(t)
	}
	start()
	atExit(func() {
		stop()
		// The data plane outlives the server: take it down.
		exec.Command(basin, "teardown", "--data-dir", dataDir, "--network", "default="+scaleBridge+","+scaleCIDR).Run()
	})
	waitReady(addr)
	c, err := client.New("http://"+addr, filepath.Join(dataDir, "owner-key.json"))
	if err != nil {
		fatalf("%v", err)
	}
	ctx := context.Background()
	must(mutate(ctx, c, "POST", loc+"/storagePools?storagePoolId=pool", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 100000,
		"network": "projects/bench/global/networks/default"}))
	fp := &footprint{Before: readHostCounts()}
	res.Footprint = fp
	open := map[string]any{"rules": []any{map[string]any{"allowedClients": scaleHost, "accessType": "READ_WRITE", "nfsv3": true, "hasRootAccess": "true"}}}
	ids := make([]string, nVols)
	for i := range nVols {
		ids[i] = fmt.Sprintf("s%04d", i)
		body := map[string]any{"shareName": ids[i], "storagePool": "pool", "capacityGib": 1, "protocols": []string{"NFSV3"}, "exportPolicy": open}
		res.CreateMillis = append(res.CreateMillis, timed(func() error { return mutate(ctx, c, "POST", loc+"/volumes?volumeId="+ids[i], body) }))
		if (i+1)%100 == 0 {
			log.Printf("scale: %d volumes, last create %.0f ms", i+1, res.CreateMillis[i])
		}
	}
	for range 5 {
		res.ListMillis = append(res.ListMillis, timed(func() error {
			n, err := listAll(ctx, c)
			if err == nil && n != nVols {
				err = fmt.Errorf("listed %d volumes, want %d", n, nVols)
			}
			return err
		}))
	}
	endpoints := writeHellos(ctx, c, dataDir, ids)
	syscall.Sync()
	fp.After = readHostCounts()
	allServing(ids, endpoints, 3*time.Minute)
	fp.Neighbours = neighbours(scaleBridge)
	log.Printf("scale: footprint of %d volumes: unreclaimable slab %+d KiB, kernel threads %+d, tasks %+d, loop devices %+d, host neighbours on the bridge %d",
		nVols, fp.After.SUnreclaimKiB-fp.Before.SUnreclaimKiB, fp.After.KernelThreads-fp.Before.KernelThreads,
		fp.After.Tasks-fp.Before.Tasks, fp.After.LoopDevices-fp.Before.LoopDevices, fp.Neighbours)

	// Restarts: a clean stop and a SIGKILL leave the data plane serving (the
	// next start adopts it), the cold restart takes it down and builds it.
	pr := startProbe(endpoints[ids[0]], ids[0])
	kill := func() time.Duration {
		t := time.Now()
		cmd.Process.Kill()
		cmd.Wait()
		return time.Since(t)
	}
	for _, kind := range []string{"stop", "kill", "teardown"} {
		var stopped time.Duration
		switch kind {
		case "stop":
			stopped = stop()
		case "kill":
			stopped = kill()
		case "teardown":
			// Run once with --teardown-on-exit, then stop: the cold start follows.
			stop()
			start("--teardown-on-exit")
			waitReadyFor(addr, 10*time.Minute)
			allServing(ids, endpoints, 3*time.Minute)
			stopped = stop()
		}
		pr.reset()
		t0 := start()
		waitReadyFor(addr, 10*time.Minute)
		ready := time.Since(t0)
		allServing(ids, endpoints, 3*time.Minute)
		serving := time.Since(t0)
		time.Sleep(time.Second)
		failures, pause := pr.reset()
		r := restartResult{Kind: kind, StopSeconds: stopped.Seconds(), ReadySeconds: ready.Seconds(), ServingSeconds: serving.Seconds(),
			ProbeFailures: failures, LongestPauseMillis: float64(pause) / float64(time.Millisecond)}
		res.Restarts = append(res.Restarts, r)
		log.Printf("scale: restart after %s: stop %.1f s, ready after %.1f s, every export serving after %.1f s; probe: %d failed reads, longest pause %.0f ms",
			kind, r.StopSeconds, r.ReadySeconds, r.ServingSeconds, r.ProbeFailures, r.LongestPauseMillis)
		if kind == "teardown" {
			res.StopSeconds, res.ReadySeconds, res.ServingSeconds = r.StopSeconds, r.ReadySeconds, r.ServingSeconds
		}
	}
	pr.close()

	snapVol := map[string]any{"shareName": "snaps", "storagePool": "pool", "capacityGib": 1, "protocols": []string{"NFSV3"}, "exportPolicy": open,
		"snapshotDirectory": true}
	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId=snaps", snapVol))
	for i := range nSnaps {
		res.SnapshotMillis = append(res.SnapshotMillis, timed(func() error {
			return mutate(ctx, c, "POST", fmt.Sprintf("%s/volumes/snaps/snapshots?snapshotId=n%03d", loc, i), map[string]any{})
		}))
	}
	return res
}

// listAll lists every volume, a page of 1,000 at a time, and counts them.
func listAll(ctx context.Context, c *client.Client) (int, error) {
	n, token := 0, ""
	for {
		q := url.Values{"pageSize": {"1000"}}
		if token != "" {
			q.Set("pageToken", token)
		}
		var page client.Object
		if err := c.Do(ctx, http.MethodGet, loc+"/volumes", q, nil, &page); err != nil {
			return n, err
		}
		vols, _ := page["volumes"].([]any)
		n += len(vols)
		token, _ = page["nextPageToken"].(string)
		if token == "" {
			return n, nil
		}
	}
}

// writeHellos writes a file naming the volume into each volume (through its mount
// point on the host) and returns each volume's endpoint.
func writeHellos(ctx context.Context, c *client.Client, dataDir string, ids []string) map[string]string {
	st, err := store.OpenSQLite(ctx, filepath.Join(dataDir, "basin.db"))
	if err != nil {
		fatalf("%v", err)
	}
	defer st.Close()
	endpoints := map[string]string{}
	err = st.View(ctx, func(tx store.Tx) error {
		for _, id := range ids {
			v, err := store.Get[model.Volume](tx, store.KindVolume, strings.TrimPrefix(loc, "/v1/")+"/volumes/"+id)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dataDir, "mounts", v.Key, "hello"), []byte("hello "+id), 0o644); err != nil {
				return err
			}
			endpoints[id] = v.Endpoint
		}
		return nil
	})
	if err != nil {
		fatalf("write hellos: %v", err)
	}
	return endpoints
}

// allServing waits until every volume's export serves its hello file to an NFSv3
// client on the host, checking the volumes side by side.
func allServing(ids []string, endpoints map[string]string, limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	var mu sync.Mutex
	var failed []string
	for _, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var last error
			for ctx.Err() == nil {
				if last = readHello(ctx, endpoints[id], id); last == nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			mu.Lock()
			failed = append(failed, fmt.Sprintf("%s: %v", id, last))
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		fatalf("%d volumes not serving after %s, e.g. %s", len(failed), limit, failed[0])
	}
}

// probe reads one volume's hello file over one NFSv3 connection, again and
// again, counting failed reads (after one, it mounts again) and the longest
// time between two reads that succeeded.
type probe struct {
	mu       sync.Mutex
	failures int
	last     time.Time
	longest  time.Duration
	stop     chan struct{}
	done     chan struct{}
}

func startProbe(endpoint, id string) *probe {
	p := &probe{stop: make(chan struct{}), done: make(chan struct{}), last: time.Now()}
	go func() {
		defer close(p.done)
		var cl *nfs3.Client
		var fh []byte
		buf := make([]byte, 64)
		for {
			select {
			case <-p.stop:
				if cl != nil {
					cl.Close()
				}
				return
			case <-time.After(20 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := error(nil)
			if cl == nil {
				if cl, err = nfs3.Mount(ctx, endpoint, "/"+id, nfs3.Options{}); err == nil {
					fh, _, err = cl.Lookup(ctx, cl.Root, "hello")
				}
			}
			if err == nil {
				var n int
				n, _, err = cl.Read(ctx, fh, buf, 0)
				if err == nil && string(buf[:n]) != "hello "+id {
					err = fmt.Errorf("read %q", buf[:n])
				}
			}
			cancel()
			p.mu.Lock()
			if err != nil {
				p.failures++
				if cl != nil {
					cl.Close()
					cl = nil
				}
			} else {
				now := time.Now()
				p.longest = max(p.longest, now.Sub(p.last))
				p.last = now
			}
			p.mu.Unlock()
			if err != nil {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	return p
}

// reset returns what the probe saw since the last reset and starts again.
func (p *probe) reset() (failures int, longest time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	failures, longest = p.failures, max(p.longest, time.Since(p.last))
	p.failures, p.longest = 0, 0
	return failures, longest
}

func (p *probe) close() {
	close(p.stop)
	<-p.done
}

func readHello(ctx context.Context, endpoint, id string) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cl, err := nfs3.Mount(cctx, endpoint, "/"+id, nfs3.Options{})
	if err != nil {
		return err
	}
	defer cl.Close()
	fh, _, err := cl.Lookup(cctx, cl.Root, "hello")
	if err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, _, err := cl.Read(cctx, fh, buf, 0)
	if err != nil {
		return err
	}
	if got := string(buf[:n]); got != "hello "+id {
		return fmt.Errorf("read %q", got)
	}
	return nil
}

// window is the median of v[i-w/2 : i+w/2], clipped to v.
func window(v []float64, i, w int) float64 {
	lo, hi := max(0, i-w/2), min(len(v), i+w/2)
	if lo >= hi {
		return 0
	}
	return median(v[lo:hi])
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func (s *scaleResult) markdown(date string) string {
	var b strings.Builder
	n := len(s.CreateMillis)
	fmt.Fprintf(&b, "Measured %s on the same machine: one server, one pool, %d volumes of 1 GiB created one after another, each its own btrfs filesystem served over NFSv3 (the resync runs every 30 s beside the operations).\n\n", date, s.Volumes)
	b.WriteString("| what | measured | target |\n|---|---|---|\n")
	c10, cN := window(s.CreateMillis, 9, 20), window(s.CreateMillis, n-1, 40)
	fmt.Fprintf(&b, "| create→READY, median around the 10th volume | %.0f ms | |\n", c10)
	fmt.Fprintf(&b, "| create→READY, median of the last 20 (around the %dth) | %.0f ms | |\n", n, cN)
	fmt.Fprintf(&b, "| **ratio %dth / 10th** | **%.2f** | ≤ 2 |\n", n, cN/c10)
	fmt.Fprintf(&b, "| slowest create of all %d (a create that waited for a resync pass would show it) | %.0f ms | |\n", n, maxOf(s.CreateMillis))
	fmt.Fprintf(&b, "| full listing of %d volumes (pages of 1,000), median of %d | %.0f ms | < 100 ms |\n", s.Volumes, len(s.ListMillis), median(s.ListMillis))
	if fp := s.Footprint; fp != nil && s.Volumes > 0 {
		per := func(a, b int64) float64 { return float64(b-a) / float64(s.Volumes) }
		fmt.Fprintf(&b, "| host cost per volume: unreclaimable kernel memory (SUnreclaim) | %.1f MiB | |\n", per(fp.Before.SUnreclaimKiB, fp.After.SUnreclaimKiB)/1024)
		fmt.Fprintf(&b, "| host cost per volume: kernel threads (loop device, btrfs workers) | %.1f | |\n", per(int64(fp.Before.KernelThreads), int64(fp.After.KernelThreads)))
		fmt.Fprintf(&b, "| host cost per volume: tasks (each takes a pid) | %.1f | |\n", per(int64(fp.Before.Tasks), int64(fp.After.Tasks)))
		fmt.Fprintf(&b, "| host cost per volume: loop devices | %.1f | |\n", per(int64(fp.Before.LoopDevices), int64(fp.After.LoopDevices)))
		fmt.Fprintf(&b, "| neighbour (ARP) entries of one client that read every volume | %d | |\n", fp.Neighbours)
	}
	for _, r := range s.Restarts {
		what := map[string]string{"stop": "clean stop (SIGTERM), data plane left serving, start adopts it",
			"kill":     "SIGKILL, data plane left serving, start adopts it",
			"teardown": "stop with --teardown-on-exit (every export and filesystem taken down), cold start"}[r.Kind]
		fmt.Fprintf(&b, "| %s: stop | %.1f s | |\n", what, r.StopSeconds)
		fmt.Fprintf(&b, "| %s: process start → /readyz | %.1f s | |\n", what, r.ReadySeconds)
		target := ""
		if r.Kind == "teardown" {
			target = "< 10 s"
		}
		fmt.Fprintf(&b, "| **%s: process start → every export serving its data** (an NFSv3 client reads a file from each) | **%.1f s** | %s |\n", what, r.ServingSeconds, target)
		target = ""
		if r.Kind != "teardown" {
			target = "0 failed"
		}
		fmt.Fprintf(&b, "| %s: a client reading one volume throughout: failed reads, longest pause | %d, %.0f ms | %s |\n", what, r.ProbeFailures, r.LongestPauseMillis, target)
	}
	if len(s.Restarts) == 0 {
		fmt.Fprintf(&b, "| stop (every export and filesystem taken down) | %.1f s | |\n", s.StopSeconds)
		fmt.Fprintf(&b, "| restart: process start → /readyz | %.1f s | |\n", s.ReadySeconds)
		fmt.Fprintf(&b, "| **restart: process start → every export serving its data** (an NFSv3 client reads a file from each) | **%.1f s** | < 10 s |\n", s.ServingSeconds)
	}
	m := len(s.SnapshotMillis)
	if m > 0 {
		s1, sN := window(s.SnapshotMillis, 2, 5), window(s.SnapshotMillis, m-1, 10)
		fmt.Fprintf(&b, "| snapshot create→READY, 1st (median of the first 5), snapshot directory exported | %.1f ms | |\n", s1)
		fmt.Fprintf(&b, "| snapshot create→READY, %dth (median of the last 5) | %.1f ms | |\n", m, sN)
		fmt.Fprintf(&b, "| **ratio %dth / 1st** | **%.2f** | ≤ 2 |\n", m, sN/s1)
	}
	return b.String()
}
