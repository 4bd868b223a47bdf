package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/basin-nas/basin/internal/api"
	"github.com/basin-nas/basin/internal/config"
	"github.com/basin-nas/basin/internal/dataplane"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/storage/btrfs"
	"github.com/basin-nas/basin/internal/storage/cephfs"
)

// nodeStorage is a storage backend as a node runs it: started before the
// controller, watched while Basin serves (Run), and at the end released (its
// volumes stay mounted and served) or stopped (unmounted).
type nodeStorage interface {
	storage.Backend
	api.Capacity
	Start(ctx context.Context) error
	Run(ctx context.Context) error
	Release()
	Stop(ctx context.Context) error
	Teardown(ctx context.Context) error
}

var (
	_ nodeStorage = (*btrfs.Backend)(nil)
	_ nodeStorage = (*cephfs.Backend)(nil)
)

// newStorage is the backend cfg.Storage names; a CephFS backend mounts its
// volumes in mounts's network namespace, if mounts is set (mountLinkOf).
func newStorage(cfg config.Config, mounts *dataplane.MountLink, log *slog.Logger) (nodeStorage, error) {
	if cfg.Storage == "" || cfg.Storage == "btrfs" {
		// Above an overcommit ratio of 1 pools may promise more than the store
		// holds: volumes are then thin-provisioned (their filesystems grow as they fill).
		return btrfs.New(btrfs.Options{DataDir: cfg.DataDir, Store: cfg.Store, ImageSize: cfg.StoreSize, Thin: cfg.OvercommitRatio > 1,
			ThinInitial: cfg.ThinInitial, Reserve: cfg.StoreReserve, Logger: log.With("component", "btrfs")}), nil
	}
	cf, ok := cfg.CephFS()
	if !ok {
		return nil, fmt.Errorf("--storage %q: want btrfs or a cephfs:// URL", cfg.Storage)
	}
	o := cephfs.Options{Conf: cf.Conf, ID: cf.ID, Keyring: cf.Keyring, FS: cf.FS, Group: cf.Group,
		DataDir: cfg.DataDir, Logger: log.With("component", "cephfs")}
	if mounts != nil {
		o.NetNS = mounts.Path()
	}
	return cephfs.New(o), nil
}

// mountLinkOf is where a node with failover on CephFS mounts its volumes
// from (dataplane.MountLink): the last address of --ceph-network's range, so
// that a node taking over fences this one's mounts with its sandboxes. Nil
// without failover, CephFS or --ceph-network (the mounts then use the host's
// address, which is no node's alone).
func mountLinkOf(cfg config.Config) (*dataplane.MountLink, error) {
	if !cfg.Failover || cfg.CephNetwork == "" {
		return nil, nil
	}
	if _, ok := cfg.CephFS(); !ok {
		return nil, nil
	}
	cn, err := config.ParseCephNetwork(cfg.CephNetwork)
	if err != nil {
		return nil, err
	}
	addr, err := cn.MountAddr(cfg.Networks)
	if err != nil {
		return nil, err
	}
	return dataplane.NewMountLink(cfg.DataDir, cn.Bridge, addr, nil), nil
}

// cephLinkOf is the sandboxes' link to the CephFS's cluster (--ceph-network),
// nil without one.
func cephLinkOf(ctx context.Context, cfg config.Config, be nodeStorage) (*dataplane.CephLink, error) {
	ceph, ok := be.(*cephfs.Backend)
	if !ok {
		return nil, nil
	}
	if cfg.CephNetwork == "" {
		if cf, err := config.ParseCephFS(cfg.Storage); err == nil && cf.NFSRecoveryPool != "" {
			return nil, errors.New("--storage nfs_recovery_pool needs --ceph-network: without it no NFS sandbox reaches the cluster")
		}
		return nil, nil
	}
	cn, err := config.ParseCephNetwork(cfg.CephNetwork)
	if err != nil {
		return nil, err
	}
	addrs, err := cn.Addrs(cfg.Networks)
	if err != nil {
		return nil, err
	}
	conf, err := ceph.ClientConf(ctx)
	if err != nil {
		return nil, err
	}
	link := &dataplane.CephLink{Bridge: cn.Bridge, Addrs: addrs, Conf: conf}
	cf, err := config.ParseCephFS(cfg.Storage)
	if err != nil {
		return nil, err
	}
	if cf.NFSRecoveryPool != "" {
		ring, err := os.ReadFile(cf.NFSRecoveryKeyring)
		if err != nil {
			return nil, fmt.Errorf("--storage nfs_recovery_keyring: %w", err)
		}
		link.Recovery = &dataplane.CephRecovery{Pool: cf.NFSRecoveryPool, Namespace: cf.Group, ID: cf.NFSRecoveryID, Keyring: ring}
	}
	return link, nil
}
