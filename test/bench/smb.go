package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/bench"
	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/test/sambatest"
)

// protections are the SMB protection levels measured, each against "off".
var protections = []string{"off", "sign", "encrypt"}

// runSMB measures basin bench --engine smb against a bare Samba sharing a Basin
// volume's directory on loopback, with no protection, signing and encryption,
// interleaved.
func runSMB(ctx context.Context, c *client.Client, dataDir string, runs int, secs float64) []patternResult {
	open := map[string]any{"rules": []any{map[string]any{"allowedClients": "10.99.251.1", "accessType": "READ_WRITE", "nfsv3": true, "hasRootAccess": "true"}}}
	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId=smbbench", map[string]any{"shareName": "smbbench", "storagePool": "pool",
		"capacityGib": 8, "protocols": []string{"NFSV3"}, "unixPermissions": "0777", "exportPolicy": open}))
	_, portStr, _ := net.SplitHostPort(freeAddr())
	port, _ := strconv.Atoi(portStr)
	const password = "bench-Pa55"
	srv, err := sambatest.Start(filepath.Join(dataDir, "bare-samba"), mountOf(dataDir, "smbbench"), port, password)
	if err != nil {
		fatalf("%v", err)
	}
	atExit(srv.Stop)
	var out []patternResult
	for _, p := range patterns {
		r := patternResult{Pattern: p.Name}
		samples := map[string][][2]float64{}
		for range runs {
			for _, prot := range protections {
				m, i := basinBenchSMB(ctx, port, password, prot, p, secs)
				samples[prot] = append(samples[prot], [2]float64{m, i})
			}
		}
		r.MiBps, r.IOPS = medians(samples)
		log.Printf("smb %s: off %.0f MiB/s %.0f IOPS, sign %.0f MiB/s %.0f IOPS, encrypt %.0f MiB/s %.0f IOPS", p.Name,
			r.MiBps["off"], r.IOPS["off"], r.MiBps["sign"], r.IOPS["sign"], r.MiBps["encrypt"], r.IOPS["encrypt"])
		out = append(out, r)
	}
	return out
}

// basinBenchSMB runs one pattern on one connection. Reads read a file of their own
// that the engine lays out once; writes go to a file per pattern.
func basinBenchSMB(ctx context.Context, port int, password, prot string, p pattern, secs float64) (mibps, iops float64) {
	share, name := "bench", "sb-read"
	if prot == "encrypt" {
		share = "benchenc"
	}
	if p.RW == "write" || p.RW == "randwrite" {
		name = "sb-" + p.RW
	}
	e := &bench.SMB{URL: fmt.Sprintf("smb://127.0.0.1:%d/%s", port, share), User: "root", Password: password, Protection: prot, Channels: 1}
	defer e.Close()
	res, err := bench.Run(ctx, e, bench.Job{Name: name, RW: p.RW, BS: int64(p.BS), IODepth: p.QD, NumJobs: 1, NrFiles: 1,
		Size: fileSize, Runtime: time.Duration(secs * float64(time.Second)), TimeBased: true}, nil)
	if err != nil {
		fatalf("basin bench smb %s %s: %v", prot, p.Name, err)
	}
	if prot == "encrypt" && !e.Encrypted() {
		fatalf("basin bench smb: the encrypt run was not encrypted")
	}
	var buf strings.Builder
	if err := res.WriteJSON(&buf); err != nil {
		fatalf("%v", err)
	}
	return fioRate("basin bench", []byte(buf.String()))
}
