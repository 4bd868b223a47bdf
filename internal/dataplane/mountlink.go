package dataplane

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/basin-nas/basin/internal/runner"
)

// MountLink is a network namespace that holds nothing but a link to the Ceph
// network (the sandboxes' kind: ceph0 on the Ceph bridge, refusing every
// connection that comes in), with one address of the node's own. A node with
// failover runs its CephFS mounts (ceph-fuse) in it, so that their sessions
// come from that address and not the host's: a node that takes over from this
// one blocklists it with the sandboxes' addresses (model.Node.FenceAddrs),
// which ends their sessions at once and with them the caps they held. Without
// it, a lost node's ceph-fuse kept its caps until the MDS timed its session
// out (60 s measured: an SMB client of a moved volume waited for it), and
// its buffered writes could still land after another node took over.
//
// Only the namespace's network is the link's: a process run in it with
// nsenter --net=Path enters nothing else, so its mounts are made in Basin's
// mount namespace, where they are served from.
type MountLink struct {
	Bridge string
	Addr   netip.Prefix
	run    runner.Runner
	// dataDir holds the record of the link made (mountLinkRecord), so that
	// one made under other flags is found and removed.
	dataDir string
	id      string
}

// mountLinkRecord is the file in the data directory naming the link made.
const mountLinkRecord = "mountlink"

// NewMountLink returns the link of the node with data directory dataDir, with
// address addr on bridge; Ensure makes it.
func NewMountLink(dataDir, bridge string, addr netip.Prefix, run runner.Runner) *MountLink {
	if run == nil {
		run = runner.Exec{}
	}
	// What the link's names share: two nodes on one host (each its own data
	// directory and address) never meet, and a restart finds its own.
	h := sha1.Sum([]byte(dataDir + "\x00" + bridge + "," + addr.String()))
	return &MountLink{Bridge: bridge, Addr: addr, run: run, dataDir: dataDir, id: hex.EncodeToString(h[:4])}
}

// Name is the network namespace's name (ip netns).
func (l *MountLink) Name() string { return mountNetns(l.id) }

// Path is the namespace's file, for nsenter --net.
func (l *MountLink) Path() string { return filepath.Join("/run/netns", l.Name()) }

// veth is the host end of the link (at most 15 characters).
func (l *MountLink) veth() string { return mountVeth(l.id) }

func mountNetns(id string) string { return "basin-cm-" + id }
func mountVeth(id string) string  { return "bcm" + id }

// Ensure makes the namespace and its link, or keeps them if they are whole;
// a part left over is removed and made again, and so is a link made before
// under other flags (the data directory's record names it). The storage
// detaches what was mounted before first (cephfs.Options.NetNS): nothing
// may be left in a namespace that goes.
func (l *MountLink) Ensure(ctx context.Context) error {
	if old, err := os.ReadFile(filepath.Join(l.dataDir, mountLinkRecord)); err == nil && strings.TrimSpace(string(old)) != l.id {
		if err := removeMountLink(ctx, l.run, strings.TrimSpace(string(old))); err != nil {
			return fmt.Errorf("the volume mounts' link made under other flags: %w", err)
		}
	}
	if l.whole(ctx) {
		return l.record()
	}
	if err := removeMountLink(ctx, l.run, l.id); err != nil {
		return err
	}
	ns := l.Name()
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", l.veth(), "type", "veth", "peer", "name", cephDev, "netns", ns},
		{"ip", "link", "set", l.veth(), "master", l.Bridge, "up"},
		{"ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/" + cephDev + "/disable_ipv6"},
		// Before the address: nothing gets in while the rules are not there.
		{"ip", "netns", "exec", ns, "nft", cephLinkRules},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", l.Addr.String(), "dev", cephDev},
		{"ip", "-n", ns, "link", "set", cephDev, "up"},
	}
	for _, argv := range steps {
		if _, err := l.run.Run(ctx, argv[0], argv[1:]...); err != nil {
			return fmt.Errorf("the volume mounts' Ceph link: %w", err)
		}
	}
	return l.record()
}

