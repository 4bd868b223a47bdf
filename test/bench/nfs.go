package main

import (
	"context"
	_ "embed" // csrc/nfsbench.c
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/basin-nas/basin/internal/bench"
	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/mountinfo"
)

//go:embed csrc/nfsbench.c
var nfsBenchSource []byte

// pattern is one measured workload.
type pattern struct {
	Name string
	RW   string // nfs-bench / fio rw
	BS   int
	QD   int
}

var patterns = []pattern{
	{"seq write 1 MiB, qd 8", "write", 1 << 20, 8},
	{"seq read 1 MiB, qd 8", "read", 1 << 20, 8},
	{"rand read 4 KiB, qd 16", "randread", 4 << 10, 16},
	{"rand write 4 KiB, qd 16", "randwrite", 4 << 10, 16},
}

// patternResult is one pattern's medians per target (or SMB protection level), in
// MiB/s and IOPS.
type patternResult struct {
	Pattern string             `json:"pattern"`
	MiBps   map[string]float64 `json:"mibps"`
	IOPS    map[string]float64 `json:"iops"`
	// Samples are the runs behind the medians, per target: (MiB/s, IOPS) each.
	Samples map[string][][2]float64 `json:"samples,omitempty"`
}

// headline is the figure a table shows for the pattern: IOPS for 4 KiB I/O,
// MiB/s otherwise.
func (r patternResult) headline() (unit string, per map[string]float64) {
	if strings.Contains(r.Pattern, "4 KiB") {
		return "IOPS", r.IOPS
	}
	return "MiB/s", r.MiBps
}

const fileSize = 1 << 30

// runNFS measures NFSv3 through a Basin volume, through a bare Ganesha exporting the
// same directory from a namespace on the same bridge, and fio on that directory,
// side by side.
// only, if not empty, is a comma-separated subset of the targets; profileDir, if not
// empty, receives a CPU profile of every basin bench run.
func runNFS(ctx context.Context, c *client.Client, dataDir, bridgeHost string, runs int, secs float64, only, profileDir string) []patternResult {
	bench := buildNFSBench()
	open := map[string]any{"rules": []any{map[string]any{"allowedClients": bridgeHost, "accessType": "READ_WRITE", "nfsv3": true, "hasRootAccess": "true"}}}
	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId=nfsbench", map[string]any{"shareName": "nfsbench", "storagePool": "pool",
		"capacityGib": 32, "protocols": []string{"NFSV3"}, "unixPermissions": "0777", "exportPolicy": open}))
	var v client.Object
	must(c.Do(ctx, "GET", loc+"/volumes/nfsbench", nil, nil, &v))
	ep := v["mountOptions"].([]any)[0].(map[string]any)["ipAddress"].(string)
	mount := mountOf(dataDir, "nfsbench")
	// The previous layout, for comparison: a subvolume of the shared store
	// filesystem on a mount point of its own, as Basin kept volumes before each
	// had a filesystem of its own.
	legacy := legacyVolume(dataDir)

	stopBare := startBareGanesha(dataDir, mount, legacy)
	atExit(stopBare)

	type target struct {
		name string
		run  func(p pattern, file string) (mibps, iops float64)
	}
	round := map[string]int{} // basin bench runs so far, per pattern (profile names)
	all := []target{
		{"basin", func(p pattern, file string) (float64, float64) {
			return nfsBench(bench, fmt.Sprintf("nfs://%s/nfsbench/%s?version=3", ep, file), p, secs)
		}},
		{"bare", func(p pattern, file string) (float64, float64) {
			return nfsBench(bench, fmt.Sprintf("nfs://%s/bare/%s?version=3&nfsport=12049&mountport=12048", bareAddr, file), p, secs)
		}},
		{"legacy", func(p pattern, file string) (float64, float64) {
			return nfsBench(bench, fmt.Sprintf("nfs://%s/legacy/%s?version=3&nfsport=12049&mountport=12048", bareAddr, file), p, secs)
		}},
		{"local", func(p pattern, file string) (float64, float64) { return fio(filepath.Join(mount, file), p, secs) }},
		{"legacy-local", func(p pattern, file string) (float64, float64) { return fio(filepath.Join(legacy, file), p, secs) }},
		{"bbench", func(p pattern, _ string) (float64, float64) {
			profile := ""
			if profileDir != "" {
				round[p.RW]++
				profile = filepath.Join(profileDir, fmt.Sprintf("bbench-%s-%d.pprof", p.RW, round[p.RW]))
			}
			return basinBenchNFS(ctx, "nfs://"+ep+"/nfsbench", p, secs, profile)
		}},
	}
	var targets []target
	for _, t := range all {
		if only == "" || slices.Contains(strings.Split(only, ","), t.name) {
			targets = append(targets, t)
		}
	}
	if len(targets) == 0 {
		fatalf("-nfs-targets %q names none of %v", only, nfsTargetNames)
	}
	// The read patterns read the files the write pattern writes: make them whole first.
	fill := pattern{Name: "fill", RW: "fill", BS: 1 << 20, QD: 8}
	for _, t := range targets {
		if t.name == "basin" || t.name == "bare" || t.name == "legacy" {
			t.run(fill, t.name+".dat")
		}
	}
	var out []patternResult
	for _, p := range patterns {
		r := patternResult{Pattern: p.Name}
		samples := map[string][][2]float64{}
		interleave(runs, len(targets), func(k int) {
			t := targets[k]
			m, i := t.run(p, t.name+".dat")
			samples[t.name] = append(samples[t.name], [2]float64{m, i})
		})
		r.MiBps, r.IOPS = medians(samples)
		r.Samples = samples
		log.Printf("%s: basin %.0f MiB/s %.0f IOPS, bare %.0f MiB/s %.0f IOPS, previous layout %.0f MiB/s %.0f IOPS, local %.0f MiB/s %.0f IOPS, basin bench %.0f MiB/s %.0f IOPS", p.Name,
			r.MiBps["basin"], r.IOPS["basin"], r.MiBps["bare"], r.IOPS["bare"], r.MiBps["legacy"], r.IOPS["legacy"], r.MiBps["local"], r.IOPS["local"], r.MiBps["bbench"], r.IOPS["bbench"])
		out = append(out, r)
	}
	return out
}

