package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/storage/cephfs"
	"github.com/basin-nas/basin/test/ceph"
)

// The CephFS section's networks: the cluster on a bridge of its own (the host
// .1, the cluster .2, Basin's sandboxes .100-.109, the bare Ganesha .200), the
// CephFS Basin's and the btrfs Basin's client networks on bridges they make.
const (
	cbBridge    = "bcbench0"
	cbSubnet    = "10.99.84"
	cbNetBasin  = "bbenchc1"
	cbCIDRBasin = "10.99.85.0/24"
	cbHostBasin = "10.99.85.1"
	cbNetBtrfs  = "bbenchc2"
	cbCIDRBtrfs = "10.99.86.0/24"
	cbHostBtrfs = "10.99.86.1"
	cbBareNetns = "cbench-bare"
	cbBareVeth  = "cbbare0"
	cbBareAddr  = cbSubnet + ".200"
	// patchedGanesha is the Ganesha Basin's sandboxes run (with FSAL_CEPH).
	patchedGanesha = "/usr/local/lib/basin/ganesha/bin/ganesha.nfsd"
)

// cephfsResult is the CephFS section's: NFS sequential throughput through a
// Basin CephFS volume, a bare patched Ganesha's FSAL_CEPH export of a subvolume
// of the same cluster, and a Basin btrfs volume; and clone and revert times.
type cephfsResult struct {
	Date     string `json:"date"`
	Machine  string `json:"machine"`
	Rounds   int    `json:"rounds"`
	MiB      int    `json:"transferMiB"`
	ReadSecs int    `json:"readSeconds"`
	// Write and Read: MiB/s per target (basin-cephfs, bare-ceph, basin-btrfs),
	// one value per round.
	Write map[string][]float64 `json:"writeMiBps"`
	Read  map[string][]float64 `json:"readMiBps"`
	// Clone and revert of a volume holding GiB GiB, seconds.
	GiB           int     `json:"cloneGiB"`
	CloneSeconds  float64 `json:"cloneSeconds"`
	RevertSeconds float64 `json:"revertSeconds"`
}

var cephfsTargets = []string{"basin-cephfs", "bare-ceph", "basin-btrfs"}

