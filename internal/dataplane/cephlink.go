package dataplane

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
)

// CephLink joins every sandbox to a Ceph cluster's public network, for the
// exports its Ganesha serves through FSAL_CEPH (nfs.Export.Ceph): a second
// veth, ceph0 inside the sandbox, on Bridge (an existing bridge on that
// network), with the network's address in Addrs. ceph0 carries the
// connections Ganesha opens to the monitors, OSDs and MDSs and nothing else:
// the sandbox's firewall (nftables, cephLinkRules) takes in only packets of
// connections it opened and forwards nothing to or from it, and ceph0 has no
// IPv6, so nothing on the Ceph network reaches the NFS server, rpcbind or the
// SMB daemons listening in the sandbox, nor the tenants' network behind it.
type CephLink struct {
	Bridge string
	// Addrs: each network's (by name) sandbox's address and prefix on the
	// Ceph network. A network without one gets no link.
	Addrs map[string]netip.Prefix
	// Conf is the ceph.conf the sandbox's Ganesha reads: the monitors and the
	// cluster's fsid (cephfs.Backend.ClientConf).
	Conf string
	// Recovery, if set, is where Ganesha keeps its NFSv4 client records in
	// the cluster (nfs.RADOSRecovery), so that they outlive the node.
	Recovery *CephRecovery
}

// CephRecovery is a RADOS pool and namespace for Ganesha's NFSv4 recovery
// records and grace databases (one per sandbox: its node id is the sandbox's
// host name), and the cephx user ID, with Keyring its keyring file's
// contents, that may read and write there and nothing else.
type CephRecovery struct {
	Pool, Namespace, ID string
	Keyring             []byte
}

// radosRecovery is the RADOS_KV configuration of the sandbox's Ganesha; nil
// without RADOS recovery.
func (sb *sandbox) radosRecovery() *nfs.RADOSRecovery {
	if sb.ceph == nil || sb.ceph.Recovery == nil {
		return nil
	}
	r := sb.ceph.Recovery
	return &nfs.RADOSRecovery{CephConf: sb.cephConfPath(), UserID: r.ID, Pool: r.Pool, Namespace: r.Namespace, NodeID: sb.host,
		GraceOID: nfs.GraceOID(sb.host, 0)}
}

// recoveryKeyring is where the sandbox keeps the recovery user's keyring.
func (sb *sandbox) recoveryKeyring() string { return filepath.Join(sb.dir, "recovery.keyring") }

// joinGraceDB makes the sandbox's node id a member of its grace database
// (made if need be) with the Ganesha build's ganesha-rados-grace, run in the
// sandbox's network namespace (its Ceph link): rados_cluster refuses to
// start otherwise. Adding a member that is there already changes nothing.
func (sb *sandbox) joinGraceDB() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return sb.graceTool(ctx, "add")
}

// graceTool runs ganesha-rados-grace's command cmd (add, enforce) for the
// sandbox's node id on its grace database, in the sandbox's network namespace.
func (sb *sandbox) graceTool(ctx context.Context, cmd string) error {
	r := sb.radosRecovery()
	if r == nil {
		return nil
	}
	args := []string{"-t", pidString(sb.holder), "-m", "-n", "--", filepath.Join(sb.ganesha.prefix(), "bin", "ganesha-rados-grace"),
		"--cephconf", r.CephConf, "--userid", r.UserID, "--pool", r.Pool, "--ns", r.Namespace, "--oid", r.GraceOID, cmd, r.NodeID}
	if _, err := sb.run.Run(ctx, "nsenter", args...); err != nil {
		return fmt.Errorf("%s %s in its grace database %s/%s/%s: %w", cmd, r.NodeID, r.Pool, r.Namespace, r.GraceOID, err)
	}
	return nil
}

// cephDev is the link's name inside the sandbox.
const cephDev = "ceph0"

// cephVethName is the host end of a sandbox's Ceph link (at most 15 characters).
func cephVethName(n Network) string {
	h := sha1.Sum([]byte(n.Bridge))
	return "bsc" + hex.EncodeToString(h[:4])
}

// cephAddr is the sandbox's address on the Ceph network, if it has a link.
func (m *Manager) cephAddr(n Network) (netip.Prefix, bool) {
	if m.opts.Ceph == nil {
		return netip.Prefix{}, false
	}
	a, ok := m.opts.Ceph.Addrs[n.Name]
	return a, ok
}

