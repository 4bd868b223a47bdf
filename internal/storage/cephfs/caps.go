package cephfs

import "strings"

// mgrCommands are the volumes module's commands Basin runs: each cap is
// confined to Basin's filesystem and subvolume group.
var mgrCommands = []struct{ cmd, with string }{
	{"fs subvolumegroup create", "group_name"},
	{"fs subvolume create", "group_name"},
	{"fs subvolume info", "group_name"},
	{"fs subvolume ls", "group_name"},
	{"fs subvolume rm", "group_name"},
	{"fs subvolume resize", "group_name"},
	{"fs subvolume authorize", "group_name"},
	{"fs subvolume deauthorize", "group_name"},
	{"fs subvolume snapshot create", "group_name"},
	{"fs subvolume snapshot rm", "group_name"},
	{"fs subvolume snapshot ls", "group_name"},
	{"fs subvolume snapshot clone", "group_name target_group_name"},
	{"fs clone status", "group_name"},
	{"fs clone cancel", "group_name"},
}

// Caps are the least a cephx user needs to be Basin's on filesystem fs and
// subvolume group group: the volumes module's commands Basin runs, each
// confined to that filesystem and group (so not "fs volume rm", nor another
// group's subvolumes); reading the cluster maps (the data pool's room); and
// reading the keys of the volumes' own users, "client.<group>.*", and no
// other's. It cannot create users or caps of its own: the volumes module
// makes each volume's user, confined to its subvolume.
//
//	ceph auth get-or-create client.basin mon '<Mon>' mgr '<Mgr>'
func Caps(fs, group string) (mon, mgr string) {
	mon = `allow r, allow command "auth get" with entity prefix client.` + group + `.`
	grants := make([]string, len(mgrCommands))
	for i, c := range mgrCommands {
		var with []string
		for _, arg := range strings.Fields(c.with) {
			with = append(with, arg+"="+group)
		}
		grants[i] = `allow command "` + c.cmd + `" with vol_name=` + fs + " " + strings.Join(with, " ")
	}
	return mon, strings.Join(grants, ", ")
}

// NFSRecoveryCaps are the least the NFS sandboxes' recovery user needs
// (nfs_recovery_id in a cephfs:// URL): reading the cluster maps, and reading
// and writing the objects of RADOS pool pool in namespace ns alone — the
// Ganeshas' NFSv4 client records and grace databases. Every sandbox holds
// its key; it reaches no volume's data.
//
//	ceph auth get-or-create client.basin-ganesha mon '<Mon>' osd '<OSD>'
func NFSRecoveryCaps(pool, ns string) (mon, osd string) {
	return "allow r", "allow rw pool=" + pool + " namespace=" + ns
}

// FailoverCap is the mon cap Basin's user needs beside Caps's with --failover:
// blocklisting (and letting back in) the addresses a lost node reached the
// cluster from (Backend.FenceClients), confined to addresses that start with
// prefix: the Ceph network's, as --ceph-network gives it (e.g. "10.20.0.").
//
//	ceph auth caps client.basin mon '<Mon>, <FailoverCap>' mgr '<Mgr>'
func FailoverCap(prefix string) string {
	return `allow command "osd blocklist" with addr prefix ` + prefix
}
