// Package cephfs implements storage.Backend on CephFS: one subvolume per volume
// in a subvolume group of Basin's, created --namespace-isolated (its data in a
// RADOS namespace of its own) with its own cephx user whose caps are the
// subvolume's path and namespace. Capacity is the subvolume's quota, snapshots
// are subvolume snapshots (O(1)), a clone is the manager's background copy of a
// snapshot (EnsureVolume answers storage.ErrInProgress until it is whole), and
// a revert copies the snapshot's tree back into the live data.
//
// Cluster-scope work (create, resize, snapshot, clone, delete, usage) is
// commands to the manager's volumes module and the monitors, as Basin's own
// cephx user, over one RADOS client kept open (channel.go). Node-scope
// attachment is a ceph-fuse mount of the subvolume as the volume's own user on
// DataDir/cephfs/fs/<key>, which no sandbox sees; MountPath (DataDir/mounts/
// <key>, as btrfs's, where sandboxes see volumes) is a nosuid, nodev, noexec
// bind of it and a snapshot's mount a read-only bind of its .snap entry.
//
// docs/architecture.md ("A real Ceph cluster in tests") lists the Ceph
// behaviours this builds on, as measured.
package cephfs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/mountinfo"
	"github.com/basin-nas/basin/internal/runner"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/storage/localfs"
)

// Options says which cluster and where on this node.
type Options struct {
	// Conf is the cluster's ceph.conf (monitor addresses, fsid).
	Conf string
	// ID is Basin's own cephx user (without "client."), Keyring its keyring.
	// It needs no more caps than Caps gives (docs/architecture.md).
	ID, Keyring string
	// FS is the CephFS filesystem; default "cephfs".
	FS string
	// Group is the subvolume group holding Basin's volumes; default "basin".
	// Volumes' cephx users are named "<Group>.<key>".
	Group string
	// DataDir is the node's data directory: volumes show in DataDir/mounts,
	// as btrfs's; their ceph-fuse mounts and keyrings live under DataDir/cephfs.
	DataDir string
	// NetNS, if set, is the network namespace (its file, /run/netns/NAME)
	// the ceph-fuse mounts run in, entering no other namespace: a node with
	// failover gives them an address of their own there, which another node
	// blocklists to fence this one (dataplane.MountLink).
	NetNS string
	// Runner runs ceph-fuse, mount and umount; nil = runner.Exec.
	Runner runner.Runner
	// Logger; nil discards.
	Logger *slog.Logger
}

// Backend implements storage.Backend on CephFS.
type Backend struct {
	o      Options
	run    runner.Runner
	log    *slog.Logger
	keys   string // DataDir/cephfs/keys: the volumes' keyrings (0700)
	fsDir  string // DataDir/cephfs/fs: each volume's ceph-fuse mount (private)
	mounts string // DataDir/mounts: what sandboxes see (MountPath and the like)
	ch     *channel

	// monHost is the monitors' addresses as the monitors give them (with
	// NetNS, read once, by monitors): a mount in the namespace has no
	// resolver and no route but the Ceph network's, so it is given no names.
	monMu   sync.Mutex
	monHost string

	mu      sync.Mutex
	paths   map[string]string // key -> subvolume path, once read
	snaps   map[string]string // key@snap -> its entry in .snap, once found
	probing map[string]bool   // keys whose statfs probe has not returned
}

var _ storage.Backend = (*Backend)(nil)

