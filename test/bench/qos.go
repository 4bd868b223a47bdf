package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/bench"
	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// qosResult is the service-level section (issue 11, criterion 5): what clients get
// at three limits, and what shaping costs when limits sit far above demand.
type qosResult struct {
	Limits []qosLimit `json:"limits"`
	// Cost holds the NFS patterns through a volume of a server with QoS on (limits
	// far above demand: target "on") and of one with --qos=false ("off").
	Cost []patternResult `json:"cost"`
}

// qosLimit is one limit and direction: the client payload of each run (MiB/s).
type qosLimit struct {
	Volume string    `json:"volume"`
	Limit  float64   `json:"limitMibps"`
	Dir    string    `json:"dir"`
	Runs   []float64 `json:"runsMibps"`
	Median float64   `json:"medianMibps"`
}

// qosServer is a basin serve of the section's own.
type qosServer struct {
	c       *client.Client
	dataDir string
	host    string // the bridge's address on the host: clients run in the host namespace
}

const qosLoc = "/v1/projects/qos/locations/local"

// startQoSServer starts a server on a bridge of its own; extra flags follow the
// defaults.
func startQoSServer(basin, bridge string, subnet int, extra ...string) *qosServer {
	dataDir, err := os.MkdirTemp("", "basin-qos-")
	if err != nil {
		fatalf("%v", err)
	}
	atExit(func() { os.RemoveAll(dataDir) })
	c := serveBasin(basin, dataDir, freeAddr(), append([]string{"--store-size", "16G", "--log-level", "warn",
		"--overcommit-ratio", "100000", "--location", "local", "--network", fmt.Sprintf("default=%s,10.99.%d.0/24", bridge, subnet)}, extra...)...)
	return &qosServer{c: c, dataDir: dataDir, host: fmt.Sprintf("10.99.%d.1", subnet)}
}

// volume creates an NFSv3 volume the host may use, and returns its endpoint and its
// mount point on the server.
func (s *qosServer) volume(ctx context.Context, id, pool string, gib int, extra map[string]any) (ep, dir string) {
	open := map[string]any{"rules": []any{map[string]any{"allowedClients": s.host, "accessType": "READ_WRITE", "nfsv3": true, "hasRootAccess": "true"}}}
	body := map[string]any{"shareName": id, "storagePool": pool, "capacityGib": gib, "protocols": []string{"NFSV3"}, "unixPermissions": "0777", "exportPolicy": open}
	for k, v := range extra {
		body[k] = v
	}
	must(mutate(ctx, s.c, "POST", qosLoc+"/volumes?volumeId="+id, body))
	st, err := store.OpenSQLite(ctx, filepath.Join(s.dataDir, "basin.db"))
	if err != nil {
		fatalf("%v", err)
	}
	defer st.Close()
	var v *model.Volume
	must(st.View(ctx, func(tx store.Tx) (err error) {
		v, err = store.Get[model.Volume](tx, store.KindVolume, strings.TrimPrefix(qosLoc, "/v1/")+"/volumes/"+id)
		return err
	}))
	return v.Endpoint, filepath.Join(s.dataDir, "mounts", v.Key)
}

func (s *qosServer) pool(ctx context.Context, id, level string, gib int) {
	must(mutate(ctx, s.c, "POST", qosLoc+"/storagePools?storagePoolId="+id, map[string]any{"serviceLevel": level, "capacityGib": gib,
		"network": "projects/qos/global/networks/default"}))
}

// The limits measured: Standard, Premium and Extreme volumes of 1 TiB (16, 64 and
// 128 MiB/s). Writes on btrfs-on-loop top out around 120–180 MiB/s here, so 128 is
// the largest limit both directions saturate.
var qosLimits = []struct {
	level string
	limit float64
}{{"STANDARD", 16}, {"PREMIUM", 64}, {"EXTREME", 128}}

// runQoS measures the section on two servers of its own: one with Basin's
// defaults (QoS on) and one with --qos=false.
func runQoS(ctx context.Context, basin string, rounds int, secs float64) qosResult {
	var res qosResult
	on := startQoSServer(basin, "bqeon0", 253)
	for _, l := range qosLimits {
		id := strings.ToLower(l.level)
		on.pool(ctx, id, l.level, 1024)
		ep, dir := on.volume(ctx, id, id, 1024, nil)
		layOutReads(dir)
		for _, rw := range []string{"read", "write"} {
			r := qosLimit{Volume: l.level + " 1 TiB", Limit: l.limit, Dir: rw}
			for range rounds {
				r.Runs = append(r.Runs, qosLoad(ctx, "nfs://"+ep+"/"+id, rw, l.limit, secs))
			}
			r.Median = median(r.Runs)
			log.Printf("qos %s %s: %.2f MiB/s of %.0f (%.3f), runs %v", r.Volume, rw, r.Median, l.limit, r.Median/l.limit, r.Runs)
			res.Limits = append(res.Limits, r)
		}
	}
	res.Cost = runQoSCost(ctx, basin, on, rounds, secs)
	return res
}

// Read loads read files of readSize each that are laid out on the server first
// (laying them out through a 16 MiB/s shaper would take long).
const (
	qosReadJobs = 4
	qosReadSize = 16 << 20
)

func layOutReads(dir string) {
	buf := make([]byte, qosReadSize)
	for i := range buf {
		buf[i] = byte(i * 31)
	}
	for n := range qosReadJobs {
		must(os.WriteFile(filepath.Join(dir, fmt.Sprintf("qr.%d.0", n)), buf, 0o644))
	}
}

