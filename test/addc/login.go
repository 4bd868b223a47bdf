package addc

import (
	"fmt"
	"strings"
	"time"

	krb5client "github.com/jcmturner/gokrb5/v8/client"
	krb5config "github.com/jcmturner/gokrb5/v8/config"
)

// Login logs u on at the DC's KDC with gokrb5, AES only, and returns the
// client (its TGT; service tickets come on demand). Its sockets are opened
// where it is called: inside a client host's namespace, the host's. The
// caller destroys it.
func (d *DC) Login(u User) (*krb5client.Client, error) {
	cfg, err := krb5config.NewFromString(fmt.Sprintf("[libdefaults]\n default_realm = %[1]s\n dns_lookup_kdc = false\n"+
		" default_tkt_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96\n"+
		" default_tgs_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96\n"+
		"[realms]\n %[1]s = {\n  kdc = %[2]s:88\n }\n", d.Realm, d.Addr))
	if err != nil {
		return nil, err
	}
	cl := krb5client.NewWithPassword(u.Name, d.Realm, u.Password, cfg, krb5client.DisablePAFXFAST(true))
	// The KDC answers large replies over TCP only, and its TCP listener has
	// been seen refusing a first connection: a few tries.
	err = cl.Login()
	for i := 0; err != nil && i < 10 && strings.Contains(err.Error(), "connection refused"); i++ {
		time.Sleep(500 * time.Millisecond)
		err = cl.Login()
	}
	if err != nil {
		return nil, fmt.Errorf("kerberos logon as %s: %w", u.Name, err)
	}
	return cl, nil
}
