package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/bench"
	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/test/addc"
	"github.com/basin-nas/basin/test/clienthost"
	"github.com/basin-nas/basin/test/sambatest"
)

// protections are the SMB protection levels measured, each against "off".
var protections = []string{"off", "sign", "encrypt"}

// smbTargets are the two servers the SMB section compares.
var smbTargets = []string{"basin", "bare"}

// The SMB section's machines on the first server's bridge: the AD DC, the bare
// smbd's namespace and the client's namespace (the Basin share answers on its
// endpoint inside the network; the client sits on the bridge as a client machine
// would, and reaches the bare smbd by the same path).
const (
	smbDCName   = "bsmb" // addc: namespace bsmb-dc, veth vbsmb-dc
	smbDCAddr   = "10.99.251.210"
	smbBareNS   = "bqsbare"
	smbBareVeth = "bqsbare0"
	smbBareAddr = "10.99.251.230"
	smbCliNS    = "bqscli"
	smbCliVeth  = "bqscli0"
	smbCliAddr  = "10.99.251.220"
)

// smbTarget is one (server, protection level) measured.
type smbTarget struct {
	key        string // "basin-off", "bare-encrypt", …
	url        string
	user       addc.User
	domain     string
	protection string
	prefix     string // file names: each server reads and writes files of its own
}

// runSMB measures SMB 3.1.1 through Basin SMB volumes (the Samba instance of an
// Active Directory policy, joined to a real AD DC, as the domain user alice with
// NTLM) and through a bare smbd sharing the same directories, with no protection,
// signing and encryption: twelve targets interleaved per round, one connection
// each, from a client namespace on the network's bridge.
func runSMB(ctx context.Context, c *client.Client, dataDir string, runs int, secs float64) []patternResult {
	dc := domain(ctx, c, dataDir)
	start := time.Now()
	plainEP := smbVolume(ctx, c, "smbplain", nil)
	// The defaults (BROWSABLE, CHANGE_NOTIFY, OPLOCKS) and encryption: only the
	// protection differs between the two volumes.
	encEP := smbVolume(ctx, c, "smbenc", []string{"ENCRYPT_DATA", "BROWSABLE", "CHANGE_NOTIFY", "OPLOCKS"})
	log.Printf("smb: DC up in %v; join and two SMB volumes in %v (endpoints %s, %s)", dc.Startup.Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond), plainEP, encEP)

	nsLink(smbCliNS, smbCliVeth, benchBridge, smbCliAddr)
	nsLink(smbBareNS, smbBareVeth, benchBridge, smbBareAddr)
	const barePassword = "bench-Pa55"
	srv, err := sambatest.StartOpts(sambatest.Options{StateDir: filepath.Join(dataDir, "bare-samba"), ShareDir: mountOf(dataDir, "smbplain"),
		EncShareDir: mountOf(dataDir, "smbenc"), Password: barePassword, Port: 445, Addr: smbBareAddr, Netns: smbBareNS,
		Dial: func(addr string) (net.Conn, error) { return dialIn(smbCliNS, addr) }})
	if err != nil {
		fatalf("%v", err)
	}
	atExit(srv.Stop)

	alice := dc.Users[0]
	if alice.Name != "alice" {
		fatalf("addc fixture: first user is %s, want alice", alice.Name)
	}
	var targets []smbTarget
	for _, prot := range protections {
		basinEP, bareShare := plainEP, "bench"
		if prot == "encrypt" {
			basinEP, bareShare = encEP, "benchenc"
		}
		share := "smbplain"
		if prot == "encrypt" {
			share = "smbenc"
		}
		targets = append(targets,
			smbTarget{key: "basin-" + prot, url: fmt.Sprintf("smb://%s/%s", basinEP, share), user: alice, domain: dc.Domain, protection: prot, prefix: "basin"},
			smbTarget{key: "bare-" + prot, url: fmt.Sprintf("smb://%s/%s", smbBareAddr, bareShare), user: addc.User{Name: "root", Password: barePassword},
				protection: prot, prefix: "bare"})
	}
	// The read patterns read a file each target lays out once: lay them out first
	// (two per server and volume; off and sign share theirs).
	for _, t := range targets {
		if t.protection != "sign" {
			smbRun(ctx, t, pattern{Name: "lay out", RW: "read", BS: 1 << 20, QD: 8}, 0.5)
		}
	}
	var out []patternResult
	for _, p := range patterns {
		r := patternResult{Pattern: p.Name}
		samples := map[string][][2]float64{}
		interleave(runs, len(targets), func(k int) {
			t := targets[k]
			m, i := smbRun(ctx, t, p, secs)
			samples[t.key] = append(samples[t.key], [2]float64{m, i})
		})
		r.MiBps, r.IOPS = medians(samples)
		r.Samples = samples
		unit, get := r.headline()
		var line strings.Builder
		for _, prot := range protections {
			fmt.Fprintf(&line, "; %s: basin %.0f, bare %.0f %s (%.2f)", prot, get["basin-"+prot], get["bare-"+prot], unit, get["basin-"+prot]/get["bare-"+prot])
		}
		log.Printf("smb %s%s", p.Name, line.String())
		out = append(out, r)
	}
	return out
}

