package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/addc"
)

// The dualproto section: what a dual-protocol volume's NFS export costs NFS
// metadata work against an NFS-only volume on the same server. Its export
// caches no attributes (Samba changes them behind Ganesha), so every LOOKUP
// and GETATTR reaches the filesystem (an O_PATH open, fstat, and with
// Ganesha's POSIX-ACL build the ACL's getxattr); an NTFS one also refuses
// permission changes, which costs reads nothing. Each round stats every file
// of a directory (LOOKUP, GETATTR) and lists it (READDIRPLUS) over NFSv3 as a
// user other than the files' owner (root would skip the access checks), the
// three volumes in turn, the order rotating.

// dualKinds are the volumes compared: NFS-only, dual-protocol UNIX, NTFS.
var dualKinds = []string{"nfs", "unix", "ntfs"}

type dualResult struct {
	Date   string `json:"date"`
	Rounds int    `json:"rounds"`
	Files  int    `json:"files"`
	// Per kind: each round's stats per second (LOOKUP + GETATTR of every
	// file) and milliseconds per listing (READDIRPLUS of the directory).
	StatsPerSec map[string][]float64 `json:"statsPerSec"`
	ListMillis  map[string][]float64 `json:"listMillis"`
	// The SMB half (smbOpenKinds): each round's opens per second, and the
	// oplock levels the server granted.
	Opens        int                  `json:"opens,omitempty"`
	OpensPerSec  map[string][]float64 `json:"opensPerSec,omitempty"`
	OpensGranted map[string]string    `json:"opensGranted,omitempty"`
}

// The SMB half of the section: what cross-protocol oplocks cost an SMB
// client. On a dual-protocol share smbd backs each batch or exclusive oplock
// with a kernel lease (F_SETLEASE), which an NFS open breaks; an SMB-only
// share keeps its oplocks in Samba alone. Each round opens one 4 KiB file
// many times (open asking for a batch oplock, or for none; read it; close) on
// an SMB-only volume and on the NTFS dual-protocol one (the same share stack
// and style; only the kernel leases differ), through
// test/e2e/python/smb2_holder.py (impacket, the e2e venv's) as alice with
// NTLM, from a client namespace on the network's bridge.
var smbOpenKinds = []string{"smb-batch", "dual-batch", "smb-none", "dual-none"}

// The SMB half's client namespace.
const (
	dualCliNS   = "bqsdual"
	dualCliVeth = "bqsdual0"
	dualCliAddr = "10.99.251.221"
)

// smbOpens runs one round of opens on share at ep asking for oplock level
// (9 batch, 0 none) and returns the opens per second and the levels granted.
func smbOpens(ctx context.Context, dc *addc.DC, ep, share string, level, n int) (float64, string) {
	python, err := filepath.Abs(".venv/bin/python")
	if err == nil {
		_, err = os.Stat(python)
	}
	if err != nil {
		fatalf("dualproto: no e2e venv (scripts/setup.sh --test makes it): %v", err)
	}
	alice := dc.Users[0]
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", dualCliNS, python, "test/e2e/python/smb2_holder.py", ep, ep, share, dc.Domain, alice.Name)
	cmd.Env = append(os.Environ(), "BASIN_SMB_PASSWORD="+alice.Password)
	cmd.Stdin = strings.NewReader(fmt.Sprintf("opens bench.dat %d %d\n", level, n))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	f := strings.Fields(string(out))
	if err != nil || len(f) != 3 || f[0] != "opens" {
		fatalf("dualproto: smb2_holder opens on %s: %q, %v\n%s", share, out, err, stderr.String())
	}
	rate, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		fatalf("dualproto: smb2_holder opens on %s: %q", share, out)
	}
	return rate, f[2]
}

