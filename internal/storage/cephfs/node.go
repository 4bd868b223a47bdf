package cephfs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/basin-nas/basin/internal/mountinfo"
	"github.com/basin-nas/basin/internal/storage"
)

// What a Basin node does with the backend beside storage.Backend: the same
// lifecycle as btrfs's (internal/daemon).

// Release lets go of the cluster without unmounting anything: Basin stops with
// its data plane serving, the ceph-fuse mounts go on (each its own process),
// and the next Start adopts them.
func (b *Backend) Release() { b.Close() }

// Run returns when ctx ends: CephFS quotas need no watching (nothing to grow).
func (b *Backend) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Stop unmounts every volume and snapshot of this node, their ceph-fuse mounts
// (ending those processes) and the private mount holding them, and closes the
// connection to the cluster. Nothing on the cluster changes.
func (b *Backend) Stop(ctx context.Context) error {
	defer b.Close()
	return b.unmountNode(ctx)
}

// Teardown is Stop without a Start: what an earlier Basin left mounted.
func (b *Backend) Teardown(ctx context.Context) error { return b.Stop(ctx) }

// unmountNode detaches every volume with a mount point under fsDir, then
// unmounts fsDir itself.
func (b *Backend) unmountNode(ctx context.Context) error {
	if err := b.detachAll(ctx, nil); err != nil {
		return err
	}
	if ok, err := mountinfo.IsMountPoint(b.fsDir); err != nil || !ok {
		return err
	}
	return b.unmountPath(ctx, b.fsDir)
}

// detachAll detaches every volume mounted under fsDir. When a detach fails
// and again is set, again(key) has its go at it; what still fails is
// returned, all of it.
func (b *Backend) detachAll(ctx context.Context, again func(ctx context.Context, key string, err error) error) error {
	keys, err := b.attachedKeys()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, k := range keys {
		err := b.detach(ctx, k)
		if err != nil && again != nil {
			err = again(ctx, k, err)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// SharedStorage names the subvolume group every node of a cluster reaches
// alike: ceph:<fsid>/<file system>/<group> (model.Node.SharedStorage), the
// cluster's fsid as its monitors give it.
func (b *Backend) SharedStorage(ctx context.Context) (string, error) {
	conf, err := b.ClientConf(ctx)
	if err != nil {
		return "", err
	}
	fsid, ok := confValue(conf, "fsid")
	if !ok {
		return "", errors.New("the cluster's minimal ceph.conf has no fsid")
	}
	return "ceph:" + fsid + "/" + b.o.FS + "/" + b.o.Group, nil
}

// fenceExpiry is how long a fenced address stays blocklisted unless its node
// comes back first (and lets itself in again at start).
const fenceExpiry = 7 * 24 * time.Hour

var _ storage.ClientFencer = (*Backend)(nil)

// FenceClients implements storage.ClientFencer: every address goes on the
// OSD blocklist (any port, any nonce), which also makes the MDSs evict the
// sessions from there, so their caps no longer hold up other clients.
//
// The addresses go all at once: each command returns once the OSD map that
// lists its address is committed, and the monitors commit what came in
// together in one map (a node's sandboxes' and mounts' addresses one after
// the other cost a map each, a second of a failover's pause).
func (b *Backend) FenceClients(ctx context.Context, addrs []string) error {
	// The monitor takes a float, and refuses an integer: 604800.0, not
	// 604800 (what encoding/json writes for a float64).
	expire := json.Number(strconv.FormatFloat(fenceExpiry.Seconds(), 'f', 1, 64))
	cmds := make([]map[string]any, len(addrs))
	for i, a := range addrs {
		cmds[i] = map[string]any{"prefix": "osd blocklist", "blocklistop": "add", "addr": a + ":0/0", "expire": expire}
	}
	errs, err := b.ch.callAll(ctx, "mon", cmds)
	if err != nil {
		return fmt.Errorf("blocklist %s: %w", strings.Join(addrs, ", "), err)
	}
	for i, err := range errs {
		if err != nil {
			errs[i] = fmt.Errorf("blocklist %s: %w", addrs[i], err)
		}
	}
	return errors.Join(errs...)
}

// UnfenceClients implements storage.ClientFencer.
// The addresses go all at once, as FenceClients's do.
func (b *Backend) UnfenceClients(ctx context.Context, addrs []string) error {
	cmds := make([]map[string]any, len(addrs))
	for i, a := range addrs {
		cmds[i] = map[string]any{"prefix": "osd blocklist", "blocklistop": "rm", "addr": a + ":0/0"}
	}
	errs, err := b.ch.callAll(ctx, "mon", cmds)
	if err != nil {
		return fmt.Errorf("take %s off the blocklist: %w", strings.Join(addrs, ", "), err)
	}
	for i, err := range errs {
		if err != nil && errno(err) != syscall.ENOENT {
			errs[i] = fmt.Errorf("take %s off the blocklist: %w", addrs[i], err)
		} else {
			errs[i] = nil
		}
	}
	return errors.Join(errs...)
}

// confValue returns key's value in a ceph.conf ("key = value" lines).
func confValue(conf, key string) (string, bool) {
	for _, l := range strings.Split(conf, "\n") {
		k, v, ok := strings.Cut(l, "=")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// attachedKeys lists the volumes with a mount point under fsDir: a volume's
// key has no '@' (snapshots' mount points) and no glob character (detach
// globs for them).
func (b *Backend) attachedKeys() ([]string, error) {
	ents, err := os.ReadDir(b.fsDir)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range ents {
		if e.IsDir() && !strings.ContainsAny(e.Name(), "@*?[\\") {
			keys = append(keys, e.Name())
		}
	}
	return keys, nil
}

// VolumeUsedBytes is what the volume holds now, as the MDS counts it (the
// API's shrink check).
func (b *Backend) VolumeUsedBytes(ctx context.Context, key string) (int64, error) {
	u, err := b.Usage(ctx, key)
	return u.UsedBytes, err
}

// ClientConf is the least a client of the cluster needs in its ceph.conf: the
// cluster's fsid and its monitors' addresses (the monitors' own "config
// generate-minimal-conf"), for an NFS server serving volumes through FSAL_CEPH.
func (b *Backend) ClientConf(ctx context.Context) (string, error) {
	out, err := b.ch.call(ctx, "mon", map[string]any{"prefix": "config generate-minimal-conf"})
	if err != nil {
		return "", fmt.Errorf("cephfs: client configuration: %w", err)
	}
	if !strings.Contains(string(out), "mon_host") {
		return "", fmt.Errorf("cephfs: client configuration names no monitor: %q", out)
	}
	return string(out), nil
}