// theDomain is what domain made, once per run: the SMB and krb5 sections
// share it.
var theDomain *addc.DC

// domain starts the AD DC on the first server's network, and makes an Active
// Directory policy "bench" with it and a pool "smb" joined to it; once.
func domain(ctx context.Context, c *client.Client, dataDir string) *addc.DC {
	if theDomain != nil {
		return theDomain
	}
	// The network's bridge comes with its sandbox: an NFS volume brings it up, and
	// the DC joins the bridge before any SMB pool exists.
	open := map[string]any{"rules": []any{map[string]any{"allowedClients": benchHost, "accessType": "READ_WRITE", "nfsv3": true, "hasRootAccess": "true"}}}
	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId=smbnet", map[string]any{"shareName": "smbnet", "storagePool": "pool",
		"capacityGib": 1, "protocols": []string{"NFSV3"}, "exportPolicy": open}))
	dc := startDC(ctx, dataDir)
	ad := strings.TrimPrefix(loc, "/v1/") + "/activeDirectories/bench"
	must(mutate(ctx, c, "POST", loc+"/activeDirectories?activeDirectoryId=bench", map[string]any{"domain": dc.DNSDomain, "dns": dc.Addr,
		"netBiosPrefix": "BENCH", "organizationalUnit": dc.OU, "username": dc.Delegated.Name, "password": dc.Delegated.Password}))
	// QoS is off on this server (--qos=false), and a Premium pool's limits would sit
	// far above what one connection moves anyway.
	must(mutate(ctx, c, "POST", loc+"/storagePools?storagePoolId=smb", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 100000,
		"network": "projects/bench/global/networks/default", "activeDirectory": ad}))
	theDomain = dc
	return dc
}

// startDC starts the AD DC on the first server's bridge; it goes at exit.
func startDC(ctx context.Context, dataDir string) *addc.DC {
	if err := addc.Check(); err != nil {
		fatalf("smb section: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	dc, err := addc.Start(ctx, addc.Options{Name: smbDCName, Dir: filepath.Join(dataDir, "addc"), Bridge: benchBridge,
		Addr: smbDCAddr + "/24"})
	addc.RemoveTemplates() // the one DC is started, or failed
	if err != nil {
		fatalf("smb section: AD DC: %v", err)
	}
	atExit(func() {
		if err := dc.Close(); err != nil {
			log.Printf("smb section: close the DC: %v", err)
		}
	})
	return dc
}

// smbVolume creates an SMB volume of 64 GiB in pool "smb", open to everyone
// (0777), and returns its endpoint.
func smbVolume(ctx context.Context, c *client.Client, id string, settings []string) string {
	body := map[string]any{"shareName": id, "storagePool": "smb", "capacityGib": 64, "protocols": []string{"SMB"}, "unixPermissions": "0777"}
	if settings != nil {
		body["smbSettings"] = settings
	}
	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId="+id, body))
	var v client.Object
	must(c.Do(ctx, "GET", loc+"/volumes/"+id, nil, nil, &v))
	mos, _ := v["mountOptions"].([]any)
	if len(mos) != 1 {
		fatalf("smb volume %s: mountOptions %v: want one", id, v["mountOptions"])
	}
	ep, _ := mos[0].(map[string]any)["ipAddress"].(string)
	if ep == "" {
		fatalf("smb volume %s: no endpoint in %v", id, mos[0])
	}
	return ep
}

