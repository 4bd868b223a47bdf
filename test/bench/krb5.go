package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/bench"
	"github.com/basin-nas/basin/internal/client"
)

// secFlavors are the NFS security flavors the krb5 section measures, each
// against sys.
var secFlavors = []string{"sys", "krb5", "krb5i", "krb5p"}

// krb5FileSize is the file each flavor reads: laying out 1 GiB at krb5p would
// take longer than the measurements.
const krb5FileSize = 256 << 20

// krb5Section is the krb5 section's results, with its own date and machine.
type krb5Section struct {
	Date     string       `json:"date"`
	Machine  string       `json:"machine"`
	Rounds   int          `json:"rounds"`
	Patterns []krb5Result `json:"patterns"`
}

// krb5Result is one pattern of the krb5 section: the rates per flavor, and
// how busy the client (this process: basin bench's engine) and Ganesha kept
// the CPUs, in cores (CPU seconds per second), medians of the rounds.
type krb5Result struct {
	patternResult
	ClientCores map[string]float64 `json:"clientCores"`
	ServerCores map[string]float64 `json:"serverCores"`
	// Resent counts the calls sent again after 5 s without a reply, per
	// flavor, over the pattern's runs (each stalled its run).
	Resent map[string]int64 `json:"resent,omitempty"`
}

// runKrb5 measures NFSv4.1 through Basin volumes of the domain's pool with
// basin bench's NFSv4.1 engine from the host, one connection: at sys on a
// volume without Kerberos, and at krb5, krb5i and krb5p as the domain user
// alice (a ticket from the real DC) on a Kerberos volume; the four
// interleaved in each round.
func runKrb5(ctx context.Context, c *client.Client, dataDir string, runs int, secs float64) []krb5Result {
	dc := domain(ctx, c, dataDir)
	rule := map[string]any{"allowedClients": benchHost, "accessType": "READ_WRITE", "nfsv4": true, "hasRootAccess": "false",
		"kerberos5ReadWrite": true, "kerberos5iReadWrite": true, "kerberos5pReadWrite": true}
	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId=krbvol", map[string]any{"shareName": "krbvol", "storagePool": "smb", "capacityGib": 64,
		"protocols": []string{"NFSV4"}, "kerberosEnabled": true, "unixPermissions": "0777", "exportPolicy": map[string]any{"rules": []any{rule}}}))
	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId=sysvol", map[string]any{"shareName": "sysvol", "storagePool": "smb", "capacityGib": 64,
		"protocols": []string{"NFSV4"}, "unixPermissions": "0777", "exportPolicy": map[string]any{"rules": []any{map[string]any{
			"allowedClients": benchHost, "accessType": "READ_WRITE", "nfsv4": true, "hasRootAccess": "false"}}}}))
	krbEP, server := nfsMount(ctx, c, "krbvol")
	sysEP, _ := nfsMount(ctx, c, "sysvol")
	conf := filepath.Join(dataDir, "krb5.conf")
	must(os.WriteFile(conf, []byte(fmt.Sprintf("[libdefaults]\n default_realm = %[1]s\n dns_lookup_kdc = false\n"+
		"[realms]\n %[1]s = {\n  kdc = %[2]s:88\n }\n", dc.Realm, dc.Addr)), 0o644))
	alice := dc.Users[0]
	log.Printf("krb5: Kerberos volume at %s (service principal nfs/%s), AUTH_SYS volume at %s", krbEP, server, sysEP)
	engine := func(sec string) *bench.NFS4 {
		if sec == "sys" {
			return &bench.NFS4{URL: "nfs://" + sysEP + "/sysvol", Sec: sec, UID: 1000, GID: 1000}
		}
		return &bench.NFS4{URL: "nfs://" + krbEP + "/krbvol", Sec: sec,
			Krb5: bench.Krb5{Conf: conf, User: alice.Name + "@" + dc.Realm, Password: alice.Password, Principal: "nfs/" + server}}
	}
	resent := map[string]int64{}
	run := func(sec string, p pattern, secs float64) (mibps, iops, client, server float64) {
		name := "k-" + sec + "-read"
		if p.RW == "write" || p.RW == "randwrite" {
			name = "k-" + sec + "-" + p.RW
		}
		e := engine(sec)
		defer e.Close()
		c0, s0, t0 := selfCPU(), ganeshaCPU(), time.Now()
		res, err := bench.Run(ctx, e, bench.Job{Name: name, RW: p.RW, BS: int64(p.BS), IODepth: p.QD, NumJobs: 1, NrFiles: 1,
			Size: krb5FileSize, Runtime: time.Duration(secs * float64(time.Second)), TimeBased: true}, nil)
		if err != nil {
			fatalf("basin bench nfs 4.1 sec=%s %s: %v", sec, p.Name, err)
		}
		wall := time.Since(t0).Seconds()
		if n := e.Resent(); n > 0 {
			resent[sec] += n
			log.Printf("krb5 %s %s: %d calls went unanswered for 5 s and were sent again", sec, p.Name, n)
		}
		var buf strings.Builder
		must(res.WriteJSON(&buf))
		mibps, iops = fioRate("basin bench", []byte(buf.String()))
		// The CPU of the whole run, lay-out and setup included: they are short
		// beside the timed part.
		return mibps, iops, (selfCPU() - c0).Seconds() / wall, (ganeshaCPU() - s0).Seconds() / wall
	}
	// Lay out each flavor's read file once.
	for _, sec := range secFlavors {
		run(sec, pattern{Name: "lay out", RW: "read", BS: 1 << 20, QD: 8}, 0.5)
	}
	resent = map[string]int64{}
	var out []krb5Result
	for _, p := range patterns {
		r := krb5Result{patternResult: patternResult{Pattern: p.Name}, ClientCores: map[string]float64{}, ServerCores: map[string]float64{}}
		samples := map[string][][2]float64{}
		cpu := map[string][][2]float64{}
		interleave(runs, len(secFlavors), func(k int) {
			sec := secFlavors[k]
			m, i, cl, sv := run(sec, p, secs)
			samples[sec] = append(samples[sec], [2]float64{m, i})
			cpu[sec] = append(cpu[sec], [2]float64{cl, sv})
		})
		r.MiBps, r.IOPS = medians(samples)
		r.Samples = samples
		r.ClientCores, r.ServerCores = medians(cpu)
		r.Resent, resent = resent, map[string]int64{}
		unit, get := r.headline()
		var line strings.Builder
		for _, sec := range secFlavors {
			fmt.Fprintf(&line, "; %s %.0f %s (%.2f of sys; client %.2f, Ganesha %.2f cores)", sec, get[sec], unit, r.ratio(sec, "sys"),
				r.ClientCores[sec], r.ServerCores[sec])
		}
		log.Printf("krb5 %s%s", p.Name, line.String())
		out = append(out, r)
	}
	return out
}

