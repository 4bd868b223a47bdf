package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A sandbox whose network serves Kerberos volumes runs its Ganesha with one
// Kerberos identity (Ganesha has one acceptor principal): an AD instance's
// machine as nfs/<fqdn> (NFSKerberos), recorded in <sandbox>/krb5.json so that
// every start of Ganesha, after a crash or a Basin restart too, renders it
// (prepareGanesha). Beside it Ganesha gets a krb5.conf of its own (the realm,
// no DNS canonicalisation of host names: the sandbox resolves none) and its
// own replay cache directory, through its environment (krb5Environ).
//
// Principals become the ids SMB gives the same users: Ganesha (built with
// MSPAC) hands the ticket's PAC to the instance's winbindd, which gives the
// user's SID, and its uid and gid (idmap rid: 100000 + RID), and the user's
// groups through nss_winbind. For that the sandbox's mount namespace has the
// instance's winbindd socket directory at libwbclient's compiled-in
// /run/samba/winbindd, and its nsswitch.conf asks winbind after files.
// idmapd.conf maps no principal by name (GSS-Methods = static, with no
// entries): an AD user called root must not become the sandbox's root.
// Ganesha itself maps nfs/, host/ and root/ principals (clients' machine
// credentials) to uid 0, which export rules squash unless they grant root.

func (sb *sandbox) krb5File() string      { return filepath.Join(sb.dir, "krb5.json") }
func (sb *sandbox) krb5Conf() string      { return filepath.Join(sb.dir, "krb5.conf") }
func (sb *sandbox) krb5RcacheDir() string { return filepath.Join(sb.dir, "krb5rcache") }
func (sb *sandbox) idmapConf() string     { return filepath.Join(sb.dir, "idmapd.conf") }

// nsswitch is the sandbox's nsswitch.conf: files only, and winbind after
// files for users and groups while Ganesha serves Kerberos.
func nsswitch(winbind bool) string {
	w := ""
	if winbind {
		w = " winbind"
	}
	return "passwd: files" + w + "\ngroup: files" + w + "\nshadow: files\nhosts: files\nservices: files\nrpc: files\nnetgroup: files\n"
}

// krb5Environ is Ganesha's Kerberos environment: its krb5.conf and replay
// cache, the sandbox's own (MIT's defaults are /etc/krb5.conf and /var/tmp,
// which the sandbox's root does not have).
func (sb *sandbox) krb5Environ() []string {
	return []string{"KRB5_CONFIG=" + sb.krb5Conf(), "KRB5RCACHEDIR=" + sb.krb5RcacheDir()}
}

// hostBased is the principal nfs/<fqdn>@REALM as Ganesha imports it:
// nfs@<fqdn>.
func (k *NFSKerberos) hostBased() string {
	name, _, _ := strings.Cut(k.Principal, "@")
	svc, host, _ := strings.Cut(name, "/")
	return svc + "@" + host
}

// realm is the principal's realm.
func (k *NFSKerberos) realm() string {
	_, r, _ := strings.Cut(k.Principal, "@")
	return r
}

// readKrb5 reads the sandbox's Kerberos identity; nil without one.
func (sb *sandbox) readKrb5() (*NFSKerberos, error) {
	data, err := os.ReadFile(sb.krb5File())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var k NFSKerberos
	if err := json.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", sb.krb5File(), err)
	}
	return &k, nil
}

