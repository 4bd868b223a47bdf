package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/basin-nas/basin/internal/smb"
)

// NFSKerberos is what an NFS server needs to accept Kerberos (RPCSEC_GSS) for
// an AD connection's machine: its service principal, and the keytab holding
// the principal's keys.
type NFSKerberos struct {
	// Principal is nfs/<machine's fqdn>@<REALM>, the name clients ask a ticket
	// for when they mount by the machine's DNS name.
	Principal string
	// Keytab is the host path of the instance's keytab (mode 0600, in its
	// private directory): the machine account's keys under its SPNs, which
	// NFSKerberos brings up to the account's key version.
	Keytab string
	// Winbind is the host path of the instance's winbindd socket directory:
	// Ganesha maps a principal to the uid and gid winbindd gives its SID.
	Winbind string
}

// NFSKerberos makes the joined instance of (network, ad) an NFS service
// principal: the SPN nfs/<fqdn> on its machine account (added as the machine
// itself) and the service's keys at the account's current key version in its
// keytab. Idempotent: what is there already is left alone; call it again
// after the machine password may have changed (the keys follow). Nothing of
// the keys is logged or returned.
func (m *Manager) NFSKerberos(ctx context.Context, network, ad string) (NFSKerberos, error) {
	in, rec, unlock, err := m.lockedInstance(ctx, network, ad)
	if err != nil {
		return NFSKerberos{}, err
	}
	defer unlock()
	// An instance an earlier Basin started keeps winbindd's socket in its own
	// tmpfs, out of Ganesha's reach, where principals would map to no one: it
	// is started again in the layout that has it in its directory (its
	// clients reconnect, as after a restart of its daemons).
	if _, err := os.Stat(filepath.Join(in.dir, "winbindd", "pipe")); errors.Is(err, fs.ErrNotExist) {
		in.log.Info("restarting the samba instance: its winbindd socket is not where Ganesha can reach it")
		sb := in.sb
		sb.dropInstance(in.id)
		if in, err = m.bringUp(ctx, sb, in.id, rec); err != nil {
			return NFSKerberos{}, err
		}
	}
	spn := smb.ServicePrincipal(smb.NFSService, fqdn(rec))
	principal := spn + "@" + strings.ToUpper(rec.Realm)
	k := NFSKerberos{Principal: principal, Keytab: in.keytab(), Winbind: filepath.Join(in.dir, "winbindd")}

	args, err := smb.SPNListArgs(in.conf())
	if err != nil {
		return NFSKerberos{}, err
	}
	out, err := in.run(ctx, nil, args...)
	if err != nil {
		return NFSKerberos{}, fmt.Errorf("list the machine's service principals: %s: %w", firstLine(out), err)
	}
	if !slices.Contains(smb.ParseSPNs(out), spn) {
		if args, err = smb.SPNAddArgs(in.conf(), spn); err != nil {
			return NFSKerberos{}, err
		}
		if out, err := in.run(ctx, nil, args...); err != nil {
			return NFSKerberos{}, fmt.Errorf("add the service principal %s: %s: %w", spn, firstLine(out), err)
		}
		in.log.Info("service principal added", "spn", spn)
	}

	// The keys at the account's current key version: winbindd changes the
	// machine password (every week by default) without rewriting the keytab.
	if args, err = smb.KvnoArgs(in.conf(), rec.MachineName); err != nil {
		return NFSKerberos{}, err
	}
	out, err = in.run(ctx, nil, args...)
	if err != nil {
		return NFSKerberos{}, fmt.Errorf("the machine account's key version: %s: %w", firstLine(out), err)
	}
	kvno, err := smb.ParseKvno(out)
	if err != nil {
		return NFSKerberos{}, err
	}
	if args, err = smb.KeytabListArgs(in.conf()); err != nil {
		return NFSKerberos{}, err
	}
	out, _ = in.run(ctx, nil, args...) // no keytab yet: an error, and no principals
	if !smb.KeytabHas(out, principal, kvno) {
		if args, err = smb.KeytabAddArgs(in.conf(), smb.NFSService); err != nil {
			return NFSKerberos{}, err
		}
		if out, err := in.run(ctx, nil, args...); err != nil {
			return NFSKerberos{}, fmt.Errorf("add %s to the keytab: %s: %w", smb.NFSService, firstLine(out), err)
		}
		in.log.Info("service keys added to the keytab", "principal", principal, "kvno", kvno)
	}
	// net writes the keytab through MIT Kerberos, which creates it 0600; a
	// keytab made otherwise is corrected.
	if err := os.Chmod(k.Keytab, 0o600); err != nil {
		return NFSKerberos{}, fmt.Errorf("keytab: %w", err)
	}
	return k, nil
}

// keytab is the instance's keytab (smb.GlobalOptions.Keytab).
func (in *smbInstance) keytab() string { return smb.GlobalOptions{StateDir: in.dir}.Keytab() }

func (in *smbInstance) krbAddrsFile() string { return filepath.Join(in.dir, "krb5addrs.json") }

// krbAddrs are the endpoints of the Kerberos volumes the instance's machine
// serves as NFS principal (empty when none).
func (in *smbInstance) krbAddrs() ([]netip.Addr, error) {
	var addrs []netip.Addr
	data, err := os.ReadFile(in.krbAddrsFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &addrs); err != nil {
		return nil, fmt.Errorf("%s: %w", in.krbAddrsFile(), err)
	}
	return addrs, nil
}

// NFSKerberosEndpoint adds addr (serve) to, or removes it from, the addresses
// the AD instance of (network, ad) registers its DNS name with: clients of a
// Kerberos volume mount it by that name (their tickets are for nfs/<name>),
// which must lead to an endpoint of the volume's network. Idempotent; the
// registration itself is best effort, as for SMB shares.
func (m *Manager) NFSKerberosEndpoint(ctx context.Context, network, ad string, addr netip.Addr, serve bool) error {
	in, rec, unlock, err := m.lockedInstance(ctx, network, ad)
	if err != nil {
		return err
	}
	defer unlock()
	addrs, err := in.krbAddrs()
	if err != nil {
		return err
	}
	has := slices.Contains(addrs, addr)
	switch {
	case serve && !has:
		addrs = append(addrs, addr)
	case !serve && has:
		addrs = slices.DeleteFunc(addrs, func(a netip.Addr) bool { return a == addr })
	default:
		return nil
	}
	if err := writeJSON(in.krbAddrsFile(), addrs); err != nil {
		return err
	}
	shares, err := readAddrs(in.addrsFile())
	if err != nil {
		return err
	}
	m.registerDNS(ctx, in, rec, addrList(shares))
	return nil
}