// runCephFS starts a Ceph cluster, a Basin on it, a bare Ganesha exporting a
// subvolume of it, and a Basin on btrfs, and measures them side by side.
func runCephFS(basin string, rounds, mib int, readSecs float64, gib int) *cephfsResult {
	if err := ceph.Check(); err != nil {
		log.Printf("cephfs: skipped: %v", err)
		return nil
	}
	if _, err := os.Stat(patchedGanesha); err != nil {
		log.Printf("cephfs: skipped: %v", err)
		return nil
	}
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "bcb-")
	if err != nil {
		fatalf("%v", err)
	}
	atExit(func() { removeUnmounted(dir) })

	// The cluster's bridge, and the cluster.
	removeBridge, err := ceph.NewBridge(cbBridge, cbSubnet+".1/24")
	if err != nil {
		fatalf("%v", err)
	}
	atExit(func() { removeBridge() })
	cctx, ccancel := context.WithTimeout(ctx, 4*time.Minute)
	cl, err := ceph.Start(cctx, ceph.Options{Name: "cbench", Dir: filepath.Join(dir, "ceph"), Bridge: cbBridge, Addr: cbSubnet + ".2/24", OSDSize: 16 << 30})
	ccancel()
	if err != nil {
		fatalf("ceph: %v", err)
	}
	atExit(func() {
		if err := cl.Close(); err != nil {
			log.Printf("ceph: close: %v", err)
		}
	})
	log.Printf("cephfs: cluster up in %s", cl.Startup.Round(time.Millisecond))

	// Basin on CephFS, as user basin-cbench holding cephfs.Caps of group cbench.
	mon, mgr := cephfs.Caps(ceph.FSName, "cbench")
	ring, err := cl.Ceph(ctx, "auth", "get-or-create", "client.basin-cbench", "mon", mon, "mgr", mgr)
	if err != nil {
		fatalf("ceph auth: %v", err)
	}
	keyring := filepath.Join(dir, "basin.keyring")
	must(os.WriteFile(keyring, ring, 0o600))
	cephData := filepath.Join(dir, "basin-cephfs")
	btrfsData := filepath.Join(dir, "basin-btrfs")
	os.MkdirAll(cephData, 0o700)
	os.MkdirAll(btrfsData, 0o700)
	cc := serveBasin(basin, cephData, freeAddr(), "--log-level", "warn", "--qos=false", "--overcommit-ratio", "10",
		"--storage", "cephfs://basin-cbench@"+ceph.FSName+"/cbench?conf="+cl.Conf+"&keyring="+keyring,
		"--ceph-network", cbBridge+","+cbSubnet+".0/24,"+cbSubnet+".100-"+cbSubnet+".109",
		"--network", "default="+cbNetBasin+","+cbCIDRBasin)
	bc := serveBasin(basin, btrfsData, freeAddr(), "--log-level", "warn", "--qos=false", "--store-size", "8G",
		"--overcommit-ratio", "100", "--network", "default="+cbNetBtrfs+","+cbCIDRBtrfs)
	for _, c := range []*client.Client{cc, bc} {
		must(mutate(ctx, c, "POST", loc+"/storagePools?storagePoolId=pool", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 12,
			"network": "projects/bench/global/networks/default"}))
	}
	volume := func(c *client.Client, id, host string, gib int) string {
		open := map[string]any{"rules": []any{map[string]any{"allowedClients": host, "accessType": "READ_WRITE", "nfsv3": true, "hasRootAccess": "true"}}}
		must(mutate(ctx, c, "POST", loc+"/volumes?volumeId="+id, map[string]any{"shareName": id, "storagePool": "pool",
			"capacityGib": gib, "protocols": []string{"NFSV3"}, "unixPermissions": "0777", "exportPolicy": open}))
		var v client.Object
		must(c.Do(ctx, "GET", loc+"/volumes/"+id, nil, nil, &v))
		return v["mountOptions"].([]any)[0].(map[string]any)["ipAddress"].(string)
	}
	need := (rounds*mib)>>10 + 2
	cephEP := volume(cc, "cbench", cbHostBasin, need)
	btrfsEP := volume(bc, "cbench", cbHostBtrfs, need)

	// The bare Ganesha: a subvolume of group cbenchbare with a cephx user of
	// its own, made by Basin's CephFS backend as admin.
	be := cephfs.New(cephfs.Options{Conf: cl.Conf, ID: "admin", Keyring: cl.AdminKeyring, Group: "cbenchbare", DataDir: filepath.Join(dir, "bare-backend")})
	must(be.Start(ctx))
	atExit(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		if err := be.DeleteVolume(dctx, "bare"); err != nil {
			log.Printf("cephfs: delete the bare subvolume: %v", err)
		}
		be.Close()
	})
	must(be.EnsureVolume(ctx, "bare", int64(need)<<30, nil))
	att, err := be.Attachment(ctx, "bare")
	if err != nil {
		fatalf("cephfs: attachment: %v", err)
	}
	stopBare := startBareCeph(filepath.Join(dir, "bare-ganesha"), cl.Conf, att.Path,
		fmt.Sprintf("FSAL { Name = CEPH; User_Id = %q; Secret_Access_Key = %q; Filesystem = %q; }", att.UserID, att.Secret, att.FS),
		filepath.Join(cl.Dir, "log"))
	atExit(stopBare)

	bin := buildNFSBench()
	atExit(func() { os.RemoveAll(filepath.Dir(bin)) })
	urls := map[string]string{
		"basin-cephfs": "nfs://" + cephEP + "/cbench/",
		"bare-ceph":    "nfs://" + cbBareAddr + "/bare/",
		"basin-btrfs":  "nfs://" + btrfsEP + "/cbench/",
	}
	query := map[string]string{"bare-ceph": "?version=3&nfsport=12049&mountport=12048"}
	res := &cephfsResult{Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), Rounds: rounds, MiB: mib, ReadSecs: int(readSecs),
		Write: map[string][]float64{}, Read: map[string][]float64{}, GiB: gib}
	size := int64(mib) << 20
	for r := range rounds {
		for i := range cephfsTargets {
			t := cephfsTargets[(r+i)%len(cephfsTargets)]
			q := query[t]
			if q == "" {
				q = "?version=3"
			}
			url := urls[t] + fmt.Sprintf("seq%d.dat", r) + q
			// Write: one sequential pass of a new file, 1 MiB at qd 8, timed to
			// the end of its COMMIT (the whole run of the helper).
			syscall.Sync()
			start := time.Now()
			out := runNFSBench(bin, url, "fill", 1<<20, 8, 1, size)
			w := float64(out.Bytes) / time.Since(start).Seconds() / (1 << 20)
			// Read: the file just written, sequentially (wrapping), for readSecs.
			syscall.Sync()
			rd := runNFSBench(bin, url, "read", 1<<20, 8, readSecs, size)
			rmib := float64(rd.Bytes) / rd.Seconds / (1 << 20)
			res.Write[t] = append(res.Write[t], w)
			res.Read[t] = append(res.Read[t], rmib)
			log.Printf("cephfs round %d: %s write %.0f MiB/s, read %.0f MiB/s", r+1, t, w, rmib)
		}
	}

	// Clone and revert of a volume holding gib GiB, through Basin's API.
	must(mutate(ctx, cc, "POST", loc+"/volumes?volumeId=cbsrc", map[string]any{"shareName": "cbsrc", "storagePool": "pool",
		"capacityGib": 2*gib + 1, "protocols": []string{"NFSV3"}, "unixPermissions": "0777"}))
	src := filepath.Join(mountOf(cephData, "cbsrc"), "data")
	must(fill(src, int64(gib)<<30))
	must(mutate(ctx, cc, "POST", loc+"/volumes/cbsrc/snapshots?snapshotId=s1", map[string]any{}))
	start := time.Now()
	must(mutate(ctx, cc, "POST", loc+"/volumes?volumeId=cbclone", map[string]any{"shareName": "cbclone", "storagePool": "pool",
		"capacityGib": 2*gib + 1, "protocols": []string{"NFSV3"}, "unixPermissions": "0777",
		"restoreParameters": map[string]any{"sourceSnapshot": strings.TrimPrefix(loc, "/v1/") + "/volumes/cbsrc/snapshots/s1"}}))
	res.CloneSeconds = time.Since(start).Seconds()
	log.Printf("cephfs: clone of %d GiB: %.1f s", gib, res.CloneSeconds)
	must(fill(src, int64(gib)<<30))
	start = time.Now()
	must(mutate(ctx, cc, "POST", loc+"/volumes/cbsrc:revert", map[string]any{"snapshotId": "s1"}))
	res.RevertSeconds = time.Since(start).Seconds()
	log.Printf("cephfs: revert of %d GiB: %.1f s; section took %s", gib, res.RevertSeconds, time.Since(begin).Round(time.Second))
	return res
}

