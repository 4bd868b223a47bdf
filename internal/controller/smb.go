package controller

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/dataplane"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/smb"
	"github.com/basin-nas/basin/internal/store"
)

// SMB is what the controller needs of the SMB data plane (dataplane.Manager):
// Samba instances, one per network and Active Directory policy, each joined to the
// policy's domain under a machine name of its own, sharing that policy's volumes
// on their endpoints.
type SMB interface {
	JoinDomain(ctx context.Context, network string, mb dataplane.SMBMembership, cred dataplane.SMBCredentials) error
	SMBJoined(network, ad string) (dataplane.SMBMembership, bool)
	LeaveDomain(ctx context.Context, network, ad string, cred dataplane.SMBCredentials) error
	// ValidateDomain checks what a join would need (DCs, bind, OU rights)
	// without joining.
	ValidateDomain(ctx context.Context, network string, mb dataplane.SMBMembership, cred dataplane.SMBCredentials) error
	SMBShare(ctx context.Context, network, ad string, addr netip.Addr, spec smb.ShareSpec) error
	SMBUnshare(ctx context.Context, network, ad string, addr netip.Addr, share string) error
	SMBShares(ctx context.Context, network, ad string) (map[string]map[string]string, error)
	// SMBSnapshotDir is where a share's snapshot entries live; SMBSnapshotLinks
	// reads them (entry name → the directory it leads to).
	SMBSnapshotDir(network, ad, share string) string
	SMBSnapshotLinks(network, ad, share string) (map[string]string, error)
}

// Secrets opens sealed secrets (internal/secret's Box): the controller opens an
// Active Directory password only to hand it to a join or a leave.
type Secrets interface {
	Open(sealed, aad string) (string, error)
}

// smbState remembers which (network, policy) instances this process has joined or
// started, so that volume operations and resyncs call JoinDomain once, not every
// time.
type smbState struct {
	running map[string]bool // network + "\x00" + policy name
	// joinedAs is what each running instance joined as (its membership,
	// printed): in a cluster a policy's update runs on one node, and the
	// others see their instance's settings are stale by it.
	joinedAs map[string]string
}

func memberKey(network, ad string) string { return network + "\x00" + ad }

// membershipOf is what network's Samba instance for policy a joins as.
func membershipOf(a *model.ActiveDirectory, machine string) (dataplane.SMBMembership, error) {
	mb := dataplane.SMBMembership{AD: a.Name(), Realm: strings.ToUpper(a.Domain), MachineName: machine, Site: a.Site,
		AESOnly: a.AesEncryption, LDAPSigning: a.LdapSigning, KDCHostname: a.KdcHostname,
		Local: smb.LocalGroups{Administrators: a.Administrators, BackupOperators: a.BackupOperators, SecurityOperators: a.SecurityOperators}}
	for _, d := range strings.Split(a.DNS, ",") {
		ip, err := netip.ParseAddr(strings.TrimSpace(d))
		if err != nil {
			return mb, model.Invalid("dns", "%q is not an IP address", strings.TrimSpace(d))
		}
		mb.DNS = append(mb.DNS, ip)
	}
	if a.KdcIP != "" {
		ip, err := netip.ParseAddr(a.KdcIP)
		if err != nil {
			return mb, model.Invalid("kdcIp", "%q is not an IP address", a.KdcIP)
		}
		mb.KDC = ip
	}
	ou, err := smb.OUPath(a.OrganizationalUnit, a.Domain)
	if err != nil {
		return mb, err
	}
	mb.OUPath = ou
	return mb, nil
}

// credentialsOf opens policy a's join password.
func (c *Controller) credentialsOf(a *model.ActiveDirectory) (dataplane.SMBCredentials, error) {
	if c.opts.Secrets == nil {
		return dataplane.SMBCredentials{}, errors.New("no secret box: cannot open the Active Directory password")
	}
	pw, err := c.opts.Secrets.Open(a.PasswordSealed, a.PasswordAAD())
	if err != nil {
		return dataplane.SMBCredentials{}, fmt.Errorf("Active Directory policy %s: its password cannot be opened", a.ID)
	}
	return dataplane.SMBCredentials{Username: a.Username, Password: []byte(pw)}, nil
}

