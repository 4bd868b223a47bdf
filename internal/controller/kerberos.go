package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/dataplane"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/store"
)

// Kerberos is what the controller needs to serve Kerberos volumes
// (dataplane.Manager): a network's AD instance made the NFS service principal
// nfs/<its name>, and the network's NFS server accepting Kerberos as it.
type Kerberos interface {
	NFSKerberos(ctx context.Context, network, ad string) (dataplane.NFSKerberos, error)
	ServeNFSKerberos(ctx context.Context, network string, k *dataplane.NFSKerberos) error
	// NFSKerberosEndpoint adds a Kerberos volume's endpoint to (or removes
	// it from) the addresses the machine's DNS name leads to.
	NFSKerberosEndpoint(ctx context.Context, network, ad string, addr netip.Addr, serve bool) error
}

// krbState remembers the networks whose NFS server this process made accept
// Kerberos, as which policy's machine and when, so that exports do not ask
// the domain every time.
type krbState struct {
	mu     sync.Mutex
	served map[string]krbServed // by network
}

type krbServed struct {
	ad, host string // the policy; its machine's DNS name
	at       time.Time
}

// krbRecheck is how long a network's Kerberos identity is taken as it was
// made. The machine password changes (winbindd, weekly by default) without
// the keytab following; a resync pass past this asks again (NFSKerberos adds
// the new keys), so tickets under the new key version fail for at most about
// this long after the change.
const krbRecheck = 5 * time.Minute

// ensureKerberos makes v's network serve Kerberos as the machine of v's
// pool's policy: the policy's Samba instance joined and running
// (ensureMember), its machine the service principal nfs/<fqdn> with its keys
// in its keytab, and the network's Ganesha accepting tickets for it. It
// returns the policy and the machine's DNS name ("" for a non-Kerberos volume,
// or without an SMB data plane: then its export admits Kerberos flavors only,
// which an NFS server without a Kerberos identity grants no one, as SMB volumes
// without one are recorded and not served).
func (c *Controller) ensureKerberos(ctx context.Context, v *model.Volume) (ad, host string, err error) {
	if !v.KerberosEnabled || c.opts.SMB == nil || c.opts.Kerberos == nil {
		return "", "", nil
	}
	if ad, err = c.poolAD(ctx, v); err != nil {
		return "", "", err
	}
	// Not held across the work: leaveUnused forgets a network under smbMu,
	// which ensureMember takes. Two exports doing it at once do it twice,
	// which changes nothing.
	c.krb.mu.Lock()
	s, ok := c.krb.served[v.Network]
	c.krb.mu.Unlock()
	if ok && s.ad == ad && c.opts.Now().Sub(s.at) < krbRecheck {
		return ad, s.host, nil
	}
	if err := c.ensureMember(ctx, v.Network, ad); err != nil {
		return "", "", err
	}
	k, err := c.opts.Kerberos.NFSKerberos(ctx, v.Network, ad)
	if err != nil {
		return "", "", err
	}
	if err := c.opts.Kerberos.ServeNFSKerberos(ctx, v.Network, &k); err != nil {
		return "", "", err
	}
	name, _, _ := strings.Cut(k.Principal, "@")
	_, host, _ = strings.Cut(name, "/")
	c.krb.mu.Lock()
	if c.krb.served == nil {
		c.krb.served = map[string]krbServed{}
	}
	c.krb.served[v.Network] = krbServed{ad: ad, host: host, at: c.opts.Now()}
	c.krb.mu.Unlock()
	return ad, host, nil
}

// poolAD is the Active Directory policy of v's pool.
func (c *Controller) poolAD(ctx context.Context, v *model.Volume) (string, error) {
	var ad string
	err := c.st.View(ctx, func(tx store.Tx) error {
		p, err := store.Get[model.Pool](tx, store.KindPool, v.PoolName())
		if err == nil {
			ad = p.ActiveDirectory
		}
		return err
	})
	if err == nil && ad == "" {
		err = model.Errorf(model.ErrFailedPrecondition, "volume %s: its pool has no Active Directory policy for Kerberos", v.ID)
	}
	return ad, err
}