type nfsBenchOut struct {
	Ops     float64 `json:"ops"`
	Bytes   float64 `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

func runNFSBench(bin, url, rw string, bs, qd int, secs float64, size int64) nfsBenchOut {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, url, rw, fmt.Sprint(bs), fmt.Sprint(qd), fmt.Sprint(secs), fmt.Sprint(size)).CombinedOutput()
	if err != nil {
		fatalf("nfs-bench %s %s: %v %s", url, rw, err, out)
	}
	var r nfsBenchOut
	if err := json.Unmarshal(out, &r); err != nil || r.Seconds <= 0 {
		fatalf("nfs-bench output %q: %v", out, err)
	}
	return r
}

// startBareCeph runs the patched Ganesha with one FSAL_CEPH export (/bare),
// as a user would by hand: no access rules, its own /run and rpcbind, no DBus,
// in a namespace of its own on the cluster's bridge.
func startBareCeph(dir, conf, path, fsal, cephLogs string) (stop func()) {
	nsLink(cbBareNetns, cbBareVeth, cbBridge, cbBareAddr)
	os.MkdirAll(filepath.Join(dir, "recov"), 0o700)
	// An export id of its own: FSAL_CEPH names its CephFS session
	// "ganesha-<hostname>-<export id>", and the MDS refuses a second session of
	// a name it holds (Basin's sandboxes run on this host too).
	cfg := fmt.Sprintf(`NFS_CORE_PARAM { Protocols = 3; NFS_Port = 12049; MNT_Port = 12048;
  Enable_UDP = false; mount_path_pseudo = true; Plugins_Dir = %q; }
NFSV4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = %q; }
NFS_KRB5 { Active_krb5 = false; }
CEPH { Ceph_Conf = %q; }
EXPORT { Export_Id = 4242; Path = %q; Pseudo = /bare; Protocols = 3; Access_Type = RW; Squash = No_Root_Squash; SecType = sys; %s }
`, filepath.Join(filepath.Dir(filepath.Dir(patchedGanesha)), "lib", "ganesha"), filepath.Join(dir, "recov"), conf, path, fsal)
	must(os.WriteFile(filepath.Join(dir, "ganesha.conf"), []byte(cfg), 0o600))
	script := fmt.Sprintf(`mount -t tmpfs tmpfs /run && mkdir -p /run/ganesha && (rpcbind -f -w &) && sleep 0.2 &&