// ensureMember makes network's Samba instance for policy adName joined and
// running. The machine name is recorded on the policy before the join starts, so
// a join interrupted at any point is retried under the same name. A join the
// domain refuses is recorded on the policy (state ERROR, the reason in plain
// words) and returned.
func (c *Controller) ensureMember(ctx context.Context, network, adName string) error {
	if c.opts.SMB == nil {
		return nil
	}
	c.smbMu.Lock()
	defer c.smbMu.Unlock()
	key := memberKey(network, adName)
	if c.smb.running[key] {
		if !c.opts.Cluster {
			return nil // a policy's update joins this node's instances again (adHandler)
		}
		// Another node may have run the policy's update: join again (which
		// re-renders the instance's settings) if what it joined as is stale.
		var a model.ActiveDirectory
		if err := c.st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindActiveDirectory, adName, &a) }); err != nil {
			return err
		}
		if mb, err := membershipOf(&a, a.Members[c.memberSlot(network)]); err == nil && fmt.Sprint(mb) == c.smb.joinedAs[key] {
			return nil
		}
		delete(c.smb.running, key)
	}
	var a *model.ActiveDirectory
	err := c.st.Update(ctx, func(tx store.Tx) (err error) {
		if a, err = store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, adName); err != nil {
			return err
		}
		slot := c.memberSlot(network)
		machine := a.Members[slot]
		if on, ok := c.opts.SMB.SMBJoined(network, adName); ok && on.MachineName != "" {
			machine = on.MachineName // what the domain knows wins over a lost record
		}
		if machine == "" {
			if machine, err = smb.MachineName(a.NetBiosPrefix, rand.Reader); err != nil {
				return err
			}
		}
		if a.Members[slot] == machine {
			return nil
		}
		if a.Members == nil {
			a.Members = map[string]string{}
		}
		a.Members[slot] = machine
		return store.PutAD(tx, a)
	})
	if err != nil {
		return err
	}
	mb, err := membershipOf(a, a.Members[c.memberSlot(network)])
	if err != nil {
		return err
	}
	cred, err := c.credentialsOf(a)
	if err != nil {
		return err
	}
	defer clear(cred.Password)
	if joinErr := c.opts.SMB.JoinDomain(ctx, network, mb, cred); joinErr != nil {
		// The domain's reasons are for the user, in plain words; anything else
		// (commands, paths) stays in the log.
		var je *smb.JoinError
		switch {
		case errors.As(joinErr, &je) && errors.Is(je, smb.ErrServerStart):
			// Not the domain's refusal: the server is joined and its start is
			// retried (the policy does not go to ERROR, so resync tries again).
			c.log.Warn("the SMB server did not start", "network", network, "activeDirectory", adName, "machine", mb.MachineName, "err", joinErr)
			return model.Errorf(smb.ErrServerStart, "joining %s as %s (network %s): %s", a.Domain, mb.MachineName, network, je.Error())
		case errors.As(joinErr, &je):
			joinErr = model.Errorf(model.ErrFailedPrecondition, "joining %s as %s (network %s): %s", a.Domain, mb.MachineName, network, je.Error())
		default:
			c.log.Warn("domain join failed", "network", network, "activeDirectory", adName, "machine", mb.MachineName, "err", joinErr)
			joinErr = fmt.Errorf("joining %s as %s (network %s): %w", a.Domain, mb.MachineName, network, joinErr)
		}
		c.recordJoin(ctx, adName, joinErr)
		return joinErr
	}
	c.recordJoin(ctx, adName, nil)
	c.smb.running[key] = true
	c.smb.joinedAs[key] = fmt.Sprint(mb)
	return nil
}