// New returns a backend; Start readies it.
func New(o Options) *Backend {
	if o.FS == "" {
		o.FS = "cephfs"
	}
	if o.Group == "" {
		o.Group = "basin"
	}
	r := o.Runner
	if r == nil {
		r = runner.Exec{}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base := filepath.Join(o.DataDir, "cephfs")
	return &Backend{o: o, run: r, log: log, keys: filepath.Join(base, "keys"), fsDir: filepath.Join(base, "fs"),
		mounts: filepath.Join(o.DataDir, "mounts"), paths: map[string]string{}, snaps: map[string]string{}, probing: map[string]bool{}, ch: &channel{conf: o.Conf, id: o.ID, keyring: o.Keyring}}
}

// Start makes the node's directories (the ceph-fuse mounts' a private mount
// point of its own: they show nowhere else) and the subvolume group; all
// idempotent.
func (b *Backend) Start(ctx context.Context) error {
	for _, d := range []struct {
		path string
		mode fs.FileMode
	}{{b.keys, 0o700}, {b.fsDir, 0o700}, {b.mounts, 0o755}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	if ok, err := mountinfo.IsMountPoint(b.fsDir); err != nil {
		return err
	} else if !ok {
		if _, err := b.run.Run(ctx, "mount", "--bind", "--make-private", b.fsDir, b.fsDir); err != nil {
			return fmt.Errorf("cephfs: bind %s: %w", b.fsDir, err)
		}
	}
	if b.o.NetNS != "" {
		if err := b.dropOldMounts(ctx); err != nil {
			return fmt.Errorf("cephfs: %w", err)
		}
		if _, err := b.monitors(ctx); err != nil {
			return err
		}
	}
	if err := b.dropDeadMounts(ctx); err != nil {
		return fmt.Errorf("cephfs: %w", err)
	}
	if _, err := b.vol(ctx, "fs subvolumegroup create", nil); err != nil {
		return fmt.Errorf("cephfs: subvolume group %s: %w", b.o.Group, err)
	}
	return nil
}

// Close ends the backend's connection to the cluster (mounts stay).
func (b *Backend) Close() { b.ch.close() }

// Capabilities implements storage.Backend.
func (b *Backend) Capabilities() storage.Capabilities {
	return storage.Capabilities{AsyncClone: true, RevertCopies: true}
}

// mon runs a monitor command as Basin's user; its output is JSON.
func (b *Backend) mon(ctx context.Context, prefix string, args map[string]any) ([]byte, error) {
	return b.ch.call(ctx, "mon", command(prefix, args))
}

// vol runs a command of the manager's volumes module on Basin's filesystem and
// group (which Basin's caps are confined to); its output is JSON.
func (b *Backend) vol(ctx context.Context, prefix string, args map[string]any) ([]byte, error) {
	c := command(prefix, args)
	c["vol_name"] = b.o.FS
	c["group_name"] = b.o.Group
	return b.ch.call(ctx, "mgr", c)
}

// volJSON runs vol and decodes its output into v.
func (b *Backend) volJSON(ctx context.Context, v any, prefix string, args map[string]any) error {
	out, err := b.vol(ctx, prefix, args)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("ceph %s: %w", prefix, err)
	}
	return nil
}

func command(prefix string, args map[string]any) map[string]any {
	c := map[string]any{"prefix": prefix, "format": "json"}
	for k, v := range args {
		c[k] = v
	}
	return c
}

// info is what "fs subvolume info" says of a subvolume.
type info struct {
	BytesQuota json.RawMessage `json:"bytes_quota"` // a number, or "infinite"
	BytesUsed  int64           `json:"bytes_used"`
	Mode       uint32          `json:"mode"`
	Path       string          `json:"path"`
	State      string          `json:"state"`
}

func (i info) quota() int64 {
	n, _ := strconv.ParseInt(string(i.BytesQuota), 10, 64)
	return n
}

// info reads a subvolume's info; ok false if it does not exist.
func (b *Backend) info(ctx context.Context, key string) (info, bool, error) {
	var in info
	out, err := b.vol(ctx, "fs subvolume info", map[string]any{"sub_name": key})
	switch errno(err) {
	case syscall.ENOENT:
		return in, false, nil
	case syscall.EAGAIN: // a clone being copied: "not ready for operation info"
		in.State = "in-progress"
		return in, true, nil
	}
	if err != nil {
		return in, false, err
	}
	if err := json.Unmarshal(out, &in); err != nil {
		return in, false, fmt.Errorf("subvolume info %s: %w", key, err)
	}
	b.mu.Lock()
	b.paths[key] = in.Path
	b.mu.Unlock()
	return in, true, nil
}

// path is the subvolume's path in the filesystem.
func (b *Backend) path(ctx context.Context, key string) (string, error) {
	b.mu.Lock()
	p, ok := b.paths[key]
	b.mu.Unlock()
	if ok {
		return p, nil
	}
	in, ok, err := b.info(ctx, key)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("volume %s has no subvolume", key)
	}
	return in.Path, nil
}

// userID is the volume's cephx user (without "client.").
func (b *Backend) userID(key string) string { return b.o.Group + "." + key }

func (b *Backend) keyring(key string) string { return filepath.Join(b.keys, key+".keyring") }

// fsPath is where the volume's ceph-fuse mount is.
func (b *Backend) fsPath(key string) string { return filepath.Join(b.fsDir, key) }

// MountPath implements storage.Backend.
func (b *Backend) MountPath(key string) string { return filepath.Join(b.mounts, key) }

// SnapshotMountPath implements storage.Backend.
func (b *Backend) SnapshotMountPath(key, snap string) string {
	return filepath.Join(b.mounts, key+"@"+snap)
}

const snapDirSuffix = "@.snapshot"

// SnapshotDirPath implements storage.Backend.
func (b *Backend) SnapshotDirPath(key string) string {
	return filepath.Join(b.mounts, key+snapDirSuffix)
}

func (b *Backend) snapDir(key string) localfs.SnapDir {
	return localfs.SnapDir{RW: filepath.Join(b.fsDir, key+snapDirSuffix), RO: b.SnapshotDirPath(key)}
}