// nfsMount reads an NFS volume's endpoint and the server name of its mount
// option (exportFull SERVER:/share).
func nfsMount(ctx context.Context, c *client.Client, id string) (ep, server string) {
	var v client.Object
	must(c.Do(ctx, "GET", loc+"/volumes/"+id, nil, nil, &v))
	mos, _ := v["mountOptions"].([]any)
	if len(mos) == 0 {
		fatalf("volume %s: no mountOptions", id)
	}
	mo, _ := mos[0].(map[string]any)
	ep, _ = mo["ipAddress"].(string)
	full, _ := mo["exportFull"].(string)
	server, _, _ = strings.Cut(full, ":")
	if ep == "" || server == "" {
		fatalf("volume %s: mount option %v", id, mo)
	}
	return ep, strings.ToLower(server)
}

// ganeshaCPU is the CPU time of every ganesha.nfsd on the machine so far.
func ganeshaCPU() time.Duration {
	dirs, _ := os.ReadDir("/proc")
	var t time.Duration
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if comm, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "comm")); strings.TrimSpace(string(comm)) == "ganesha.nfsd" {
			t += procCPU(pid)
		}
	}
	return t
}

// krb5Markdown renders the section: per workload, the four flavors side by
// side with their ratios to sys, and the CPU each side spent.
func krb5Markdown(sec *krb5Section) string {
	res := sec.Patterns
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s; NFSv4.1 over one TCP connection with `basin bench --engine nfs --nfs-version 4.1 --sec …` "+
		"from the host (the server's bridge); sys on a volume without Kerberos, krb5* on a Kerberos volume as the domain user alice "+
		"with a ticket from a real Samba AD DC; both volumes of the same domain pool; %d rounds, the four flavors interleaved in each; "+
		"figures are medians of the rounds, ratios medians of each round's ratio. Reads read a 256 MiB file (in the server's page cache).\n\n", sec.Date, sec.Machine, sec.Rounds)
	b.WriteString("| workload | sys | krb5 | krb5i | krb5p | krb5 / sys | krb5i / sys | krb5p / sys |\n|---|---|---|---|---|---|---|---|\n")
	for _, x := range res {
		unit, get := x.headline()
		fmt.Fprintf(&b, "| %s | %.0f %s | %.0f %s | %.0f %s | %.0f %s | %.2f | %.2f | %.2f |\n", x.Pattern, get["sys"], unit, get["krb5"], unit,
			get["krb5i"], unit, get["krb5p"], unit, x.ratio("krb5", "sys"), x.ratio("krb5i", "sys"), x.ratio("krb5p", "sys"))
	}
	var drops []string
	for _, x := range res {
		for _, sec := range secFlavors {
			if n := x.Resent[sec]; n > 0 {
				drops = append(drops, fmt.Sprintf("%s at %s: %d", x.Pattern, sec, n))
			}
		}
	}
	if len(drops) > 0 {
		fmt.Fprintf(&b, "\nCalls Ganesha left unanswered, sent again after 5 s (each stalled a slot of its run; all rounds): %s.\n", strings.Join(drops, "; "))
	}
	b.WriteString("\nCPU the same runs kept busy, in cores (CPU seconds per second of the run): the client (basin bench's engine) / Ganesha.\n\n")
	b.WriteString("| workload | sys | krb5 | krb5i | krb5p |\n|---|---|---|---|---|\n")
	for _, x := range res {
		fmt.Fprintf(&b, "| %s |", x.Pattern)
		for _, sec := range secFlavors {
			fmt.Fprintf(&b, " %.2f / %.2f |", x.ClientCores[sec], x.ServerCores[sec])
		}
		b.WriteString("\n")
	}
	return b.String()
}