// cephLinkSteps are the commands that give the sandbox in namespace ns its Ceph link.
func (m *Manager) cephLinkSteps(n Network, ns string) [][]string {
	addr, ok := m.cephAddr(n)
	if !ok {
		return nil
	}
	veth := cephVethName(n)
	return [][]string{
		{"ip", "link", "add", veth, "type", "veth", "peer", "name", cephDev, "netns", ns},
		{"ip", "link", "set", veth, "master", m.opts.Ceph.Bridge, "up"},
		{"ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/" + cephDev + "/disable_ipv6"},
		// Before the address: nothing gets in while the rules are not there.
		{"ip", "netns", "exec", ns, "nft", cephLinkRules},
		{"ip", "-n", ns, "addr", "add", addr.String(), "dev", cephDev},
		{"ip", "-n", ns, "link", "set", cephDev, "up"},
	}
}

// cephLinkRules is the sandbox's firewall for its Ceph link (one nft
// command): in, only what belongs to connections the sandbox opened (and the
// ICMP errors about them); through, nothing.
const cephLinkRules = `add table inet basin_ceph_link
add chain inet basin_ceph_link input { type filter hook input priority filter; policy accept; }
add rule inet basin_ceph_link input iifname "` + cephDev + `" ct state established,related accept
add rule inet basin_ceph_link input iifname "` + cephDev + `" drop
add chain inet basin_ceph_link forward { type filter hook forward priority filter; policy accept; }
add rule inet basin_ceph_link forward iifname "` + cephDev + `" drop
add rule inet basin_ceph_link forward oifname "` + cephDev + `" drop`

// ganeshaEnv is the environment of the sandbox's Ganesha: its private system
// bus, and with a Ceph link, its ceph.conf as $CEPH_CONF, where libcephfs
// looks first. (Not the CEPH block of ganesha.conf: FSAL_CEPH reads that
// block from the configuration it is first loaded with, which for an export
// added while Ganesha runs is the export's file, not ganesha.conf.)
func (sb *sandbox) ganeshaEnv() []string {
	env := []string{"DBUS_SYSTEM_BUS_ADDRESS=" + sb.busAddress()}
	env = append(env, sb.krb5Environ()...)
	if p := sb.cephConfPath(); p != "" {
		env = append(env, "CEPH_CONF="+p)
	}
	return env
}

// cephConfPath is the ceph.conf of the sandbox's Ganesha ("" without a link).
func (sb *sandbox) cephConfPath() string {
	if sb.ceph == nil {
		return ""
	}
	return filepath.Join(sb.dir, "ceph.conf")
}

// writeCephConf writes the sandbox's ceph.conf: the cluster's, with the
// client's logging and admin socket off (the sandbox has no /var/log/ceph or
// /run/ceph), its object cache bounded (16 MiB per export, each a libcephfs
// mount of its own; readahead and dirty data well inside it: readahead as
// large as the cache, Ceph's default, cost reads 7 %), and an export whose
// cluster does not answer failing in 15 s rather than holding Ganesha for
// libcephfs's 300.
func (sb *sandbox) writeCephConf() error {
	if sb.ceph == nil {
		return nil
	}
	conf := sb.ceph.Conf + "\n[client]\n\tlog_to_file = false\n\tlog_to_stderr = false\n\terr_to_stderr = true\n\tadmin_socket = \n\tclient_oc_size = 16777216\n\tclient_oc_max_dirty = 8388608\n\tclient_oc_target_dirty = 4194304\n\tclient_readahead_max_bytes = 4194304\n\tclient_mount_timeout = 15\n"
	if r := sb.ceph.Recovery; r != nil {
		if err := writeFileAtomic(sb.recoveryKeyring(), r.Keyring, 0o600); err != nil {
			return err
		}
		conf += fmt.Sprintf("[client.%s]\n\tkeyring = %s\n", r.ID, sb.recoveryKeyring())
	}
	return writeFileAtomic(sb.cephConfPath(), []byte(conf), 0o600)
}

// deleteCephLink removes the host end of n's Ceph link, if any.
func (m *Manager) deleteCephLink(ctx context.Context, n Network) error {
	if err := deleteLink(ctx, m.run, cephVethName(n)); err != nil {
		return fmt.Errorf("delete Ceph link: %w", err)
	}
	return nil
}