// recordJoin shows the outcome of a join on the policy: ERROR with the domain's
// reason, or READY again after an error.
func (c *Controller) recordJoin(ctx context.Context, adName string, joinErr error) {
	err := c.st.Update(ctx, func(tx store.Tx) error {
		a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, adName)
		if err != nil {
			return err
		}
		switch {
		case joinErr != nil:
			a.State, a.Details = model.StateError, "joining the domain failed; the server log has the details"
			if msg, ok := model.UserMessage(joinErr); ok {
				a.Details = msg
			}
		case a.State == model.StateError:
			a.State, a.Details = model.StateReady, ""
		default:
			return nil
		}
		return store.PutAD(tx, a)
	})
	if err != nil && !errors.Is(err, model.ErrNotFound) {
		c.log.Warn("record join outcome", "activeDirectory", adName, "err", err)
	}
}

// memberSlot is the key of this node's machine account on network in
// ActiveDirectory.Members: the network's name, or in a cluster
// "network@node": each node joins as a machine of its own (one machine
// joined twice would have the second join reset the first's password).
func (c *Controller) memberSlot(network string) string {
	if !c.opts.Cluster {
		return network
	}
	return network + "@" + c.opts.NodeID
}

// slotNetwork returns the network of a Members key if the key is this node's.
func (c *Controller) slotNetwork(slot string) (string, bool) {
	if !c.opts.Cluster {
		return slot, true
	}
	network, node, ok := strings.Cut(slot, "@")
	return network, ok && node == c.opts.NodeID
}

