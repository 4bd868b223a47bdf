package perf

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// AdviseOptions describe a client workload.
type AdviseOptions struct {
	Protocol   string  // nfsv3, nfsv4.1 or smb
	Clients    int     // how many clients share the volume and its target, evenly; default 1
	Kernel     string  // Linux kernel X.Y of the clients ("" = unknown)
	TargetIOPS float64 // the volume's, all clients together; or TargetMiB
	TargetMiB  float64
	LatencyMs  float64 // expected service latency; default 1 ms
	BS         int64   // block size in bytes; default 4 KiB (IOPS) or 1 MiB (MiB/s)
	OS         string  // linux (default) or windows
}

// Advice is one recommendation.
type Advice struct {
	ID      string `json:"id"`
	Setting string `json:"setting"`
	Command string `json:"command,omitempty"`
	Why     string `json:"why"`
}

// The services' rules (NetApp and Azure NetApp Files guides).
const (
	nfsv3SlotsPerConnection = 128 // sunrpc tcp_max_slot_table_entries default
	nfsv41SessionSlots      = 180 // NFSv4.1 session slots per connection
	manyClients             = 30  // beyond this many heavy clients, shrink slot tables
	nconnectMax             = 16
	smbChannels             = 4 // multichannel connections with RSS
	highBandwidthMiBps      = 500
)

// Advise turns a workload into client tuning.
func Advise(o AdviseOptions) ([]Advice, error) {
	o.Protocol = strings.ToLower(o.Protocol)
	switch o.Protocol {
	case "nfsv3", "nfsv4.1", "smb":
	default:
		return nil, fmt.Errorf("--protocol must be nfsv3, nfsv4.1 or smb, got %q", o.Protocol)
	}
	if o.OS == "" {
		o.OS = "linux"
	}
	if o.OS != "linux" && o.OS != "windows" {
		return nil, fmt.Errorf("--os must be linux or windows, got %q", o.OS)
	}
	if o.Clients <= 0 {
		o.Clients = 1
	}
	if o.LatencyMs <= 0 {
		o.LatencyMs = 1
	}
	if o.TargetIOPS < 0 || o.TargetMiB < 0 || (o.TargetIOPS > 0 && o.TargetMiB > 0) {
		return nil, fmt.Errorf("give one positive target: --target-iops or --target-mibps")
	}
	if o.BS <= 0 {
		o.BS = 4 << 10
		if o.TargetMiB > 0 {
			o.BS = 1 << 20
		}
	}
	// The targets are the volume's; each of the clients carries its share.
	iops := o.TargetIOPS
	if o.TargetMiB > 0 {
		iops = o.TargetMiB * (1 << 20) / float64(o.BS)
	}
	clientIOPS := iops / float64(o.Clients)
	mibps := clientIOPS * float64(o.BS) / (1 << 20)
	var out []Advice
	concurrency := 0.0 // per client
	if iops > 0 {
		concurrency = clientIOPS * o.LatencyMs / 1000
		why := fmt.Sprintf("Little's law: %.0f IOPS × %.2f ms latency = %.1f I/Os must be in flight", iops, o.LatencyMs, iops*o.LatencyMs/1000)
		if o.Clients > 1 {
			why += fmt.Sprintf(", %.1f on each of %d clients", concurrency, o.Clients)
		}
		out = append(out, Advice{ID: "concurrency", Setting: fmt.Sprintf("%.0f outstanding I/Os per client", math.Ceil(concurrency)),
			Command: fmt.Sprintf("fio --iodepth=%d --numjobs=1 (or iodepth × numjobs = %.0f)", int(math.Ceil(concurrency)), math.Ceil(concurrency)),
			Why:     why + "; fewer cannot reach the target, more only add queueing latency"})
	}
	switch o.Protocol {
	case "nfsv3", "nfsv4.1":
		out = append(out, nfsConnections(o, concurrency, mibps)...)
		slotTable := nfsv3SlotsPerConnection
		why := "128 slots per connection let one client keep the volume busy"
		if o.Clients > manyClients {
			slotTable = 16
			why = fmt.Sprintf("with %d heavy clients, 128 slots each can swamp the server's queues; 16 per connection shares it fairly", o.Clients)
		}
		out = append(out, Advice{ID: "slot-table", Setting: fmt.Sprintf("sunrpc.tcp_max_slot_table_entries=%d", slotTable),
			Command: fmt.Sprintf("echo 'options sunrpc tcp_max_slot_table_entries=%d' > /etc/modprobe.d/sunrpc.conf  # then reboot or reload sunrpc", slotTable), Why: why})
	case "smb":
		out = append(out, smbAdvice(o, mibps, concurrency)...)
	}
	out = append(out, Advice{ID: "placement", Setting: "clients near the volume",
		Why: "latency sets the concurrency needed (Little's law): keep clients on the volume's network, in the same site, with no router or VPN between them"})
	return out, nil
}