// nfsTargetNames are runNFS's targets, all of which the NFS tables need.
var nfsTargetNames = []string{"basin", "bare", "legacy", "local", "legacy-local", "bbench"}

// nfsComplete says whether a pattern was measured on every target (not with a
// subset given to -nfs-targets).
func nfsComplete(r patternResult) bool {
	for _, n := range nfsTargetNames {
		if _, ok := r.MiBps[n]; !ok {
			return false
		}
	}
	return true
}

// interleave makes rounds of runs of n targets: each round runs every target once,
// starting one target further than the round before, so that noise hits every
// target alike and no target always runs after the same one. Every run starts
// with the machine's dirty data written back (sync), so no run pays for the
// writeback of the run before it.
func interleave(rounds, n int, run func(target int)) {
	for r := range rounds {
		for i := range n {
			syscall.Sync()
			run((r + i) % n)
		}
	}
}

// medians takes per-target samples of (MiB/s, IOPS) to per-target medians.
func medians(samples map[string][][2]float64) (mibps, iops map[string]float64) {
	mibps, iops = map[string]float64{}, map[string]float64{}
	for name, s := range samples {
		var ms, is []float64
		for _, x := range s {
			ms, is = append(ms, x[0]), append(is, x[1])
		}
		mibps[name], iops[name] = median(ms), median(is)
	}
	return mibps, iops
}