func runDual(ctx context.Context, c *client.Client, dataDir string, rounds, files int) dualResult {
	dc := domain(ctx, c, dataDir) // the SMB pool "smb" and its domain
	open := map[string]any{"rules": []any{map[string]any{"allowedClients": benchHost, "accessType": "READ_WRITE", "nfsv3": true, "hasRootAccess": "true"}}}
	body := map[string]string{"nfs": "", "unix": "UNIX", "ntfs": "NTFS"}
	eps := map[string]string{}
	for _, k := range dualKinds {
		id := "md" + k
		v := map[string]any{"shareName": id, "storagePool": "pool", "capacityGib": 4, "protocols": []string{"NFSV3"}, "unixPermissions": "0777", "exportPolicy": open}
		if style := body[k]; style != "" {
			v["storagePool"], v["protocols"], v["securityStyle"] = "smb", []string{"SMB", "NFSV3"}, style
		}
		must(mutate(ctx, c, "POST", loc+"/volumes?volumeId="+id, v))
		eps[k] = protocolEndpoint(ctx, c, id, "NFSV3")
	}
	// The files, made by root (mode 0644); read as uid 1000, whom only their
	// "other" bits admit.
	clients := map[string]*nfs3.Client{}
	dirs := map[string][]byte{}
	for _, k := range dualKinds {
		root, err := nfs3.Mount(ctx, eps[k], "/md"+k, nfs3.Options{})
		if err != nil {
			fatalf("dualproto: mount %s: %v", k, err)
		}
		dir, err := root.Mkdir(ctx, root.Root, "d", 0o755)
		if err != nil {
			fatalf("dualproto: mkdir on %s: %v", k, err)
		}
		for i := range files {
			if _, err := root.Create(ctx, dir, fmt.Sprintf("f%05d", i), 0o644); err != nil {
				fatalf("dualproto: create on %s: %v", k, err)
			}
		}
		root.Close()
		cl, err := nfs3.Mount(ctx, eps[k], "/md"+k, nfs3.Options{Auth: nfs3.Auth{UID: 1000, GID: 1000, Machine: "dualbench"}})
		if err != nil {
			fatalf("dualproto: mount %s as 1000: %v", k, err)
		}
		atExit(func() { cl.Close() })
		clients[k], dirs[k] = cl, dir
	}
	// The SMB half's SMB-only volume, beside the dual-protocol ones.
	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId=mdsmb", map[string]any{"shareName": "mdsmb", "storagePool": "smb", "capacityGib": 4,
		"protocols": []string{"SMB"}, "unixPermissions": "0777"}))
	smbEP := map[string]string{}
	for id, k := range map[string]string{"mdsmb": "smb", "mdntfs": "dual"} {
		smbEP[k] = protocolEndpoint(ctx, c, id, "SMB")
	}
	nsLink(dualCliNS, dualCliVeth, benchBridge, dualCliAddr)
	const opens = 2000
	res := dualResult{Date: time.Now().UTC().Format(time.RFC3339), Rounds: rounds, Files: files,
		StatsPerSec: map[string][]float64{}, ListMillis: map[string][]float64{},
		Opens: opens, OpensPerSec: map[string][]float64{}, OpensGranted: map[string]string{}}
	for r := range rounds {
		for _, k := range rotated(dualKinds, r) {
			cl, dir := clients[k], dirs[k]
			t0 := time.Now()
			for i := range files {
				fh, _, err := cl.Lookup(ctx, dir, fmt.Sprintf("f%05d", i))
				if err == nil {
					_, err = cl.GetAttr(ctx, fh)
				}
				if err != nil {
					fatalf("dualproto: stat on %s: %v", k, err)
				}
			}
			stats := float64(files) / time.Since(t0).Seconds()
			t1 := time.Now()
			ents, err := cl.ReadDirPlus(ctx, dir)
			if err != nil || len(ents) < files {
				fatalf("dualproto: list on %s: %d entries, %v", k, len(ents), err)
			}
			list := float64(time.Since(t1).Microseconds()) / 1000
			res.StatsPerSec[k] = append(res.StatsPerSec[k], stats)
			res.ListMillis[k] = append(res.ListMillis[k], list)
			log.Printf("dualproto round %d, %s: %.0f stats/s, listing %.1f ms", r+1, k, stats, list)
		}
		for _, k := range rotated(smbOpenKinds, r) {
			share, level := "mdsmb", 9
			if strings.HasPrefix(k, "dual") {
				share = "mdntfs"
			}
			if strings.HasSuffix(k, "none") {
				level = 0
			}
			rate, granted := smbOpens(ctx, dc, smbEP[strings.Split(k, "-")[0]], share, level, opens)
			res.OpensPerSec[k] = append(res.OpensPerSec[k], rate)
			if prev, ok := res.OpensGranted[k]; ok && prev != granted {
				granted = prev + "," + granted
			}
			res.OpensGranted[k] = granted
			log.Printf("dualproto round %d, %s: %.0f opens/s (granted %s)", r+1, k, rate, granted)
		}
	}
	return res
}