// kerberosExported follows a Kerberos volume's export at addr: its endpoint
// leads to the machine's DNS name, which is recorded on the volume for its
// mount options.
func (c *Controller) kerberosExported(ctx context.Context, v *model.Volume, ad, host string, addr netip.Addr) error {
	if host == "" {
		return nil
	}
	if err := c.opts.Kerberos.NFSKerberosEndpoint(ctx, v.Network, ad, addr, true); err != nil {
		return err
	}
	if v.KerberosServer == host {
		return nil
	}
	return c.st.Update(ctx, func(tx store.Tx) error {
		cur, err := store.Get[model.Volume](tx, store.KindVolume, v.Name())
		if err != nil {
			return err
		}
		cur.KerberosServer, v.KerberosServer = host, host
		return store.PutVolume(tx, cur)
	})
}

// kerberosUnexported drops a Kerberos volume's endpoint from its machine's DNS
// name (best effort: the machine may have left the domain already).
func (c *Controller) kerberosUnexported(ctx context.Context, v *model.Volume, addr netip.Addr) {
	if !v.KerberosEnabled || c.opts.SMB == nil || c.opts.Kerberos == nil {
		return
	}
	ad, err := c.poolAD(ctx, v)
	if err == nil {
		err = c.opts.Kerberos.NFSKerberosEndpoint(ctx, v.Network, ad, addr, false)
	}
	if err != nil {
		c.log.Warn("drop a Kerberos volume's endpoint from its server's DNS name", "volume", v.Name(), "err", err)
	}
}

// resyncKerberos keeps the Kerberos identity of every network with Kerberos
// volumes among vols (this node's) current: after a restart, and when the
// machine's keys changed (krbRecheck). Volumes an operation holds are its.
func (c *Controller) resyncKerberos(ctx context.Context, vols []*model.Volume) error {
	var errs []error
	done := map[string]bool{}
	for _, v := range vols {
		if !v.KerberosEnabled || v.State.Busy() || v.Network == "" || done[v.Network] {
			continue
		}
		done[v.Network] = true
		if _, _, err := c.ensureKerberos(ctx, v); err != nil {
			errs = append(errs, fmt.Errorf("kerberos on network %s: %w", v.Network, err))
		}
	}
	return errors.Join(errs...)
}

// forgetKerberos drops what krbState knows of network's NFS server serving
// Kerberos as policy ad's machine (the machine left the domain).
func (c *Controller) forgetKerberos(network, ad string) {
	c.krb.mu.Lock()
	defer c.krb.mu.Unlock()
	if c.krb.served[network].ad == ad {
		delete(c.krb.served, network)
	}
}

// kerberosClient gives cl the flavors and access a Kerberos volume's rule r
// grants: the flavors its flags name, read-write only if they grant it (the
// API refuses a rule mixing read-write and read-only flavors) and the rule's
// accessType allows it. A rule naming no flavor admits no one.
func kerberosClient(cl *nfs.Client, r model.ExportRule) {
	// Root only when the rule says so. Ganesha takes nfs/, host/ and root/
	// principals of any realm for root, and any domain user may make a
	// computer account (ms-DS-MachineAccountQuota, 10 by default) and get a
	// ticket as host/<its name>: upstream's default of keeping root would
	// make every such user root on every Kerberos volume.
	explicit := (r.HasRootAccess != nil && strings.EqualFold(*r.HasRootAccess, "true")) ||
		(r.SquashMode != nil && *r.SquashMode == model.SquashNoRoot)
	if cl.Squash == nfs.NoRootSquash && !explicit {
		cl.Squash = nfs.RootSquash
	}
	grants := r.KerberosGrants()
	if len(grants) == 0 {
		cl.Access, cl.Sec = nfs.AccessNone, nil
		return
	}
	rw := true
	cl.Sec = nil
	for _, g := range grants {
		cl.Sec = append(cl.Sec, nfs.Flavor(g.Flavor))
		rw = rw && g.ReadWrite
	}
	if cl.Access == nfs.AccessRW && !rw {
		cl.Access = nfs.AccessRO
	}
}