// smbRun runs one pattern on one connection of basin bench's SMB engine from the
// client namespace. Reads read a file of their own; writes go to a file per
// pattern.
func smbRun(ctx context.Context, t smbTarget, p pattern, secs float64) (mibps, iops float64) {
	name := t.prefix + "-read"
	if p.RW == "write" || p.RW == "randwrite" {
		name = t.prefix + "-" + p.RW
	}
	e := &bench.SMB{URL: t.url, User: t.user.Name, Password: t.user.Password, Domain: t.domain, Protection: t.protection, Channels: 1}
	defer e.Close()
	var res *bench.Result
	// bench.Run opens its files (and so dials) on the calling goroutine: inside the
	// client namespace. Its workers use the connection from any thread.
	err := withinNetns(smbCliNS, func() (err error) {
		res, err = bench.Run(ctx, e, bench.Job{Name: name, RW: p.RW, BS: int64(p.BS), IODepth: p.QD, NumJobs: 1, NrFiles: 1,
			Size: fileSize, Runtime: time.Duration(secs * float64(time.Second)), TimeBased: true}, nil)
		return err
	})
	if err != nil {
		fatalf("basin bench smb %s %s: %v", t.key, p.Name, err)
	}
	if t.protection == "encrypt" && !e.Encrypted() {
		fatalf("basin bench smb %s: the run was not encrypted", t.key)
	}
	var buf strings.Builder
	if err := res.WriteJSON(&buf); err != nil {
		fatalf("%v", err)
	}
	return fioRate("basin bench", []byte(buf.String()))
}

// nsLink makes a network namespace with a veth on bridge and addr (a /24) on
// its eth0; it goes at exit.
func nsLink(ns, veth, bridge, addr string) {
	exec.Command("ip", "netns", "del", ns).Run() // a previous run's, killed
	for _, argv := range [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "link", "set", veth, "master", bridge, "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", addr + "/24", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			exec.Command("ip", "netns", "del", ns).Run()
			fatalf("%v: %v %s", argv, err, out)
		}
	}
	atExit(func() { exec.Command("ip", "netns", "del", ns).Run() })
}

// withinNetns runs fn on an OS thread inside network namespace ns: sockets fn
// opens belong to ns and keep working from any thread after it returns.
func withinNetns(ns string, fn func() error) error { return clienthost.InNetns(ns, fn) }

// dialIn dials addr over TCP from inside ns.
func dialIn(ns, addr string) (c net.Conn, err error) {
	err = withinNetns(ns, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, time.Second)
		return err
	})
	return c, err
}

// smbMarkdown renders the section: per workload and protection level, Basin and
// the bare smbd side by side, and what each level costs each server. Figures are
// medians of the rounds; ratios are medians of each round's ratio (the two runs of
// a ratio share a round, and so most of its noise).
func smbMarkdown(date string, rounds int, res []patternResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on the same machine; SMB 3.1.1 over one TCP connection (`basin bench --engine smb`'s engine) from a client "+
		"namespace on the network's bridge; Basin as the domain user alice (NTLM), the bare smbd as a local user; %d rounds, the six targets "+
		"interleaved in each; figures are medians of the rounds, ratios medians of each round's ratio.\n\n", date, rounds)
	b.WriteString("| workload | protection | Basin SMB volume | bare smbd, same directory | Basin / bare | Basin: level / off | bare: level / off |\n|---|---|---|---|---|---|---|\n")
	for _, x := range res {
		unit, get := x.headline()
		for _, prot := range protections {
			basin, bare := get["basin-"+prot], get["bare-"+prot]
			fmt.Fprintf(&b, "| %s | %s | %.0f %s | %.0f %s | %.2f | %.2f | %.2f |\n", x.Pattern, prot, basin, unit, bare, unit,
				x.ratio("basin-"+prot, "bare-"+prot), x.ratio("basin-"+prot, "basin-off"), x.ratio("bare-"+prot, "bare-off"))
		}
	}
	return b.String()
}

// ratio is a / b of the headline figure: the median of the rounds' ratios when the
// samples are there (round i is sample i of every target), else the ratio of the
// medians.
func (r patternResult) ratio(a, b string) float64 {
	unit, get := r.headline()
	sa, sb := r.Samples[a], r.Samples[b]
	if len(sa) == 0 || len(sa) != len(sb) {
		return get[a] / get[b]
	}
	k := 0
	if unit == "IOPS" {
		k = 1
	}
	var q []float64
	for i := range sa {
		q = append(q, sa[i][k]/sb[i][k])
	}
	return median(q)
}