// basinBenchNFS runs the pattern with basin bench's own NFS engine (one connection,
// like the libnfs helper) on the Basin volume. Reads read a file of their own that
// the engine lays out once; writes are unstable, as libnfs's are.
// With profile set, the run's CPU profile goes to that file.
func basinBenchNFS(ctx context.Context, url string, p pattern, secs float64, profile string) (mibps, iops float64) {
	name := "bb-read"
	if p.RW == "write" || p.RW == "randwrite" {
		name = "bb-" + p.RW
	}
	e := &bench.NFS{URL: url, Conns: 1}
	defer e.Close()
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			fatalf("%v", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fatalf("%v", err)
		}
		defer pprof.StopCPUProfile()
	}
	res, err := bench.Run(ctx, e, bench.Job{Name: name, RW: p.RW, BS: int64(p.BS), IODepth: p.QD, NumJobs: 1, NrFiles: 1,
		Size: fileSize, Runtime: time.Duration(secs * float64(time.Second)), TimeBased: true}, nil)
	if err != nil {
		fatalf("basin bench nfs %s: %v", p.Name, err)
	}
	var buf strings.Builder
	if err := res.WriteJSON(&buf); err != nil {
		fatalf("%v", err)
	}
	return fioRate("basin bench", []byte(buf.String()))
}

func buildNFSBench() string {
	dir, err := os.MkdirTemp("", "nfsbench-")
	if err != nil {
		fatalf("%v", err)
	}
	src := filepath.Join(dir, "nfsbench.c")
	os.WriteFile(src, nfsBenchSource, 0o600)
	bin := filepath.Join(dir, "nfs-bench")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-o", bin, src, "-lnfs").CombinedOutput(); err != nil {
		fatalf("build nfs-bench (needs gcc, libnfs-dev): %v %s", err, out)
	}
	return bin
}