// leaveUnused leaves the domain for every Samba instance on network whose policy
// no pool on that network uses any more (the last SMB pool went, or moved to
// another policy), and forgets its machine name. Pool gone ("" = none) counts
// as gone already (its delete runs the leave before removing its record).
func (c *Controller) leaveUnused(ctx context.Context, network, gone string) error {
	if c.opts.SMB == nil {
		return nil
	}
	c.smbMu.Lock()
	defer c.smbMu.Unlock()
	var leave []*model.ActiveDirectory
	err := c.st.View(ctx, func(tx store.Tx) error {
		ads, err := store.List[model.ActiveDirectory](tx, store.KindActiveDirectory, "")
		if err != nil {
			return err
		}
		pools, err := store.PoolsOnNetwork(tx, network)
		if err != nil {
			return err
		}
		for _, a := range ads {
			_, member := a.Members[c.memberSlot(network)]
			if _, joined := c.opts.SMB.SMBJoined(network, a.Name()); !member && !joined {
				continue
			}
			if !slices.ContainsFunc(pools, func(e store.IndexEntry) bool { return e.Value == a.Name() && e.Name != gone }) {
				leave = append(leave, a)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, a := range leave {
		cred, err := c.credentialsOf(a)
		if err != nil {
			return err
		}
		err = c.opts.SMB.LeaveDomain(ctx, network, a.Name(), cred)
		clear(cred.Password)
		if err != nil {
			return fmt.Errorf("leaving %s (network %s): %w", a.Domain, network, err)
		}
		delete(c.smb.running, memberKey(network, a.Name()))
		c.forgetKerberos(network, a.Name())
		err = c.st.Update(ctx, func(tx store.Tx) error {
			cur, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, a.Name())
			if err != nil {
				return err
			}
			delete(cur.Members, c.memberSlot(network))
			return store.PutAD(tx, cur)
		})
		if err != nil && !errors.Is(err, model.ErrNotFound) {
			return err
		}
		c.log.Info("left the domain", "network", network, "activeDirectory", a.Name(), "domain", a.Domain)
	}
	return nil
}

// smbOf returns what volume v's SMB share is: its pool's policy and the share's
// definition; ok is false for a volume not served over SMB. A share that shows
// previous versions lists the snapshots include accepts (nil: the READY ones),
// each by its creation time; of two made in the same second, the first.
func (c *Controller) smbOf(ctx context.Context, v *model.Volume, include func(*model.Snapshot) bool) (ad string, spec smb.ShareSpec, ok bool, err error) {
	if c.opts.SMB == nil || v.Endpoint == "" || !slices.Contains(v.Protocols, model.ProtocolSMB) {
		return "", spec, false, nil
	}
	var snaps []*model.Snapshot
	err = c.st.View(ctx, func(tx store.Tx) error {
		p, err := store.Get[model.Pool](tx, store.KindPool, v.PoolName())
		if err != nil {
			return err
		}
		ad = p.ActiveDirectory
		if smbShowsSnapshots(v) {
			snaps, err = store.List[model.Snapshot](tx, store.KindSnapshot, v.Name())
		}
		return err
	})
	if err != nil || ad == "" {
		return "", spec, false, err
	}
	spec = smb.ShareSpec{Name: v.ShareName, Path: c.be.MountPath(v.Key), Comment: v.Desc,
		NFS: slices.Contains(v.Protocols, model.ProtocolNFSv3) || slices.Contains(v.Protocols, model.ProtocolNFSv4)}
	// A dual-protocol volume's style is its choice (UNIX unless NTFS was
	// asked for; volumes made before styles were resolved have none); an
	// SMB-only volume is NTFS.
	spec.UnixStyle = !v.NTACLs()
	for _, s := range v.SMBSettings {
		spec.Settings = append(spec.Settings, smb.Setting(s))
	}
	if len(spec.Settings) == 0 {
		spec.Settings = smb.DefaultSettings
	}
	if smbShowsSnapshots(v) {
		if include == nil {
			include = func(s *model.Snapshot) bool { return s.State == model.StateReady }
		}
		spec.SnapshotDir = c.opts.SMB.SMBSnapshotDir(v.Network, ad, v.ShareName)
		spec.Snapshots = map[string]string{}
		slices.SortFunc(snaps, func(a, b *model.Snapshot) int {
			return cmp.Or(a.CreateTime.Compare(b.CreateTime), cmp.Compare(a.ID, b.ID))
		})
		// A version is named by its creation second (shadow_copy2's format has
		// no finer one): a snapshot taken in the same second as an earlier one
		// shows one second later, and so on, so each is a version of its own.
		next := time.Time{}
		for _, s := range snaps {
			if !include(s) {
				continue
			}
			at := s.CreateTime.UTC().Truncate(time.Second)
			if at.Before(next) {
				at = next
			}
			spec.Snapshots[smb.SnapshotName(at)] = c.be.SnapshotMountPath(v.Key, s.ID)
			next = at.Add(time.Second)
		}
	}
	return ad, spec, true, nil
}

// smbShowsSnapshots reports whether v's SMB share shows its snapshots as
// previous versions (SHOW_SNAPSHOT or SHOW_PREVIOUS_VERSIONS).
func smbShowsSnapshots(v *model.Volume) bool {
	return slices.ContainsFunc(v.SMBSettings, func(s int32) bool {
		return smb.Setting(s) == smb.ShowSnapshot || smb.Setting(s) == smb.ShowPreviousVersions
	}) && slices.Contains(v.Protocols, model.ProtocolSMB)
}

// observeShare fills in whether volume v's SMB share exists and is as wanted,
// listing its instance's shares with list (SMBShares, or a pass's cache of it).
// It returns the volume's policy ("" if it has no share).
func (c *Controller) observeShare(ctx context.Context, v *model.Volume, o *Observation,
	list func(ctx context.Context, network, ad string) (map[string]map[string]string, error)) (string, error) {
	ad, spec, ok, err := c.smbOf(ctx, v, nil)
	if err != nil || !ok {
		return "", err
	}
	shares, err := list(ctx, v.Network, ad)
	if err != nil {
		return ad, err
	}
	have, exists := shares[v.ShareName]
	o.Shared = exists
	if exists {
		want, err := smb.ShareParams(spec)
		if err != nil {
			return ad, err
		}
		o.ShareCurrent = len(smb.ShareDiff(have, want)) == 0 && v.SMBServer != ""
		if o.ShareCurrent && spec.SnapshotDir != "" {
			links, err := c.opts.SMB.SMBSnapshotLinks(v.Network, ad, v.ShareName)
			if err != nil {
				return ad, err
			}
			o.ShareCurrent = maps.Equal(links, spec.Snapshots) || len(links) == 0 && len(spec.Snapshots) == 0
		}
	}
	return ad, nil
}

// share makes volume v's SMB share as wanted: its network's instance for the
// pool's policy joined and running, then the share on v's endpoint. It records the
// server's name on the volume for its mount options.
func (c *Controller) share(ctx context.Context, v *model.Volume) error {
	return c.shareWith(ctx, v, nil)
}

// shareWith is share listing the snapshots include accepts (nil: the READY
// ones): a snapshot operation shows its snapshot before it is READY, or hides it
// before it goes.
func (c *Controller) shareWith(ctx context.Context, v *model.Volume, include func(*model.Snapshot) bool) error {
	ad, spec, ok, err := c.smbOf(ctx, v, include)
	if err != nil || !ok {
		return err
	}
	addr, err := netip.ParseAddr(v.Endpoint)
	if err != nil {
		return err
	}
	if err := c.ensureMember(ctx, v.Network, ad); err != nil {
		return err
	}
	if err := c.opts.SMB.SMBShare(ctx, v.Network, ad, addr, spec); err != nil {
		return err
	}
	var server string
	err = c.st.View(ctx, func(tx store.Tx) error {
		a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, ad)
		if err != nil {
			return err
		}
		server = a.Members[c.memberSlot(v.Network)] + "." + strings.ToLower(a.Domain)
		return nil
	})
	if err != nil {
		return err
	}
	if v.SMBServer == server {
		return nil
	}
	return c.st.Update(ctx, func(tx store.Tx) error {
		cur, err := store.Get[model.Volume](tx, store.KindVolume, v.Name())
		if err != nil {
			return err
		}
		cur.SMBServer, v.SMBServer = server, server
		return store.PutVolume(tx, cur)
	})
}

// unshare removes volume v's SMB share (idempotent).
func (c *Controller) unshare(ctx context.Context, v *model.Volume) error {
	ad, _, ok, err := c.smbOf(ctx, v, nil)
	if err != nil || !ok {
		return err
	}
	addr, err := netip.ParseAddr(v.Endpoint)
	if err != nil {
		return err
	}
	return c.opts.SMB.SMBUnshare(ctx, v.Network, ad, addr, v.ShareName)
}

// resyncMembers brings back every Samba instance a pool needs (after a restart
// they are stopped; joined ones start without a new join) and makes instances no
// pool needs any more leave, network by network. Pools with an operation running
// are left to it.
func (c *Controller) resyncMembers(ctx context.Context) error {
	if c.opts.SMB == nil {
		return nil
	}
	var pools []*model.Pool
	networks := map[string]bool{}
	// A policy whose last join the domain refused is not tried again here: a
	// wrong password retried every pass could lock the account out. The next
	// pool or policy operation tries again.
	failed := map[string]bool{}
	err := c.st.View(ctx, func(tx store.Tx) (err error) {
		if pools, err = store.List[model.Pool](tx, store.KindPool, ""); err != nil {
			return err
		}
		ads, err := store.List[model.ActiveDirectory](tx, store.KindActiveDirectory, "")
		for _, a := range ads {
			if a.State == model.StateError {
				failed[a.Name()] = true
			}
			for slot := range a.Members {
				if network, ok := c.slotNetwork(slot); ok {
					networks[network] = true // where a leave may be left to finish
				}
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range pools {
		network := model.NetworkName(p.Network)
		networks[network] = true
		if p.ActiveDirectory == "" || p.State.Busy() || failed[p.ActiveDirectory] {
			continue
		}
		if err := c.ensureMember(ctx, network, p.ActiveDirectory); err != nil {
			errs = append(errs, err)
		}
	}
	for network := range networks {
		errs = append(errs, c.leaveUnused(ctx, network, ""))
	}
	return errors.Join(errs...)
}