// protocolEndpoint is the address of volume id's mount option for protocol.
func protocolEndpoint(ctx context.Context, c *client.Client, id, protocol string) string {
	var got client.Object
	must(c.Do(ctx, "GET", loc+"/volumes/"+id, nil, nil, &got))
	for _, mo := range got["mountOptions"].([]any) {
		if m := mo.(map[string]any); m["protocol"] == protocol {
			if ep, _ := m["ipAddress"].(string); ep != "" {
				return ep
			}
		}
	}
	fatalf("dualproto: volume %s has no %s endpoint: %v", id, protocol, got["mountOptions"])
	return ""
}

// rotated is kinds started r places in (round r's order: each kind goes first
// in turn).
func rotated(kinds []string, r int) []string {
	n := r % len(kinds)
	return append(slices.Clone(kinds[n:]), kinds[:n]...)
}

func (r dualResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on the same machine: one server, three volumes side by side (NFS-only; [SMB, NFSV3] of UNIX and of NTFS style), "+
		"a directory of %d files made by root (0644) on each, NFSv3 as uid 1000 from the host; per round and volume, a LOOKUP and a GETATTR "+
		"of every file, then a READDIRPLUS of the directory, the volumes in turn. Medians of %d rounds.\n\n", r.Date, r.Files, r.Rounds)
	b.WriteString("| volume | stats/s (LOOKUP + GETATTR) | / NFS-only | listing (READDIRPLUS) | / NFS-only |\n|---|---|---|---|---|\n")
	names := map[string]string{"nfs": "NFS-only (attributes cached)", "unix": "[SMB, NFSV3], UNIX (uncached)", "ntfs": "[SMB, NFSV3], NTFS (uncached)"}
	base, baseList := median(r.StatsPerSec["nfs"]), median(r.ListMillis["nfs"])
	for _, k := range dualKinds {
		s, l := median(r.StatsPerSec[k]), median(r.ListMillis[k])
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.1f ms | %.2f |\n", names[k], s, s/base, l, l/baseList)
	}
	if len(r.OpensPerSec) == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "\nSMB, the same rounds: %d opens of one 4 KiB file per round and volume (open, read it, close; SMB 3.1.1 through impacket, "+
		"as alice with NTLM, one connection), an SMB-only volume against the NTFS [SMB, NFSV3] one (both NTFS style), whose share backs oplocks with kernel leases. "+
		"The dual-protocol column's ratio is the median of each round's ratio.\n\n", r.Opens)
	b.WriteString("| open asking for | SMB-only: opens/s (granted) | [SMB, NFSV3]: opens/s (granted) | dual / SMB-only |\n|---|---|---|---|\n")
	for _, lv := range []struct{ key, name string }{{"batch", "a batch oplock"}, {"none", "no oplock"}} {
		one, dual := r.OpensPerSec["smb-"+lv.key], r.OpensPerSec["dual-"+lv.key]
		var ratios []float64
		for i := range min(len(one), len(dual)) {
			ratios = append(ratios, dual[i]/one[i])
		}
		fmt.Fprintf(&b, "| %s | %.0f (%s) | %.0f (%s) | %.2f |\n", lv.name, median(one), grantedName(r.OpensGranted["smb-"+lv.key]),
			median(dual), grantedName(r.OpensGranted["dual-"+lv.key]), median(ratios))
	}
	return b.String()
}

// grantedName names the oplock levels granted, as smb2_holder.py lists them.
func grantedName(levels string) string {
	names := map[string]string{"0": "none", "1": "level II", "8": "exclusive", "9": "batch", "255": "lease"}
	var out []string
	for _, l := range strings.Split(levels, ",") {
		n, ok := names[l]
		if !ok {
			n = l
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return strings.Join(out, ", ")
}
