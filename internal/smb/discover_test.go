package smb

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fixtureDNS is an in-process DNS server on 127.0.0.1 serving fixed records; it
// counts the questions it gets.
type fixtureDNS struct {
	addr string
	mu   sync.Mutex
	asks map[string]int // "TYPE name" → count
}

func (f *fixtureDNS) asked(qtype, name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asks[qtype+" "+name]
}

// Records of the fixture zone basin.test. Site1 has a DC of its own (dc2, with
// its address in the additional section); Site2 has no records (NXDOMAIN, as AD's
// DNS answers for a site without a DC); Site3's name exists without SRV records.
var fixtureRecords = map[string][]string{
	"_ldap._tcp.Site1._sites.dc._msdcs.basin.test.": {
		"_ldap._tcp.Site1._sites.dc._msdcs.basin.test. 600 IN SRV 0 100 389 dc2.basin.test.",
	},
	"_ldap._tcp.Site3._sites.dc._msdcs.basin.test.": {
		"_ldap._tcp.Site3._sites.dc._msdcs.basin.test. 600 IN TXT \"nothing here\"",
	},
	"_ldap._tcp.dc._msdcs.basin.test.": {
		"_ldap._tcp.dc._msdcs.basin.test. 600 IN SRV 10 100 389 dc3.basin.test.",
		"_ldap._tcp.dc._msdcs.basin.test. 600 IN SRV 0 50 389 dc1.basin.test.",
		"_ldap._tcp.dc._msdcs.basin.test. 600 IN SRV 0 100 389 dc2.basin.test.",
		"_ldap._tcp.dc._msdcs.basin.test. 600 IN SRV 5 100 389 gone.basin.test.",
	},
	"dc1.basin.test.": {"dc1.basin.test. 600 IN A 10.99.72.10"},
	"dc2.basin.test.": {"dc2.basin.test. 600 IN A 10.99.72.11"},
	"dc3.basin.test.": {"dc3.basin.test. 600 IN A 10.99.72.12", "dc3.basin.test. 600 IN A 10.99.72.13"},
	// other.test: a domain whose only SRV target has no address.
	"_ldap._tcp.dc._msdcs.other.test.": {"_ldap._tcp.dc._msdcs.other.test. 600 IN SRV 0 100 389 noaddr.other.test."},
	"noaddr.other.test.":               {"noaddr.other.test. 600 IN TXT \"no A\""},
}

var fixtureExtra = map[string][]string{
	"_ldap._tcp.Site1._sites.dc._msdcs.basin.test.": {"dc2.basin.test. 600 IN A 10.99.72.11"},
}

func startFixtureDNS(t *testing.T) *fixtureDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixtureDNS{addr: pc.LocalAddr().String(), asks: map[string]int{}}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		q := r.Question[0]
		f.mu.Lock()
		f.asks[dns.TypeToString[q.Qtype]+" "+strings.ToLower(q.Name)]++
		f.mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		var recs []string
		for name, rs := range fixtureRecords {
			if strings.EqualFold(name, q.Name) {
				recs = rs
			}
		}
		if recs == nil {
			m.Rcode = dns.RcodeNameError
		}
		for _, s := range recs {
			rr, err := dns.NewRR(s)
			if err != nil {
				panic(err)
			}
			if rr.Header().Rrtype == q.Qtype {
				m.Answer = append(m.Answer, rr)
			}
		}
		for name, rs := range fixtureExtra {
			if strings.EqualFold(name, q.Name) {
				for _, s := range rs {
					rr, _ := dns.NewRR(s)
					m.Extra = append(m.Extra, rr)
				}
			}
		}
		_ = w.WriteMsg(m)
	})
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, Handler: h, NotifyStartedFunc: func() { close(started) }}
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return f
}

func hosts(dcs []DC) []string {
	var s []string
	for _, d := range dcs {
		s = append(s, d.Host)
	}
	return s
}