exec env DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent %s -F -f %s/ganesha.conf -L %s/ganesha.log -p %s/ganesha.pid -N NIV_EVENT`, patchedGanesha, dir, dir, dir)
	cmd := exec.Command("ip", "netns", "exec", cbBareNetns, "unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		fatalf("%v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop = func() {
		select {
		case <-done:
			return
		default:
		}
		// Not reaped until the Wait above returns: the group's id is still its own.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := exec.Command("nfs-ls", "nfs://"+cbBareAddr+"/bare?version=3&nfsport=12049&mountport=12048").CombinedOutput()
		if err == nil {
			break
		}
		exited := false
		select {
		case <-done:
			exited = true
		default:
		}
		if exited || time.Now().After(deadline) {
			stop()
			log.Printf("bare ganesha log:\n%s", tail(filepath.Join(dir, "ganesha.log"), 4000))
			logs, _ := filepath.Glob(filepath.Join(cephLogs, "*cbenchbare*"))
			for _, l := range logs {
				log.Printf("%s:\n%s", l, tail(l, 3000))
			}
			fatalf("bare ganesha (FSAL_CEPH) did not start: %s", out)
		}
		time.Sleep(300 * time.Millisecond)
	}
	return stop
}

// tail is the last n bytes of a log's lines that are not mere events.
func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	var b strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.Contains(l, " :EVENT :") {
			b.WriteString(l + "\n")
		}
	}
	s := b.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// removeUnmounted removes dir unless something is still mounted under it
// (then it leaves it, and says so).
func removeUnmounted(dir string) {
	data, _ := os.ReadFile("/proc/self/mounts")
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			exec.Command("umount", "-l", f[1]).Run()
		}
	}
	data, _ = os.ReadFile("/proc/self/mounts")
	if strings.Contains(string(data), " "+dir+"/") {
		log.Printf("cephfs: %s still has mounts; left in place", dir)
		return
	}
	os.RemoveAll(dir)
}

func (r *cephfsResult) markdown() string {
	var b strings.Builder
	med := func(m map[string][]float64, t string) float64 { return median(m[t]) }
	fmt.Fprintf(&b, "Measured %s on %s; NFSv3 over one TCP connection from the host (libnfs, 1 MiB at queue depth 8), %d interleaved rounds, medians. "+
		"Write: one sequential pass of a new %d MiB file, timed to the end of its COMMIT; read: that file, sequentially, for %d s.\n\n",
		r.Date, r.Machine, r.Rounds, r.MiB, r.ReadSecs)
	b.WriteString("| workload | Basin CephFS volume | bare Ganesha, FSAL_CEPH | Basin btrfs volume | **Basin CephFS / bare** | Basin CephFS / Basin btrfs |\n|---|---|---|---|---|---|\n")
	for _, x := range []struct {
		name string
		m    map[string][]float64
	}{{"seq write", r.Write}, {"seq read", r.Read}} {
		c, bare, bt := med(x.m, "basin-cephfs"), med(x.m, "bare-ceph"), med(x.m, "basin-btrfs")
		fmt.Fprintf(&b, "| %s | %.0f MiB/s | %.0f MiB/s | %.0f MiB/s | **%.2f** | %.2f |\n", x.name, c, bare, bt, c/bare, c/bt)
	}
	b.WriteString("\nEach round's figures (MiB/s, write / read):\n\n| round | Basin CephFS | bare FSAL_CEPH | Basin btrfs |\n|---|---|---|---|\n")
	for i := range r.Rounds {
		fmt.Fprintf(&b, "| %d |", i+1)
		for _, t := range cephfsTargets {
			if i < len(r.Write[t]) && i < len(r.Read[t]) {
				fmt.Fprintf(&b, " %.0f / %.0f |", r.Write[t][i], r.Read[t][i])
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	g := float64(r.GiB)
	fmt.Fprintf(&b, "\n| Basin on CephFS, a volume holding %d GiB (API call → operation done) | time | per GiB |\n|---|---|---|\n", r.GiB)
	fmt.Fprintf(&b, "| clone of a snapshot (`restoreParameters.sourceSnapshot`) | %.1f s | %.1f s/GiB |\n", r.CloneSeconds, r.CloneSeconds/g)
	fmt.Fprintf(&b, "| revert to the snapshot, all of the data overwritten since | %.1f s | %.1f s/GiB |\n", r.RevertSeconds, r.RevertSeconds/g)
	return b.String()
}
