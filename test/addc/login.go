package addc

import (
	"fmt"
	"strings"
	"time"

	krb5client "github.com/jcmturner/gokrb5/v8/client"
	krb5config "github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/iana/nametype"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"
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

// Ticket is a service ticket as its client holds it: the ticket (encrypted
// for the service), its session key, and its times as the KDC set them.
type Ticket struct {
	Realm      string
	CName      types.PrincipalName
	Ticket     messages.Ticket
	Key        types.EncryptionKey
	Start, End time.Time
}

// ServiceTicket logs u on and gets a ticket for spn (such as
// "nfs/server.example.com") that lasts lifetime, which the caller may go on
// using after it expired: nothing renews it. Like Login, its sockets are
// opened where it is called. Only the service ticket is short: Samba's KDC
// takes no TGT with 2 minutes or less to live (it might be a kpasswd
// ticket), and gives a service ticket the end its request asks for, or the
// TGT's if earlier.
func (d *DC) ServiceTicket(u User, spn string, lifetime time.Duration) (*Ticket, error) {
	cl, err := d.Login(u)
	if err != nil {
		return nil, err
	}
	defer cl.Destroy() // its session, renewed on its own otherwise
	realm, cname := cl.Credentials.Domain(), cl.Credentials.CName()
	// The TGT of a logon of its own: the client keeps its session's to itself.
	req, err := messages.NewASReqForTGT(realm, cl.Config, cname)
	if err != nil {
		return nil, err
	}
	as, err := cl.ASExchange(realm, req, 0)
	if err != nil {
		return nil, fmt.Errorf("TGT for %s: %w", u.Name, err)
	}
	cl.Config.LibDefaults.TicketLifetime = lifetime // the TGS-REQ's till
	_, tgs, err := cl.TGSREQGenerateAndExchange(types.NewPrincipalName(nametype.KRB_NT_PRINCIPAL, spn), realm,
		as.Ticket, as.DecryptedEncPart.Key, false)
	if err != nil {
		return nil, fmt.Errorf("ticket for %s as %s: %w", spn, u.Name, err)
	}
	p := tgs.DecryptedEncPart
	start := p.StartTime
	if start.IsZero() {
		start = p.AuthTime
	}
	return &Ticket{Realm: realm, CName: cname, Ticket: tgs.Ticket, Key: p.Key, Start: start, End: p.EndTime}, nil
}
