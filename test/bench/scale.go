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
	// StopSeconds is how long the server took to stop (unexport, unmount all).
	StopSeconds float64 `json:"stopSeconds"`
	// ReadySeconds is from the restarted process's start to /readyz answering 200;
	// ServingSeconds to every volume's export serving the file written in it.
	ReadySeconds, ServingSeconds float64
	Snapshots                    int       `json:"snapshots"`
	SnapshotMillis               []float64 `json:"snapshotMillis"`
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
	start := func() time.Time {
		cmd = exec.Command(basin, "serve", "--data-dir", dataDir, "--listen", addr, "--store-size", "64G", "--thin-initial", "64M", "--log-level", logLevel,
			"--overcommit-ratio", "10000", "--network", "default="+scaleBridge+","+scaleCIDR)
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
	atExit(func() { stop() })
	waitReady(addr)
	c, err := client.New("http://"+addr, filepath.Join(dataDir, "owner-key.json"))
	if err != nil {
		fatalf("%v", err)
	}
	ctx := context.Background()
	must(mutate(ctx, c, "POST", loc+"/storagePools?storagePoolId=pool", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 100000,
		"network": "projects/bench/global/networks/default"}))
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

	res.StopSeconds = stop().Seconds()
	log.Printf("scale: stopped in %.1f s; restarting", res.StopSeconds)
	t0 := start()
	waitReadyFor(addr, 10*time.Minute)
	res.ReadySeconds = time.Since(t0).Seconds()
	allServing(ids, endpoints, 3*time.Minute)
	res.ServingSeconds = time.Since(t0).Seconds()
	log.Printf("scale: restart: ready after %.1f s, every export serving after %.1f s (stop took %.1f s)", res.ReadySeconds, res.ServingSeconds, res.StopSeconds)

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
	fmt.Fprintf(&b, "| stop (every export and filesystem taken down) | %.1f s | |\n", s.StopSeconds)
	fmt.Fprintf(&b, "| restart: process start → /readyz | %.1f s | |\n", s.ReadySeconds)
	fmt.Fprintf(&b, "| **restart: process start → every export serving its data** (an NFSv3 client reads a file from each) | **%.1f s** | < 10 s |\n", s.ServingSeconds)
	m := len(s.SnapshotMillis)
	if m > 0 {
		s1, sN := window(s.SnapshotMillis, 2, 5), window(s.SnapshotMillis, m-1, 10)
		fmt.Fprintf(&b, "| snapshot create→READY, 1st (median of the first 5), snapshot directory exported | %.1f ms | |\n", s1)
		fmt.Fprintf(&b, "| snapshot create→READY, %dth (median of the last 5) | %.1f ms | |\n", m, sN)
		fmt.Fprintf(&b, "| **ratio %dth / 1st** | **%.2f** | ≤ 2 |\n", m, sN/s1)
	}
	return b.String()
}
