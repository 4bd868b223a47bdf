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
)

// A sandbox whose network serves Kerberos volumes runs its Ganesha with one
// Kerberos identity (Ganesha has one acceptor principal): an AD instance's
// machine as nfs/<fqdn> (NFSKerberos), recorded in <sandbox>/krb5.json so that
// every start of Ganesha, after a crash or a Basin restart too, renders it
// (prepareGanesha). Beside it Ganesha gets a krb5.conf of its own (the realm,
// no DNS canonicalisation of host names: the sandbox resolves none) and its
// own replay cache directory, through its environment (krb5Environ).

func (sb *sandbox) krb5File() string      { return filepath.Join(sb.dir, "krb5.json") }
func (sb *sandbox) krb5Conf() string      { return filepath.Join(sb.dir, "krb5.conf") }
func (sb *sandbox) krb5RcacheDir() string { return filepath.Join(sb.dir, "krb5rcache") }

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
	if err := os.MkdirAll(sb.krb5RcacheDir(), 0o700); err != nil {
		return err
	}
	return writeFileAtomic(sb.krb5Conf(), []byte(conf), 0o644)
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