// EnsureVolume implements storage.Backend. A clone answers ErrInProgress while
// the manager copies; a clone that failed is removed and reported.
func (b *Backend) EnsureVolume(ctx context.Context, key string, sizeBytes int64, from *storage.SnapshotRef) error {
	in, ok, err := b.info(ctx, key)
	if err != nil {
		return err
	}
	if !ok {
		if from == nil {
			_, err = b.vol(ctx, "fs subvolume create", map[string]any{"sub_name": key, "size": sizeBytes, "namespace_isolated": true})
		} else {
			_, err = b.vol(ctx, "fs subvolume snapshot clone", map[string]any{"sub_name": from.VolumeKey, "snap_name": from.Snapshot,
				"target_sub_name": key, "target_group_name": b.o.Group})
			if errno(err) == syscall.ENOENT {
				return fmt.Errorf("snapshot %s@%s does not exist", from.VolumeKey, from.Snapshot)
			}
		}
		if err != nil {
			return fmt.Errorf("create %s: %w", key, err)
		}
		if in, _, err = b.info(ctx, key); err != nil {
			return err
		}
	}
	if from != nil {
		if done, err := b.cloneDone(ctx, key); err != nil || !done {
			return err
		}
	}
	if in.quota() != sizeBytes {
		if err := b.Resize(ctx, key, sizeBytes); err != nil {
			return err
		}
	}
	return b.authorize(ctx, key)
}

// cloneDone reports whether key's clone is whole: ErrInProgress while it is
// copied, an error (and the clone gone) if it failed.
func (b *Backend) cloneDone(ctx context.Context, key string) (bool, error) {
	st, err := b.cloneStatus(ctx, key)
	if err != nil {
		return false, err
	}
	switch st.State {
	case "", "complete":
		return true, nil
	case "pending", "in-progress":
		// Ceph 16 does not say how much is copied (its successors' clone
		// status does), and Basin's user cannot read the clone's own
		// statistics: no storage.Progress.
		return false, storage.ErrInProgress
	default:
		b.log.Warn("clone failed; removing it", "volume", key, "state", st.State)
		if _, err := b.vol(ctx, "fs subvolume rm", map[string]any{"sub_name": key, "force": true}); err != nil {
			return false, err
		}
		return false, fmt.Errorf("clone %s: %s", key, st.State)
	}
}

// cloneState is what "fs clone status" says of a clone: its state (pending,
// in-progress, complete, failed, canceled).
type cloneState struct {
	State string `json:"state"`
}

// cloneStatus reads key's clone status; State "" if key is not a clone (any
// more: a finished clone's status may be gone).
func (b *Backend) cloneStatus(ctx context.Context, key string) (cloneState, error) {
	var st struct {
		Status cloneState `json:"status"`
	}
	err := b.volJSON(ctx, &st, "fs clone status", map[string]any{"clone_name": key})
	if errno(err) == syscall.ENOTSUP || errno(err) == syscall.EINVAL || errno(err) == syscall.ENOENT {
		return cloneState{}, nil
	}
	return st.Status, err
}

// authorize gives the volume its cephx user (path and namespace caps, made by
// the volumes module) and keeps its keyring on this node.
func (b *Backend) authorize(ctx context.Context, key string) error {
	if _, err := os.Stat(b.keyring(key)); err == nil {
		return nil
	}
	id := b.userID(key)
	if _, err := b.vol(ctx, "fs subvolume authorize", map[string]any{"sub_name": key, "auth_id": id, "access_level": "rw"}); err != nil {
		return fmt.Errorf("authorize %s: %w", key, err)
	}
	ring, err := b.ch.call(ctx, "mon", map[string]any{"prefix": "auth get", "entity": "client." + id})
	if err != nil {
		return err
	}
	tmp := b.keyring(key) + ".new"
	if err := os.WriteFile(tmp, ring, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, b.keyring(key))
}

// Resize implements storage.Backend: never below what the volume holds.
func (b *Backend) Resize(ctx context.Context, key string, sizeBytes int64) error {
	_, err := b.vol(ctx, "fs subvolume resize", map[string]any{"sub_name": key, "new_size": strconv.FormatInt(sizeBytes, 10), "no_shrink": true})
	var ce *cmdError
	if errors.As(err, &ce) && ce.Errno == syscall.EINVAL && strings.Contains(ce.Msg, "lesser than the current used size") {
		return storage.ErrTooSmall
	}
	if err != nil {
		return fmt.Errorf("resize %s: %w", key, err)
	}
	return nil
}

// SetMode implements storage.Backend, through the volume's own mount.
func (b *Backend) SetMode(ctx context.Context, key string, mode fs.FileMode) error {
	if err := b.attach(ctx, key); err != nil {
		return err
	}
	if err := os.Chmod(b.fsPath(key), mode); err != nil {
		return fmt.Errorf("chmod %s: %w", key, err)
	}
	return nil
}

