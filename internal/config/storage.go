package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
)

// CephFS is where a cephfs:// storage URL puts volumes: subvolumes of FS's
// subvolume group Group, made by the cephx user ID (docs/architecture.md lists
// the caps it needs), through the cluster Conf names.
type CephFS struct {
	ID, FS, Group string
	Conf, Keyring string
	// NFSRecoveryPool, if set, is the RADOS pool where the NFS sandboxes'
	// Ganeshas keep their NFSv4 client records (namespace Group), as the
	// cephx user NFSRecoveryID (default "basin-ganesha") whose keyring is
	// NFSRecoveryKeyring (default ceph.client.ID.keyring beside conf).
	NFSRecoveryPool, NFSRecoveryID, NFSRecoveryKeyring string
}

// The defaults of a cephfs:// URL's parts.
const (
	DefaultCephID    = "basin"
	DefaultCephFS    = "cephfs"
	DefaultCephGroup = "basin"
	DefaultCephConf  = "/etc/ceph/ceph.conf"
	// DefaultNFSRecoveryID is the cephx user of the NFS sandboxes' recovery
	// records (nfs_recovery_id).
	DefaultNFSRecoveryID = "basin-ganesha"
)

// cephNameRE is what Basin accepts as a cephx user, file system or subvolume
// group name: they are passed as command arguments and written into Ganesha's
// configuration, so nothing either treats specially; and no leading '_', which
// marks the volumes module's own groups (_nogroup, _deleting, _index).
var cephNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// IsCephFSURL reports whether v selects the CephFS backend.
func IsCephFSURL(v string) bool { return strings.HasPrefix(v, "cephfs://") }

// ParseCephFS parses cephfs://[ID@][FS][/GROUP][?conf=PATH&keyring=PATH]
// [&nfs_recovery_pool=POOL[&nfs_recovery_id=ID][&nfs_recovery_keyring=PATH]].
// ID defaults to "basin", FS to "cephfs", GROUP to "basin", conf to
// /etc/ceph/ceph.conf and keyring to the conf's directory's
// ceph.client.ID.keyring (Ceph's own default). A key in the URL is refused: the
// keyring file holds it.
func ParseCephFS(s string) (CephFS, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "cephfs" || u.Opaque != "" {
		return CephFS{}, fmt.Errorf("--storage %q: want cephfs://[ID@][FS][/GROUP][?conf=PATH&keyring=PATH]", s)
	}
	if u.Fragment != "" {
		return CephFS{}, fmt.Errorf("--storage %q: a cephfs:// URL has no #fragment", s)
	}
	c := CephFS{ID: DefaultCephID, FS: DefaultCephFS, Group: DefaultCephGroup, Conf: DefaultCephConf}
	if u.User != nil {
		if _, set := u.User.Password(); set {
			return CephFS{}, fmt.Errorf("--storage %q: no key in the URL (a command line is visible to every user): put it in the keyring file", s)
		}
		c.ID = u.User.Username()
	}
	if u.Host != "" {
		c.FS = u.Host
	}
	if g := strings.TrimPrefix(u.Path, "/"); g != "" {
		c.Group = g
	}
	for _, p := range []struct{ part, v string }{{"user", c.ID}, {"file system", c.FS}, {"subvolume group", c.Group}} {
		if !cephNameRE.MatchString(p.v) {
			return CephFS{}, fmt.Errorf("--storage %q: %s %q: use letters, digits, '.', '_' and '-', at most 63", s, p.part, p.v)
		}
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return CephFS{}, fmt.Errorf("--storage %q: query: %w", s, err)
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return CephFS{}, fmt.Errorf("--storage %q: %s given %d times", s, k, len(vs))
		}
		v := vs[0]
		switch k {
		case "conf":
			c.Conf = v
		case "keyring":
			c.Keyring = v
		case "nfs_recovery_keyring":
			c.NFSRecoveryKeyring = v
		case "nfs_recovery_pool", "nfs_recovery_id":
			if !cephNameRE.MatchString(v) {
				return CephFS{}, fmt.Errorf("--storage %q: %s %q: use letters, digits, '.', '_' and '-', at most 63", s, k, v)
			}
			if k == "nfs_recovery_pool" {
				c.NFSRecoveryPool = v
			} else {
				c.NFSRecoveryID = v
			}
			continue
		default:
			return CephFS{}, fmt.Errorf("--storage %q: unknown parameter %q (want conf, keyring, nfs_recovery_pool, nfs_recovery_id or nfs_recovery_keyring)", s, k)
		}
		if !filepath.IsAbs(v) || filepath.Clean(v) != v {
			return CephFS{}, fmt.Errorf("--storage %q: %s must be a clean absolute path, got %q", s, k, v)
		}
	}
	if c.Keyring == "" {
		c.Keyring = filepath.Join(filepath.Dir(c.Conf), "ceph.client."+c.ID+".keyring")
	}
	if c.NFSRecoveryPool == "" {
		if c.NFSRecoveryID != "" || c.NFSRecoveryKeyring != "" {
			return CephFS{}, fmt.Errorf("--storage %q: nfs_recovery_id and nfs_recovery_keyring need nfs_recovery_pool", s)
		}
		return c, nil
	}
	if c.NFSRecoveryID == "" {
		c.NFSRecoveryID = DefaultNFSRecoveryID
	}
	if c.NFSRecoveryID == c.ID {
		return CephFS{}, fmt.Errorf("--storage %q: nfs_recovery_id must be a user of its own, not %q: its key is in every NFS sandbox", s, c.ID)
	}
	if c.NFSRecoveryKeyring == "" {
		c.NFSRecoveryKeyring = filepath.Join(filepath.Dir(c.Conf), "ceph.client."+c.NFSRecoveryID+".keyring")
	}
	return c, nil
}