func nfsBench(bin, url string, p pattern, secs float64) (mibps, iops float64) {
	rw := p.RW
	if rw == "fill" {
		url = strings.Replace(url, ".dat", "-write.dat", 1)
	} else if rw == "write" || rw == "randwrite" {
		// Writes go to a file of their own; reads read the file the write pass made.
		url = strings.Replace(url, ".dat", "-"+rw+".dat", 1)
	} else if rw != "fill" {
		url = strings.Replace(url, ".dat", "-write.dat", 1)
	}
	out, err := exec.Command(bin, url, rw, fmt.Sprint(p.BS), fmt.Sprint(p.QD), fmt.Sprint(secs), fmt.Sprint(fileSize)).CombinedOutput()
	if err != nil {
		fatalf("nfs-bench %s %s: %v %s", url, rw, err, out)
	}
	var r struct {
		Ops     float64 `json:"ops"`
		Bytes   float64 `json:"bytes"`
		Seconds float64 `json:"seconds"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		fatalf("nfs-bench output %q: %v", out, err)
	}
	return r.Bytes / r.Seconds / (1 << 20), r.Ops / r.Seconds
}

func fio(file string, p pattern, secs float64) (mibps, iops float64) {
	rw := p.RW
	target := strings.Replace(file, ".dat", "-write.dat", 1)
	if rw == "randwrite" {
		target = strings.Replace(file, ".dat", "-randwrite.dat", 1)
	}
	out, err := exec.Command("fio", "--name=b", "--filename="+target, "--rw="+rw, fmt.Sprintf("--bs=%d", p.BS),
		fmt.Sprintf("--iodepth=%d", p.QD), "--ioengine=libaio", "--direct=1", fmt.Sprintf("--size=%d", fileSize),
		"--time_based", fmt.Sprintf("--runtime=%gs", secs), "--output-format=json").Output()
	if err != nil {
		fatalf("fio: %v %s", err, out)
	}
	return fioRate("fio", out)
}

// fioRate reads the first job's MiB/s and IOPS (reads plus writes) from fio's JSON
// layout, which basin bench writes too.
func fioRate(tool string, out []byte) (mibps, iops float64) {
	type dir struct {
		BwBytes float64 `json:"bw_bytes"`
		IOPS    float64 `json:"iops"`
	}
	var r struct {
		Jobs []struct {
			Read  dir `json:"read"`
			Write dir `json:"write"`
		} `json:"jobs"`
	}
	i := strings.Index(string(out), "{")
	if i < 0 {
		fatalf("%s output has no JSON: %s", tool, out)
	}
	if err := json.Unmarshal(out[i:], &r); err != nil || len(r.Jobs) == 0 {
		fatalf("%s output: %v", tool, err)
	}
	j := r.Jobs[0]
	return (j.Read.BwBytes + j.Write.BwBytes) / (1 << 20), j.Read.IOPS + j.Write.IOPS
}

// legacyVolume makes a subvolume of the store's own filesystem and mounts it on a
// mount point of its own, writable by all, unmounted at exit.
func legacyVolume(dataDir string) string {
	store, sub, mp := filepath.Join(dataDir, "store"), filepath.Join(dataDir, "store", "bench-legacy"), filepath.Join(dataDir, "bench-legacy")
	dev, err := mountinfo.Source(store)
	if err != nil {
		fatalf("%v", err)
	}
	os.MkdirAll(mp, 0o755)
	for _, argv := range [][]string{{"btrfs", "subvolume", "create", sub}, {"mount", "-t", "btrfs", "-o", "noatime,subvol=bench-legacy", dev, mp}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			fatalf("%v: %v %s", argv, err, out)
		}
	}
	atExit(func() { exec.Command("umount", mp).Run() })
	os.Chmod(mp, 0o777)
	return mp
}

// The bare Ganesha's network: a namespace behind a veth on the first server's
// bridge, the path a Basin sandbox has (not loopback), so that "Basin / bare"
// measures Basin's own cost.
const (
	bareNetns = "bqebare"
	bareVeth  = "bqebare0"
	bareAddr  = "10.99.251.200"
)

// bareNetwork makes the bare Ganesha's namespace; it goes at exit.
func bareNetwork() { nsLink(bareNetns, bareVeth, benchBridge, bareAddr) }

// startBareGanesha runs a second, stock (Debian's) Ganesha, as a user would by hand:
// exports without access rules of the Basin volume's directory (/bare) and of the
// previous layout's subvolume (/legacy), its own /run (so its rpcbind does not
// clash) and no DBus, in a namespace on the bridge (bareNetwork).
func startBareGanesha(dataDir, path, legacy string) (stop func()) {
	bareNetwork()
	dir := filepath.Join(dataDir, "bare-ganesha")
	os.MkdirAll(filepath.Join(dir, "recov"), 0o700)
	conf := fmt.Sprintf(`NFS_CORE_PARAM { Protocols = 3; NFS_Port = 12049; MNT_Port = 12048; NLM_Port = 12047; Rquota_Port = 12046;
  Enable_NLM = false; Enable_RQUOTA = false; Enable_UDP = false; mount_path_pseudo = true; }
NFSV4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = %q; }
NFS_KRB5 { Active_krb5 = false; }
EXPORT { Export_Id = 1; Path = %q; Pseudo = /bare; Protocols = 3; Access_Type = RW; Squash = No_Root_Squash; SecType = sys; FSAL { Name = VFS; } }
EXPORT { Export_Id = 2; Path = %q; Pseudo = /legacy; Protocols = 3; Access_Type = RW; Squash = No_Root_Squash; SecType = sys; FSAL { Name = VFS; } }
`, filepath.Join(dir, "recov"), path, legacy)
	os.WriteFile(filepath.Join(dir, "ganesha.conf"), []byte(conf), 0o600)
	script := fmt.Sprintf(`mount -t tmpfs tmpfs /run && mkdir -p /run/ganesha && (rpcbind -f -w &) && sleep 0.2 &&
exec env DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent /usr/bin/ganesha.nfsd -F -f %s/ganesha.conf -L %s/ganesha.log -p %s/ganesha.pid -N NIV_EVENT`, dir, dir, dir)
	cmd := exec.Command("ip", "netns", "exec", bareNetns, "unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		fatalf("%v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if out, err := exec.Command("nfs-ls", "nfs://"+bareAddr+"/bare?version=3&nfsport=12049&mountport=12048").CombinedOutput(); err == nil {
			break
		} else if time.Now().After(deadline) {
			fatalf("bare ganesha did not start: %s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var once bool
	return func() {
		if once {
			return
		}
		once = true
		// Not reaped until Wait below: the group's id is still its own.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}