// record names the link in the data directory.
func (l *MountLink) record() error {
	return writeFileAtomic(filepath.Join(l.dataDir, mountLinkRecord), []byte(l.id+"\n"), 0o600)
}

// whole reports whether the namespace is there with its link up, on the
// bridge, with the address and the firewall.
func (l *MountLink) whole(ctx context.Context) bool {
	if !linkExistsAt(l.Path()) || !linkExists(l.veth()) {
		return false
	}
	master, err := filepath.EvalSymlinks(filepath.Join("/sys/class/net", l.veth(), "master"))
	if err != nil || filepath.Base(master) != l.Bridge {
		return false
	}
	// The host end up (IFF_UP).
	if flags, err := os.ReadFile(filepath.Join("/sys/class/net", l.veth(), "flags")); err != nil {
		return false
	} else if f, err := strconv.ParseUint(strings.TrimSpace(string(flags)), 0, 32); err != nil || f&1 == 0 {
		return false
	}
	out, err := exec.CommandContext(ctx, "ip", "-n", l.Name(), "-o", "addr", "show", "dev", cephDev, "up").Output()
	if err != nil || !strings.Contains(string(out), " "+l.Addr.String()+" ") {
		return false
	}
	return exec.CommandContext(ctx, "ip", "netns", "exec", l.Name(), "nft", "list", "table", "inet", "basin_ceph_link").Run() == nil
}

// Remove deletes the link and the namespace, and the record of them;
// removing what is not there is no error. A process still in the namespace
// loses its way to the cluster.
func (l *MountLink) Remove(ctx context.Context) error {
	if err := removeMountLink(ctx, l.run, l.id); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(l.dataDir, mountLinkRecord)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// RemoveRecordedMountLink removes the link the data directory's record names,
// whatever the flags are now (basin teardown), and the record.
func RemoveRecordedMountLink(ctx context.Context, dataDir string, run runner.Runner) error {
	old, err := os.ReadFile(filepath.Join(dataDir, mountLinkRecord))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if run == nil {
		run = runner.Exec{}
	}
	if err := removeMountLink(ctx, run, strings.TrimSpace(string(old))); err != nil {
		return err
	}
	return os.Remove(filepath.Join(dataDir, mountLinkRecord))
}

// DropUnusedMountLink removes the link the data directory's record names, and
// the record, unless a process still lives in its namespace: a node started
// without failover after one with it (crashed, its ceph-fuse mounts left
// serving through the link; the storage keeps live mounts) keeps the link
// until they are gone, and a later start removes it. It reports whether a
// link was kept for that.
func DropUnusedMountLink(ctx context.Context, dataDir string, run runner.Runner) (kept bool, err error) {
	old, err := os.ReadFile(filepath.Join(dataDir, mountLinkRecord))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	id := strings.TrimSpace(string(old))
	if pids, err := pidsInNetns(filepath.Join("/run/netns", mountNetns(id))); err != nil {
		return false, err
	} else if len(pids) > 0 {
		return true, nil
	}
	return false, RemoveRecordedMountLink(ctx, dataDir, run)
}

// pidsInNetns lists the processes whose network namespace is the one bound at
// path; none if path is not there.
func pidsInNetns(path string) ([]int, error) {
	var ns syscall.Stat_t
	if err := syscall.Stat(path, &ns); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) != nil {
			continue // gone, or a kernel thread we may not look at
		}
		if st.Dev == ns.Dev && st.Ino == ns.Ino {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// removeMountLink deletes the link with id and its namespace.
func removeMountLink(ctx context.Context, run runner.Runner, id string) error {
	if id == "" || strings.ContainsAny(id, "/ ") {
		return fmt.Errorf("a mounts' link record %q", id)
	}
	if err := deleteLink(ctx, run, mountVeth(id)); err != nil {
		return fmt.Errorf("delete the volume mounts' Ceph link: %w", err)
	}
	path := filepath.Join("/run/netns", mountNetns(id))
	if linkExistsAt(path) {
		if _, err := run.Run(ctx, "ip", "netns", "delete", mountNetns(id)); err != nil && linkExistsAt(path) {
			return fmt.Errorf("delete the volume mounts' namespace: %w", err)
		}
	}
	return nil
}