// CephNetwork is how the NFS sandboxes reach a Ceph cluster (--ceph-network
// BRIDGE,CIDR,FIRST-LAST): a link on Bridge, an existing bridge on the
// cluster's public network, whose subnet is Prefix; the sandbox of the i-th
// network (in the order they are configured) takes address First+i, which
// must not pass Last.
type CephNetwork struct {
	Bridge      string
	Prefix      netip.Prefix
	First, Last netip.Addr
}

// ParseCephNetwork parses BRIDGE,CIDR,FIRST-LAST.
func ParseCephNetwork(s string) (CephNetwork, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 3 || parts[0] == "" {
		return CephNetwork{}, fmt.Errorf("--ceph-network %q: want BRIDGE,CIDR,FIRST-LAST", s)
	}
	if len(parts[0]) > 15 {
		return CephNetwork{}, fmt.Errorf("--ceph-network %q: bridge name longer than 15 characters", s)
	}
	p, err := netip.ParsePrefix(parts[1])
	if err != nil || !p.Addr().Is4() || p.Bits() > 30 {
		return CephNetwork{}, fmt.Errorf("--ceph-network %q: %q is not an IPv4 subnet", s, parts[1])
	}
	first, last, ok := strings.Cut(parts[2], "-")
	f, ferr := netip.ParseAddr(first)
	l, lerr := netip.ParseAddr(last)
	if !ok || ferr != nil || lerr != nil || l.Less(f) || !p.Contains(f) || !p.Contains(l) ||
		f == p.Masked().Addr() || l == lastAddr(p) {
		return CephNetwork{}, fmt.Errorf("--ceph-network %q: %q: want FIRST-LAST, host addresses of %s, FIRST not above LAST", s, parts[2], p.Masked())
	}
	return CephNetwork{Bridge: parts[0], Prefix: p.Masked(), First: f, Last: l}, nil
}

// lastAddr is p's broadcast address.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Addrs gives each of networks (by name) its sandbox's address on the Ceph
// network, with the subnet's prefix length; an error if the range is short.
func (c CephNetwork) Addrs(networks []Network) (map[string]netip.Prefix, error) {
	out := make(map[string]netip.Prefix, len(networks))
	a := c.First
	for i, n := range networks {
		if i > 0 {
			a = a.Next()
		}
		if c.Last.Less(a) {
			return nil, fmt.Errorf("--ceph-network %s-%s has %d addresses for %d networks", c.First, c.Last, i, len(networks))
		}
		out[n.Name] = netip.PrefixFrom(a, c.Prefix.Bits())
	}
	return out, nil
}

// MountAddr is the address, with the subnet's prefix length, the node's own
// CephFS mounts (ceph-fuse) reach the cluster from with --failover: the range's
// last, which the sandboxes of networks must leave free. Another node fences
// this one by blocklisting it with the sandboxes' addresses; without an
// address of their own, the mounts would share the host's with everything
// else on it.
func (c CephNetwork) MountAddr(networks []Network) (netip.Prefix, error) {
	top := c.First
	for range len(networks) {
		if top == c.Last {
			return netip.Prefix{}, fmt.Errorf("--ceph-network %s-%s has no address left for this node's volume mounts (--failover) beside its %d networks' sandboxes: make it one longer", c.First, c.Last, len(networks))
		}
		top = top.Next()
	}
	return netip.PrefixFrom(c.Last, c.Prefix.Bits()), nil
}