// smbAdvice is multichannel (for bandwidth or deep queues, and always on Windows,
// where it costs nothing) and protection where it is needed, with each OS's own
// commands: PowerShell on Windows, mount.cifs options on Linux.
func smbAdvice(o AdviseOptions, mibps, concurrency float64) []Advice {
	var out []Advice
	if o.OS == "windows" || mibps >= highBandwidthMiBps || concurrency > 64 {
		a := Advice{ID: "smb-multichannel", Setting: fmt.Sprintf("SMB Multichannel, %d connections", smbChannels),
			Why: fmt.Sprintf("one TCP connection's traffic is handled by one CPU at a time on each side; multichannel spreads a session over %d connections and so over cores (Basin's Samba has it on)", smbChannels)}
		if o.OS == "windows" {
			a.Setting += " with RSS"
			a.Command = "Get-SmbClientConfiguration | Select EnableMultiChannel; Get-SmbClientNetworkInterface  # RSS capable: True"
			a.Why += "; Windows opens several connections on one network interface only when both ends report it RSS capable"
		} else {
			a.Command = fmt.Sprintf("mount -t cifs //SERVER/share /mnt/share -o vers=3.1.1,multichannel,max_channels=%d,username=USER,domain=DOMAIN", smbChannels)
			if o.Kernel != "" && !kernelAtLeast(o.Kernel, 5, 8) {
				a.Setting = "upgrade the client kernel for SMB multichannel, or use several mounts"
				a.Command = ""
				a.Why = fmt.Sprintf("the Linux SMB client's multichannel (mount options multichannel, max_channels) works from 5.8 on; %s lacks it: mount the share %d times (different mount points, each with nosharesock, or they share one connection) to get %d connections",
					o.Kernel, smbChannels, smbChannels)
			}
		}
		out = append(out, a)
	}
	a := Advice{ID: "smb-signing-encryption", Setting: "signing and encryption only where needed",
		Why: "signing (AES-CMAC unless both ends negotiate AES-GMAC) and encryption (AES-GCM) cost CPU on both ends, most on large I/O; docs/benchmarks.md measures both against an unprotected connection, on Basin and on a bare smbd. " +
			"An ENCRYPT_DATA volume encrypts every connection; keep it to the shares whose data needs it"}
	if o.OS == "windows" {
		a.Command = "Set-SmbClientConfiguration -RequireSecuritySignature $false  # where policy allows"
	} else {
		a.Command = "mount -t cifs … -o vers=3.1.1  # no 'sign' where policy allows; 'seal' only for ENCRYPT_DATA volumes (their mount instructions include it)"
	}
	return append(out, a)
}

// nfsConnections sizes each client's NFS connections from its share of the load
// (concurrency in flight, MiB/s): enough for the requests in flight (slots per
// connection), and several for bandwidth; on Linux nconnect opens them. The
// connections and nconnect advice give the one number. Without a target there is
// nothing to size: no count, only the rule.
func nfsConnections(o AdviseOptions, concurrency, mibps float64) []Advice {
	slots, slotName := nfsv3SlotsPerConnection, "sunrpc slot table"
	if o.Protocol == "nfsv4.1" {
		slots, slotName = nfsv41SessionSlots, "session slots"
	}
	if concurrency == 0 {
		if o.OS != "linux" {
			return nil
		}
		return []Advice{{ID: "nconnect", Setting: "sized by a target: give --target-iops or --target-mibps",
			Why: fmt.Sprintf("without a target there is no load to size connections for; a client that keeps more than %d requests in flight (%s) or moves %d MiB/s or more wants nconnect=4 (Linux 5.3 or newer), and many clients with it can overload the server",
				slots, slotName, highBandwidthMiBps)}}
	}
	forSlots := max(1, int(math.Ceil(concurrency/float64(slots))))
	why := fmt.Sprintf("one %s connection carries at most %d requests at once (%s); %.1f in flight per client needs %d", o.Protocol, slots, slotName, concurrency, forSlots)
	n := forSlots
	if o.OS == "linux" && (forSlots > 1 || mibps >= highBandwidthMiBps) {
		// nconnect: 4, 6 or 8 usually suffice; at most 16.
		n = 8
		for _, c := range []int{4, 6, 8} {
			if forSlots <= c {
				n = c
				break
			}
		}
		n = min(max(n, forSlots), nconnectMax)
		if mibps >= highBandwidthMiBps {
			why += fmt.Sprintf("; %.0f MiB/s per client wants its requests spread over several TCP streams and server threads", mibps)
		}
	}
	conns := Advice{ID: "connections", Setting: fmt.Sprintf("%d TCP connection per client", n), Why: why}
	if n > 1 {
		conns.Setting = fmt.Sprintf("%d TCP connections per client", n)
	}
	if o.OS != "linux" {
		return []Advice{conns}
	}
	if n == 1 {
		return []Advice{conns, {ID: "nconnect", Setting: "no nconnect needed",
			Why: fmt.Sprintf("one connection carries each client's share (%.1f requests in flight, %.0f MiB/s); nconnect helps high-bandwidth clients, and many clients with it can overload the server", concurrency, mibps)}}
	}
	conns.Why += fmt.Sprintf(": nconnect=%d", n)
	a := Advice{ID: "nconnect", Setting: fmt.Sprintf("nconnect=%d", n),
		Command: fmt.Sprintf("mount -t nfs -o vers=%s,nconnect=%d,rsize=1048576,wsize=1048576,hard SERVER:/share /mnt/share",
			map[string]string{"nfsv3": "3", "nfsv4.1": "4.1"}[o.Protocol], n),
		Why: fmt.Sprintf("one mount opens the %d connections (4, 6 or 8 usually suffice; at most 16)", n)}
	if o.Kernel != "" && !kernelAtLeast(o.Kernel, 5, 3) {
		a.Setting = fmt.Sprintf("upgrade the client kernel for nconnect=%d", n)
		a.Command = ""
		a.Why = fmt.Sprintf("nconnect needs Linux 5.3 or newer; on %s every mount of one server address shares one TCP connection, so a client gets 1 of the %d", o.Kernel, n)
	}
	return []Advice{conns, a}
}

func kernelAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	maj, err := strconv.Atoi(parts[0])
	if err != nil {
		return false
	}
	mnr := 0
	if len(parts) > 1 {
		mnr, _ = strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	}
	return maj > major || (maj == major && mnr >= minor)
}