// prepareKrb5 writes Ganesha's krb5.conf and makes its replay cache
// directory (0700: the cache is Ganesha's alone).
func (sb *sandbox) prepareKrb5() error {
	k, err := sb.readKrb5()
	if err != nil {
		return err
	}
	conf := "[libdefaults]\n\tdns_lookup_realm = false\n\tdns_lookup_kdc = false\n\tdns_canonicalize_hostname = false\n\trdns = false\n"
	if k != nil {
		conf += "\tdefault_realm = " + k.realm() + "\n"
	}
	if s := sb.krb5ClockSkew; s > 0 {
		conf += fmt.Sprintf("\tclockskew = %d\n", int(s.Round(time.Second)/time.Second))
	}
	if err := os.MkdirAll(sb.krb5RcacheDir(), 0o700); err != nil {
		return err
	}
	if err := writeFileAtomic(sb.krb5Conf(), []byte(conf), 0o644); err != nil {
		return err
	}
	winbind := ""
	if k != nil {
		idmap := fmt.Sprintf("[General]\nDomain = %s\nLocal-Realms = %s\n[Translation]\nMethod = nsswitch\nGSS-Methods = static\n",
			strings.ToLower(k.realm()), k.realm())
		if err := writeFileAtomic(sb.idmapConf(), []byte(idmap), 0o644); err != nil {
			return err
		}
		winbind = k.Winbind
	}
	// /etc is bound read-only into the sandbox: the file is rewritten in
	// place of itself, which the bind of the directory sees.
	if err := writeFileAtomic(filepath.Join(sb.dir, "etc", "nsswitch.conf"), []byte(nsswitch(k != nil)), 0o644); err != nil {
		return err
	}
	if winbind == "" && !sb.winbindBound {
		// Nothing bound by this Basin. One an earlier Basin left in an
		// adopted sandbox is harmless without Kerberos: no flavor asks
		// winbindd, and nsswitch.conf no longer names it.
		return nil
	}
	if err := sb.bindWinbind(winbind); err != nil {
		return err
	}
	sb.winbindBound = winbind != ""
	return nil
}

// bindWinbind mounts dir (an instance's winbindd socket directory) at
// /run/samba/winbindd in the sandbox's mount namespace, in place of what was
// there; "" leaves nothing there. The instances' namespaces, slaves of the
// sandbox's, get the mount under their own /run/samba, which hides it.
func (sb *sandbox) bindWinbind(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const script = `set -eu
mkdir -p /run/samba/winbindd
while mountpoint -q /run/samba/winbindd; do umount -l /run/samba/winbindd; done
if [ -n "$1" ]; then mount --bind "$1" /run/samba/winbindd; fi`
	args := []string{"-t", pidString(sb.holder), "-m", "--", "sh", "-c", script, "bind-winbind", dir}
	if _, err := sb.run.Run(ctx, "nsenter", args...); err != nil {
		return fmt.Errorf("winbindd's socket in the sandbox: %w", err)
	}
	return nil
}

// ServeNFSKerberos makes network's Ganesha accept Kerberos with k (what
// NFSKerberos returned for an AD instance of the network), or, with k nil,
// turns Kerberos off. Ganesha reads its identity only as it starts: a change
// restarts it, with grace (its NFSv4 clients reclaim their state); no change
// does nothing.
func (m *Manager) ServeNFSKerberos(ctx context.Context, network string, k *NFSKerberos) error {
	sb, err := m.sandboxFor(ctx, network)
	if err != nil {
		return err
	}
	sb.exportMu.Lock()
	cur, err := sb.readKrb5()
	if err != nil {
		sb.exportMu.Unlock()
		return err
	}
	if (cur == nil && k == nil) || (cur != nil && k != nil && *cur == *k) {
		sb.exportMu.Unlock()
		return nil
	}
	if k == nil {
		err = os.Remove(sb.krb5File())
	} else {
		err = writeJSON(sb.krb5File(), k)
	}
	sb.exportMu.Unlock()
	if err != nil {
		return err
	}
	sb.log.Info("ganesha's Kerberos identity changed; restarting it", "principal", principalOf(k))
	if sb.sup == nil {
		return nil // its first start renders it
	}
	_, err = sb.sup.restart(ctx, "ganesha", RestartConfig)
	return err
}

func principalOf(k *NFSKerberos) string {
	if k == nil {
		return ""
	}
	return k.Principal
}