// attach mounts the subvolume with ceph-fuse, as the volume's own user, on
// fsPath (if it is not).
func (b *Backend) attach(ctx context.Context, key string) error {
	mp := b.fsPath(key)
	if dead, err := b.dropIfDead(ctx, key); err != nil || !dead {
		if e, ok, err := mountinfo.Lookup(mp); err != nil || (ok && e.FSType == "fuse.ceph-fuse") {
			return err
		}
	}
	p, err := b.path(ctx, key)
	if err != nil {
		return err
	}
	if err := b.authorize(ctx, key); err != nil {
		return err
	}
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return err
	}
	name, args := "ceph-fuse", []string{"--conf", b.o.Conf, "--id", b.userID(key), "--keyring", b.keyring(key),
		"--client_mountpoint", p, mp, "-o", "nosuid,nodev,noexec"}
	if b.o.NetNS != "" {
		// The monitors by address, and a mount that cannot reach them
		// failing in 30 s, not libcephfs's 300.
		mons, err := b.monitors(ctx)
		if err != nil {
			return err
		}
		args = append(args, "--mon_host", mons, "--client_mount_timeout", "30")
		name, args = "nsenter", append([]string{"--net=" + b.o.NetNS, "--", name}, args...)
	}
	if _, err := b.run.Run(ctx, name, args...); err != nil {
		return fmt.Errorf("mount %s: %w", key, err)
	}
	return nil
}

// monitors is the cluster's mon_host, asked of the monitors the first time.
func (b *Backend) monitors(ctx context.Context) (string, error) {
	b.monMu.Lock()
	defer b.monMu.Unlock()
	if b.monHost != "" {
		return b.monHost, nil
	}
	conf, err := b.ClientConf(ctx)
	if err != nil {
		return "", err
	}
	v, _ := confValue(conf, "mon_host")
	if v == "" {
		return "", fmt.Errorf("cephfs: the monitors' minimal configuration has no mon_host: %q", conf)
	}
	b.monHost = v
	return v, nil
}

// dropOldMounts detaches every volume left mounted from before, with NetNS: a
// failover node keeps nothing of its data plane across a restart, and a
// ceph-fuse that outlived a crash of Basin may have been fenced since (its
// session evicted, it never reconnects: kept, it would serve errors once its
// address is let back in). A ceph-fuse that does not end after its unmount
// is killed, and the volume detached again.
func (b *Backend) dropOldMounts(ctx context.Context) error {
	return b.detachAll(ctx, func(ctx context.Context, k string, err error) error {
		b.log.Warn("a volume mounted before this start did not come down: killing its ceph-fuse", "volume", k, "err", err)
		for _, pid := range fuseServing(b.fsPath(k)) {
			syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // gone is fine
		}
		return b.detach(ctx, k)
	})
}

// dropIfDead detaches volume key when its ceph-fuse mount is there but no
// ceph-fuse serves it (killed, out of memory, or gone with a node that was
// cut off): the mount and every bind of it answer "transport endpoint is not
// connected" until unmounted. It reports whether it did.
func (b *Backend) dropIfDead(ctx context.Context, key string) (bool, error) {
	mp := b.fsPath(key)
	e, ok, err := mountinfo.Lookup(mp)
	if err != nil || !ok || e.FSType != "fuse.ceph-fuse" || len(fuseServing(mp)) > 0 {
		return false, err
	}
	b.log.Warn("the volume's ceph-fuse is gone: unmounting what it left, to mount it again", "volume", key)
	return true, b.detach(ctx, key)
}