// qosLoad saturates a volume with `basin bench --engine nfs`'s engine and returns
// the client payload in MiB/s: reads 4 jobs × qd 8 × 256 KiB, writes 8 jobs × qd
// limit/8 × 256 KiB (enough outstanding I/O to fill the limit: docs/architecture.md,
// "HTB's traps, built in"), each job on a connection of its own; 1 s of ramp for
// reads, 2 s for writes, which settle later.
func qosLoad(ctx context.Context, url, rw string, limit, secs float64) float64 {
	j := bench.Job{Name: "qr", RW: rw, BS: 256 << 10, IODepth: 8, NumJobs: qosReadJobs, NrFiles: 1, Size: qosReadSize,
		Runtime: time.Duration(secs * float64(time.Second)), TimeBased: true, Ramp: time.Second}
	if rw == "write" {
		j.Name, j.NumJobs, j.IODepth, j.Size, j.Ramp = "qw", 8, min(max(int(limit/8), 2), 16), 32<<20, 2*time.Second
	}
	e := &bench.NFS{URL: url, Conns: j.NumJobs}
	defer e.Close()
	res, err := bench.Run(ctx, e, j, nil)
	if err != nil {
		fatalf("qos %s %s: %v", url, rw, err)
	}
	var buf strings.Builder
	must(res.WriteJSON(&buf))
	mibps, _ := fioRate("basin bench", []byte(buf.String()))
	return mibps
}

// runQoSCost runs the NFS patterns through a volume of the QoS server whose limit
// sits far above demand (4,500 MiB/s, the largest a volume may have, assigned in a
// MANUAL Extreme pool), through the same on a server that lets pure ACKs pass the
// shaper by (--qos-pass-acks) and through a volume of a server with --qos=false, runs
// rotating, with nfs-bench (libnfs, one connection).
func runQoSCost(ctx context.Context, basin string, on *qosServer, rounds int, secs float64) []patternResult {
	off := startQoSServer(basin, "bqeoff0", 254, "--qos=false")
	acks := startQoSServer(basin, "bqeack0", 249, "--qos-pass-acks")
	nb := buildNFSBench()
	urls := map[string]string{}
	for name, s := range map[string]*qosServer{"on": on, "off": off, "acks": acks} {
		must(mutate(ctx, s.c, "POST", qosLoc+"/storagePools?storagePoolId=big", map[string]any{"serviceLevel": "EXTREME",
			"capacityGib": 36 * 1024, "qosType": "MANUAL", "network": "projects/qos/global/networks/default"}))
		ep, _ := s.volume(ctx, "cost", "big", 32, map[string]any{"throughputMibps": 4500})
		urls[name] = fmt.Sprintf("nfs://%s/cost/f.dat?version=3", ep)
	}
	var v client.Object
	must(on.c.Do(ctx, "GET", qosLoc+"/volumes/cost", nil, nil, &v))
	log.Printf("qos cost: the QoS-on volume's limit is %v MiB/s", v["throughputMibps"])
	fill := pattern{Name: "fill", RW: "fill", BS: 1 << 20, QD: 8}
	names := []string{"on", "acks", "off"}
	for _, name := range names {
		nfsBench(nb, urls[name], fill, secs)
	}
	var out []patternResult
	for _, p := range patterns {
		samples := map[string][][2]float64{}
		interleave(rounds, len(names), func(k int) {
			m, i := nfsBench(nb, urls[names[k]], p, secs)
			samples[names[k]] = append(samples[names[k]], [2]float64{m, i})
		})
		r := patternResult{Pattern: p.Name}
		r.MiBps, r.IOPS = medians(samples)
		log.Printf("qos cost %s: on %.0f MiB/s %.0f IOPS, on with pure ACKs passing by %.0f MiB/s %.0f IOPS, off %.0f MiB/s %.0f IOPS", p.Name,
			r.MiBps["on"], r.IOPS["on"], r.MiBps["acks"], r.IOPS["acks"], r.MiBps["off"], r.IOPS["off"])
		out = append(out, r)
	}
	return out
}

// markdown renders the section.
func (r qosResult) markdown(date string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on the same machine; client payload of `basin bench --engine nfs`'s engine from the host, median of %d runs each.\n\n", date, len(r.Limits[0].Runs))
	b.WriteString("| volume | limit | direction | achieved (median) | achieved / limit | runs |\n|---|---|---|---|---|---|\n")
	for _, l := range r.Limits {
		runs := make([]string, len(l.Runs))
		for i, x := range l.Runs {
			runs[i] = fmt.Sprintf("%.2f", x)
		}
		fmt.Fprintf(&b, "| %s | %.0f MiB/s | %s | %.2f MiB/s | %.3f | %s |\n", l.Volume, l.Limit, l.Dir, l.Median, l.Median/l.Limit, strings.Join(runs, " / "))
	}
	if len(r.Cost) > 0 {
		b.WriteString("\nThe data path with QoS on (a volume whose limit, 4,500 MiB/s, sits far above demand), with QoS on and pure ACKs passing the shaper by (`--qos-pass-acks`) and off (`--qos=false`): three servers side by side, runs rotating, NFSv3 over one connection (nfs-bench), medians:\n\n")
		b.WriteString("| workload | QoS on | QoS on, ACKs pass by | QoS off | on / off | ACKs pass by / off |\n|---|---|---|---|---|---|\n")
		for _, x := range r.Cost {
			unit, get := x.headline()
			fmt.Fprintf(&b, "| %s | %.0f %s | %.0f %s | %.0f %s | %.2f | %.2f |\n", x.Pattern, get["on"], unit, get["acks"], unit, get["off"], unit,
				get["on"]/get["off"], get["acks"]/get["off"])
		}
	}
	return b.String()
}