func TestDiscover(t *testing.T) {
	f := startFixtureDNS(t)
	ctx := context.Background()
	a := netip.MustParseAddr

	t.Run("site with a DC", func(t *testing.T) {
		dcs, err := Discover(ctx, []string{f.addr}, "BASIN.TEST", "Site1")
		if err != nil {
			t.Fatal(err)
		}
		if len(dcs) != 1 || dcs[0].Host != "dc2.basin.test" || dcs[0].Port != 389 || !dcs[0].Site ||
			len(dcs[0].Addrs) != 1 || dcs[0].Addrs[0] != a("10.99.72.11") {
			t.Fatalf("got %+v", dcs)
		}
		if n := f.asked("A", "dc2.basin.test."); n != 0 {
			t.Fatalf("asked for dc2's address %d times although the answer carried it", n)
		}
	})
	for _, site := range []string{"Site2", "Site3", ""} {
		t.Run("domain-wide for site "+site, func(t *testing.T) {
			dcs, err := Discover(ctx, []string{f.addr}, "basin.test", site)
			if err != nil {
				t.Fatal(err)
			}
			// priority 0: dc2 (weight 100) before dc1 (50); then dc3 (10);
			// gone.basin.test (priority 5) has no address and is dropped.
			if got := strings.Join(hosts(dcs), " "); got != "dc2.basin.test dc1.basin.test dc3.basin.test" {
				t.Fatalf("order %q", got)
			}
			for _, d := range dcs {
				if d.Site {
					t.Fatalf("%s marked as a site DC", d.Host)
				}
			}
			if got := dcs[2].Addrs; len(got) != 2 || got[0] != a("10.99.72.12") || got[1] != a("10.99.72.13") {
				t.Fatalf("dc3 addresses %v", got)
			}
			if site != "" && f.asked("SRV", "_ldap._tcp."+strings.ToLower(site)+"._sites.dc._msdcs.basin.test.") == 0 {
				t.Fatalf("the site's SRV name was never asked")
			}
		})
	}
	t.Run("NXDOMAIN", func(t *testing.T) {
		_, err := Discover(ctx, []string{f.addr}, "nothere.test", "")
		if err == nil || !strings.Contains(err.Error(), "no domain controller found for nothere.test through DNS "+f.addr) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("NXDOMAIN with a site", func(t *testing.T) {
		_, err := Discover(ctx, []string{f.addr}, "nothere.test", "Site1")
		if err == nil || !strings.Contains(err.Error(), "no domain controller found for nothere.test (site Site1 or domain-wide)") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("target without address", func(t *testing.T) {
		_, err := Discover(ctx, []string{f.addr}, "other.test", "")
		if err == nil || !strings.Contains(err.Error(), "no domain controller found for other.test") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("dead server first", func(t *testing.T) {
		dead := closedUDPPort(t)
		dcs, err := Discover(ctx, []string{dead, f.addr}, "basin.test", "")
		if err != nil {
			t.Fatal(err)
		}
		if len(dcs) != 3 {
			t.Fatalf("got %v", hosts(dcs))
		}
	})
}

// closedUDPPort returns 127.0.0.1:port where nothing listens (the kernel answers
// port unreachable, so a query fails at once).
func closedUDPPort(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

func TestDiscoverTimeout(t *testing.T) {
	// A socket that never answers.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = Discover(ctx, []string{pc.LocalAddr().String()}, "basin.test", "")
	if err == nil {
		t.Fatal("a silent server gave DCs")
	}
	if !strings.Contains(err.Error(), "did not answer: timed out") || !strings.Contains(err.Error(), "basin.test") {
		t.Fatalf("err = %v", err)
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		t.Fatalf("a timeout is not an invalid input: %v", err)
	}
}

func TestDiscoverInvalid(t *testing.T) {
	ctx := context.Background()
	wantField(t, func() error { _, err := Discover(ctx, nil, "basin.test", ""); return err }(), "dns")
	wantField(t, func() error { _, err := Discover(ctx, []string{"dns.example"}, "basin.test", ""); return err }(), "dns")
	wantField(t, func() error { _, err := Discover(ctx, []string{"10.99.72.1"}, "basin..test", ""); return err }(), "domain")
	wantField(t, func() error { _, err := Discover(ctx, []string{"10.99.72.1"}, "basin.test", "a.b"); return err }(), "site")
}