// dropDeadMounts detaches every volume whose ceph-fuse is gone (dropIfDead):
// at start, before anything observes the volumes.
func (b *Backend) dropDeadMounts(ctx context.Context) error {
	keys, err := b.attachedKeys()
	if err != nil {
		return err
	}
	var errs []error
	for _, k := range keys {
		_, err := b.dropIfDead(ctx, k)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// shows reports whether mount point mp shows the directory at src.
func shows(mp, src string) (bool, error) {
	if m, err := mountinfo.IsMountPoint(mp); err != nil || !m {
		if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
		return false, err
	}
	var a, c unix.Stat_t
	if err := unix.Stat(mp, &a); err != nil {
		return false, err
	}
	if err := unix.Stat(src, &c); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	return a.Dev == c.Dev && a.Ino == c.Ino, nil
}

// Mount implements storage.Backend.
func (b *Backend) Mount(ctx context.Context, key string) error {
	if err := b.attach(ctx, key); err != nil {
		return err
	}
	mp := b.MountPath(key)
	if ok, err := shows(mp, b.fsPath(key)); err != nil || ok {
		return err
	}
	if err := b.unmountPath(ctx, mp); err != nil {
		return err
	}
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return err
	}
	return localfs.Bind(b.fsPath(key), mp, 0)
}

// Unmount implements storage.Backend.
func (b *Backend) Unmount(ctx context.Context, key string) error {
	return b.unmountPath(ctx, b.MountPath(key))
}

func (b *Backend) unmountPath(ctx context.Context, mp string) error {
	return localfs.Unmount(ctx, b.run, mp)
}

// detach unmounts everything of the volume on this node, its ceph-fuse mount
// last, and removes the mount points.
func (b *Backend) detach(ctx context.Context, key string) error {
	snaps, _ := filepath.Glob(filepath.Join(b.mounts, key+"@*"))
	for _, mp := range append(snaps, b.snapDir(key).RW, b.MountPath(key), b.fsPath(key)) {
		if err := b.unmountPath(ctx, mp); err != nil {
			return err
		}
		if err := os.Remove(mp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return waitFuseGone(ctx, b.fsPath(key))
}

// fuseExitTimeout bounds the wait for a ceph-fuse to end once its mount is
// gone (it closes its session with the MDS first).
const fuseExitTimeout = 20 * time.Second

// waitFuseGone waits until no ceph-fuse serves mount point mp (each serves
// one mount point of Basin's, named on its command line), so that a detached
// volume has nothing of it left running.
func waitFuseGone(ctx context.Context, mp string) error {
	deadline := time.Now().Add(fuseExitTimeout)
	for {
		pids := fuseServing(mp)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ceph-fuse %v of %s still running %s after its unmount", pids, mp, fuseExitTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fuseServing lists the ceph-fuse processes with mount point mp.
func fuseServing(mp string) []int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) != "ceph-fuse" || !slices.Contains(args, mp) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// DeleteVolume implements storage.Backend: the node's mounts, the snapshots,
// the volume's user (before its subvolume: the volumes module removes a user
// of a subvolume it knows), the subvolume and the keyring.
func (b *Backend) DeleteVolume(ctx context.Context, key string) error {
	if err := b.detach(ctx, key); err != nil {
		return err
	}
	// A clone not copied to the end (being copied, cancelled or failed) has
	// no snapshots nor user yet, and is removed only by force, once its copy
	// is cancelled.
	st, err := b.cloneStatus(ctx, key)
	if err != nil {
		return err
	}
	switch st.State {
	case "pending", "in-progress":
		if _, err := b.vol(ctx, "fs clone cancel", map[string]any{"clone_name": key}); err != nil && errno(err) != syscall.EINVAL {
			return fmt.Errorf("cancel the clone %s: %w", key, err)
		}
		fallthrough
	case "failed", "canceled":
		if _, err := b.vol(ctx, "fs subvolume rm", map[string]any{"sub_name": key, "force": true}); err != nil && errno(err) != syscall.ENOENT {
			return fmt.Errorf("delete the unfinished clone %s: %w", key, err)
		}
		return b.forget(key)
	}
	snaps, err := b.snapshotNames(ctx, key)
	if err != nil {
		return err
	}
	for _, s := range snaps {
		if err := b.DeleteSnapshot(ctx, key, s); err != nil {
			return err
		}
	}
	if _, err := b.vol(ctx, "fs subvolume deauthorize", map[string]any{"sub_name": key, "auth_id": b.userID(key)}); err != nil && errno(err) != syscall.ENOENT {
		return fmt.Errorf("deauthorize %s: %w", key, err)
	}
	if _, err := b.vol(ctx, "fs subvolume rm", map[string]any{"sub_name": key}); err != nil && errno(err) != syscall.ENOENT {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return b.forget(key)
}

// forget drops what the node keeps of a deleted volume: its path, its
// snapshot directory's entries and its keyring.
func (b *Backend) forget(key string) error {
	b.mu.Lock()
	delete(b.paths, key)
	b.mu.Unlock()
	b.forgetSnapEntries(key, "")
	if err := os.Remove(b.keyring(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// ObserveVolume implements storage.Backend.
func (b *Backend) ObserveVolume(ctx context.Context, key string) (storage.VolumeStatus, error) {
	in, ok, err := b.info(ctx, key)
	if err != nil || !ok {
		return storage.VolumeStatus{}, err
	}
	return b.status(key, in)
}

func (b *Backend) status(key string, in info) (storage.VolumeStatus, error) {
	st := storage.VolumeStatus{Exists: in.State == "complete", CapacityBytes: in.quota(), UsedBytes: in.BytesUsed,
		Mode: fs.FileMode(in.Mode) & fs.ModePerm}
	if !st.Exists {
		return storage.VolumeStatus{}, nil
	}
	mounted, err := shows(b.MountPath(key), b.fsPath(key))
	st.Mounted = mounted
	return st, err
}

// ObserveVolumes implements storage.Backend.
func (b *Backend) ObserveVolumes(ctx context.Context) (map[string]storage.VolumeStatus, error) {
	keys, err := b.subvolumeNames(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]storage.VolumeStatus{}
	for _, k := range keys {
		st, err := b.ObserveVolume(ctx, k)
		if err != nil {
			return nil, err
		}
		if st.Exists {
			out[k] = st
		}
	}
	return out, nil
}

func (b *Backend) subvolumeNames(ctx context.Context) ([]string, error) {
	var ls []struct {
		Name string `json:"name"`
	}
	if err := b.volJSON(ctx, &ls, "fs subvolume ls", nil); err != nil {
		return nil, err
	}
	names := make([]string, len(ls))
	for i, s := range ls {
		names[i] = s.Name
	}
	return names, nil
}

// Inventory implements storage.Backend.
func (b *Backend) Inventory(ctx context.Context) (storage.Inventory, error) {
	inv := storage.Inventory{Snapshots: map[string][]string{}, Complete: map[string]bool{}}
	keys, err := b.subvolumeNames(ctx)
	if err != nil {
		return inv, err
	}
	for _, k := range keys {
		in, ok, err := b.info(ctx, k)
		if err != nil {
			return inv, err
		}
		if !ok {
			continue
		}
		inv.Volumes = append(inv.Volumes, k)
		inv.Complete[k] = in.State == "complete"
		if in.State == "in-progress" {
			continue // a clone being copied: no snapshots, and none to list
		}
		snaps, err := b.snapshotNames(ctx, k)
		if err != nil {
			return inv, err
		}
		if len(snaps) > 0 {
			inv.Snapshots[k] = snaps
		}
	}
	return inv, nil
}

// Usage implements storage.Backend: the live data as the MDS counts it (its
// recursive statistics lag writes by seconds); snapshots are listed with 0:
// CephFS does not count what a snapshot holds alone.
func (b *Backend) Usage(ctx context.Context, key string) (storage.Usage, error) {
	in, ok, err := b.info(ctx, key)
	if err != nil {
		return storage.Usage{}, err
	}
	if !ok {
		return storage.Usage{}, fmt.Errorf("volume %s has no subvolume", key)
	}
	snaps, err := b.snapshotNames(ctx, key)
	if err != nil {
		return storage.Usage{}, err
	}
	u := storage.Usage{UsedBytes: in.BytesUsed, SnapshotExclusive: map[string]int64{}}
	for _, s := range snaps {
		u.SnapshotExclusive[s] = 0
	}
	return u, nil
}

// StoreSpace implements storage.Backend: the filesystem's data pool's room
// (what it stores and may still store) and what is left of it after every
// volume's quota.
func (b *Backend) StoreSpace(ctx context.Context) (int64, int64, error) {
	var fss []struct {
		Name      string   `json:"name"`
		DataPools []string `json:"data_pools"`
	}
	out, err := b.mon(ctx, "fs ls", nil)
	if err == nil {
		err = json.Unmarshal(out, &fss)
	}
	if err != nil {
		return 0, 0, err
	}
	var pool string
	for _, f := range fss {
		if f.Name == b.o.FS && len(f.DataPools) > 0 {
			pool = f.DataPools[0]
		}
	}
	if pool == "" {
		return 0, 0, fmt.Errorf("filesystem %s has no data pool", b.o.FS)
	}
	var df struct {
		Pools []struct {
			Name  string `json:"name"`
			Stats struct {
				Stored   int64 `json:"stored"`
				MaxAvail int64 `json:"max_avail"`
			} `json:"stats"`
		} `json:"pools"`
	}
	out, err = b.mon(ctx, "df", nil)
	if err == nil {
		err = json.Unmarshal(out, &df)
	}
	if err != nil {
		return 0, 0, err
	}
	var size int64
	for _, p := range df.Pools {
		if p.Name == pool {
			size = p.Stats.Stored + p.Stats.MaxAvail
		}
	}
	keys, err := b.subvolumeNames(ctx)
	if err != nil {
		return 0, 0, err
	}
	free := size
	for _, k := range keys {
		in, ok, err := b.info(ctx, k)
		if err != nil {
			return 0, 0, err
		}
		if ok {
			free -= in.quota()
		}
	}
	return size, max(free, 0), nil
}

// ObserveHealth implements storage.Backend. The store is faulted read-only
// while the cluster says an OSD or a pool is full (CephFS then holds writes,
// and they are not acknowledged). A volume is faulted when its ceph-fuse mount
// answers read-only, fails, or does not answer statfs within probeTimeout (a
// cluster out of reach blocks it: the probe is left to finish in the
// background, and no second one is started for that volume meanwhile).
func (b *Backend) ObserveHealth(ctx context.Context) (storage.Health, error) {
	h := storage.Health{Volumes: map[string]storage.Fault{}}
	var health struct {
		Checks map[string]json.RawMessage `json:"checks"`
	}
	out, err := b.mon(ctx, "health", nil)
	if err == nil {
		err = json.Unmarshal(out, &health)
	}
	if err != nil {
		return h, err
	}
	for _, c := range []string{"OSD_FULL", "POOL_FULL"} {
		if _, ok := health.Checks[c]; ok {
			h.Store = storage.Fault{Reason: storage.FaultReadOnly, Detail: "the Ceph cluster reports " + c}
		}
	}
	keys, err := b.subvolumeNames(ctx)
	if err != nil {
		return h, err
	}
	for _, k := range keys {
		h.Volumes[k] = b.probe(k)
	}
	return h, nil
}

// probeTimeout bounds how long a volume's mount may take to answer statfs.
const probeTimeout = 5 * time.Second

// probe statfs's a volume's ceph-fuse mount, if it has one.
func (b *Backend) probe(key string) storage.Fault {
	mp := b.fsPath(key)
	e, ok, err := mountinfo.Lookup(mp)
	if err != nil || !ok {
		return storage.Fault{}
	}
	b.mu.Lock()
	if b.probing[key] {
		b.mu.Unlock()
		return storage.Fault{Reason: storage.FaultIOErrors, Detail: mp + " has not answered statfs yet"}
	}
	b.probing[key] = true
	b.mu.Unlock()
	done := make(chan error, 1)
	var st unix.Statfs_t
	go func() {
		err := unix.Statfs(mp, &st)
		b.mu.Lock()
		delete(b.probing, key)
		b.mu.Unlock()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return storage.Fault{Reason: storage.FaultIOErrors, Detail: "statfs " + mp + ": " + err.Error()}
		}
		if st.Flags&unix.ST_RDONLY != 0 || strings.HasPrefix(e.Options, "ro") {
			return storage.Fault{Reason: storage.FaultReadOnly, Detail: mp + " is read-only"}
		}
		return storage.Fault{}
	case <-time.After(probeTimeout):
		return storage.Fault{Reason: storage.FaultIOErrors, Detail: mp + " did not answer statfs within " + probeTimeout.String()}
	}
}

// snapEntry is the path of a snapshot in the volume's own mount: its entry in
// the subvolume's .snap, _<name>_<inode of the subvolume's directory>. The
// entry's name, the same for the snapshot's whole life, is remembered: a
// .snap listing goes to the MDS, and the controller asks for every snapshot of
// every volume at each pass.
func (b *Backend) snapEntry(key, snap string) (string, error) {
	dir := filepath.Join(b.fsPath(key), ".snap")
	id := key + "@" + snap
	b.mu.Lock()
	name, ok := b.snaps[id]
	b.mu.Unlock()
	if ok {
		return filepath.Join(dir, name), nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	re := regexp.MustCompile("^_" + regexp.QuoteMeta(snap) + "_[0-9]+$")
	for _, e := range ents {
		if re.MatchString(e.Name()) {
			b.mu.Lock()
			b.snaps[id] = e.Name()
			b.mu.Unlock()
			return filepath.Join(dir, e.Name()), nil
		}
	}
	return "", fmt.Errorf("snapshot %s not found in %s", snap, dir)
}

// forgetSnapEntries forgets the .snap entries of key's snapshots (snap "":
// all of them).
func (b *Backend) forgetSnapEntries(key, snap string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id := range b.snaps {
		if id == key+"@"+snap || (snap == "" && strings.HasPrefix(id, key+"@")) {
			delete(b.snaps, id)
		}
	}
}

func (b *Backend) snapshotNames(ctx context.Context, key string) ([]string, error) {
	var ls []struct {
		Name string `json:"name"`
	}
	err := b.volJSON(ctx, &ls, "fs subvolume snapshot ls", map[string]any{"sub_name": key})
	if errno(err) == syscall.ENOENT {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ls))
	for i, s := range ls {
		names[i] = s.Name
	}
	return names, nil
}

// ObserveSnapshots implements storage.Backend.
func (b *Backend) ObserveSnapshots(ctx context.Context, key string) (map[string]storage.SnapshotStatus, error) {
	names, err := b.snapshotNames(ctx, key)
	if err != nil {
		return nil, err
	}
	out := map[string]storage.SnapshotStatus{}
	for _, n := range names {
		st := storage.SnapshotStatus{Exists: true}
		if m, err := mountinfo.IsMountPoint(b.SnapshotMountPath(key, n)); err == nil && m {
			if src, err := b.snapEntry(key, n); err == nil {
				st.Mounted, _ = shows(b.SnapshotMountPath(key, n), src)
			}
		}
		out[n] = st
	}
	return out, nil
}

// EnsureSnapshot implements storage.Backend: O(1), and it needs no free space.
func (b *Backend) EnsureSnapshot(ctx context.Context, key, snap string) error {
	if _, err := b.vol(ctx, "fs subvolume snapshot create", map[string]any{"sub_name": key, "snap_name": snap}); err != nil {
		if errno(err) == syscall.ENOENT {
			return fmt.Errorf("volume %s has no subvolume", key)
		}
		return fmt.Errorf("snapshot %s@%s: %w", key, snap, err)
	}
	return nil
}

// DeleteSnapshot implements storage.Backend.
func (b *Backend) DeleteSnapshot(ctx context.Context, key, snap string) error {
	if err := b.UnmountSnapshot(ctx, key, snap); err != nil {
		return err
	}
	_, err := b.vol(ctx, "fs subvolume snapshot rm", map[string]any{"sub_name": key, "snap_name": snap})
	if err != nil && errno(err) != syscall.ENOENT {
		return fmt.Errorf("delete snapshot %s@%s: %w", key, snap, err)
	}
	b.forgetSnapEntries(key, snap)
	return nil
}

// MountSnapshot implements storage.Backend: a read-only bind of the
// snapshot's .snap entry in the volume's own mount.
func (b *Backend) MountSnapshot(ctx context.Context, key, snap string) error {
	if err := b.attach(ctx, key); err != nil {
		return err
	}
	src, err := b.snapEntry(key, snap)
	if err != nil {
		return fmt.Errorf("snapshot %s@%s does not exist", key, snap)
	}
	mp := b.SnapshotMountPath(key, snap)
	if ok, err := shows(mp, src); err != nil || ok {
		return err
	}
	if err := b.unmountPath(ctx, mp); err != nil {
		return err
	}
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return err
	}
	if err := localfs.BindReadOnly(src, mp); err != nil {
		return err
	}
	return b.snapDir(key).List(snap, true)
}

// UnmountSnapshot implements storage.Backend: out of the snapshot directory
// first.
func (b *Backend) UnmountSnapshot(ctx context.Context, key, snap string) error {
	return b.snapDir(key).UnmountSnapshot(ctx, b.run, snap, b.SnapshotMountPath(key, snap))
}

// MountSnapshotDir implements storage.Backend.
func (b *Backend) MountSnapshotDir(ctx context.Context, key string) error {
	if _, ok, err := b.info(ctx, key); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("volume %s has no subvolume", key)
		}
		return err
	}
	snaps, err := b.ObserveSnapshots(ctx, key)
	if err != nil {
		return err
	}
	var mounted []string
	for n, st := range snaps {
		if st.Mounted {
			mounted = append(mounted, n)
		}
	}
	return b.snapDir(key).Mount(mounted, func(p string) error { return b.unmountPath(ctx, p) })
}

// UnmountSnapshotDir implements storage.Backend.
func (b *Backend) UnmountSnapshotDir(ctx context.Context, key string) error {
	return b.snapDir(key).Unmount(func(p string) error { return b.unmountPath(ctx, p) })
}

// Attachment returns key's (authorizing its user if it has none yet).
func (b *Backend) Attachment(ctx context.Context, key string) (storage.Attachment, error) {
	p, err := b.path(ctx, key)
	if err != nil {
		return storage.Attachment{}, err
	}
	if err := b.authorize(ctx, key); err != nil {
		return storage.Attachment{}, err
	}
	ring, err := os.ReadFile(b.keyring(key))
	if err != nil {
		return storage.Attachment{}, err
	}
	for _, line := range strings.Split(string(ring), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.TrimSpace(k) == "key" {
			return storage.Attachment{FS: b.o.FS, Path: p, UserID: b.userID(key), Secret: strings.TrimSpace(v)}, nil
		}
	}
	return storage.Attachment{}, fmt.Errorf("volume %s: no key in its keyring", key)
}

// SnapshotAttachment implements storage.Attacher: the snapshot as the volume's
// own user sees it, its entry in the subvolume's .snap (snapEntry).
func (b *Backend) SnapshotAttachment(ctx context.Context, key, snap string) (storage.Attachment, error) {
	if err := b.attach(ctx, key); err != nil {
		return storage.Attachment{}, err
	}
	src, err := b.snapEntry(key, snap)
	if err != nil {
		return storage.Attachment{}, fmt.Errorf("snapshot %s@%s: %w", key, snap, err)
	}
	a, err := b.Attachment(ctx, key)
	if err != nil {
		return storage.Attachment{}, err
	}
	a.Path += "/.snap/" + filepath.Base(src)
	return a, nil
}
