package dataplane

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"

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
}

// NewMountLink returns the link with address addr on bridge; Ensure makes it.
func NewMountLink(bridge string, addr netip.Prefix, run runner.Runner) *MountLink {
	if run == nil {
		run = runner.Exec{}
	}
	return &MountLink{Bridge: bridge, Addr: addr, run: run}
}

// id is what the link's names share: two nodes on one host (each its own
// address) never meet.
func (l *MountLink) id() string {
	h := sha1.Sum([]byte(l.Bridge + "," + l.Addr.String()))
	return hex.EncodeToString(h[:4])
}

// Name is the network namespace's name (ip netns).
func (l *MountLink) Name() string { return "basin-cm-" + l.id() }

// Path is the namespace's file, for nsenter --net.
func (l *MountLink) Path() string { return filepath.Join("/run/netns", l.Name()) }

// veth is the host end of the link (at most 15 characters).
func (l *MountLink) veth() string { return "bcm" + l.id() }

// Ensure makes the namespace and its link, or keeps them if they are whole
// (the mounts of a Basin that crashed are in them); a part left over is
// removed and made again.
func (l *MountLink) Ensure(ctx context.Context) error {
	if l.whole(ctx) {
		return nil
	}
	if err := l.Remove(ctx); err != nil {
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
	return nil
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
	out, err := exec.CommandContext(ctx, "ip", "-n", l.Name(), "-o", "addr", "show", "dev", cephDev, "up").Output()
	if err != nil || !strings.Contains(string(out), " "+l.Addr.String()+" ") {
		return false
	}
	return exec.CommandContext(ctx, "ip", "netns", "exec", l.Name(), "nft", "list", "table", "inet", "basin_ceph_link").Run() == nil
}

// Remove deletes the link and the namespace; removing what is not there is
// no error. A process still in the namespace loses its way to the cluster.
func (l *MountLink) Remove(ctx context.Context) error {
	if err := deleteLink(ctx, l.run, l.veth()); err != nil {
		return fmt.Errorf("delete the volume mounts' Ceph link: %w", err)
	}
	if linkExistsAt(l.Path()) {
		if _, err := l.run.Run(ctx, "ip", "netns", "delete", l.Name()); err != nil && linkExistsAt(l.Path()) {
			return fmt.Errorf("delete the volume mounts' namespace: %w", err)
		}
	}
	return nil
}
