package smb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// DC is a domain controller found through DNS.
type DC struct {
	Host     string       // target of the SRV record, without the trailing dot: "dc1.basin.test"
	Port     uint16       // LDAP port from the SRV record (389)
	Priority uint16       // SRV priority: lower is preferred
	Weight   uint16       // SRV weight within a priority: higher is preferred here
	Addrs    []netip.Addr // IPv4 addresses of Host, from the answer's additional section or an A query
	Site     bool         // found through the site's SRV name, not the domain-wide one
}

// DefaultQueryTimeout bounds one DNS exchange when ctx has no earlier deadline.
const DefaultQueryTimeout = 3 * time.Second

// errNoAnswer means the server answered but has no records of that name.
var errNoAnswer = errors.New("no records")

// Discover finds the domain controllers of realm through the AD connection's DNS
// servers (IP addresses, optionally "ip:port"; never the host's resolv.conf). When
// site is set it asks _ldap._tcp.<site>._sites.dc._msdcs.<realm> first and falls
// back to the domain-wide _ldap._tcp.dc._msdcs.<realm> when the site has none (AD
// registers site records only for sites that hold a DC). The DCs come in SRV order:
// priority ascending, then weight descending, then host name (a deterministic
// reading of RFC 2782's weighting). Each target's IPv4 addresses come from the
// additional section or an A query; targets without any are dropped.
//
// Servers are tried in order; one that does not answer (timeout, refused) passes
// the question to the next. The errors are plain words:
// "no domain controller found for basin.test through DNS 10.99.70.10".
func Discover(ctx context.Context, servers []string, realm, site string) ([]DC, error) {
	if err := validateRealm("domain", realm); err != nil {
		return nil, err
	}
	if site != "" && (len(site) > 63 || !siteRE.MatchString(site)) {
		return nil, invalid("site", "must be at most 63 letters, digits, '-' or '_', starting with a letter or digit")
	}
	if len(servers) == 0 {
		return nil, invalid("dns", "at least one DNS server is required")
	}
	addrs := make([]string, len(servers))
	for i, s := range servers {
		a, err := serverAddr(s)
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	r := resolver{servers: addrs}
	realm = strings.ToLower(strings.TrimSuffix(realm, "."))
	via := strings.Join(servers, ", ")

	if site != "" {
		dcs, err := r.dcs(ctx, "_ldap._tcp."+site+"._sites.dc._msdcs."+realm+".")
		if err == nil {
			for i := range dcs {
				dcs[i].Site = true
			}
			return dcs, nil
		}
		if !errors.Is(err, errNoAnswer) {
			return nil, fmt.Errorf("find domain controllers for %s in site %s through DNS %s: %w", realm, site, via, err)
		}
	}
	dcs, err := r.dcs(ctx, "_ldap._tcp.dc._msdcs."+realm+".")
	if errors.Is(err, errNoAnswer) {
		if site != "" {
			return nil, fmt.Errorf("no domain controller found for %s (site %s or domain-wide) through DNS %s", realm, site, via)
		}
		return nil, fmt.Errorf("no domain controller found for %s through DNS %s", realm, via)
	}
	if err != nil {
		return nil, fmt.Errorf("find domain controllers for %s through DNS %s: %w", realm, via, err)
	}
	return dcs, nil
}

var siteRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// serverAddr turns "10.0.0.2" or "10.0.0.2:5353" or "[fd00::2]:53" into host:port.
func serverAddr(s string) (string, error) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a, 53).String(), nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.String(), nil
	}
	return "", invalid("dns", "%q is not an IP address", s)
}

type resolver struct{ servers []string }

// dcs resolves one SRV name into ordered DCs with addresses.
func (r resolver) dcs(ctx context.Context, name string) ([]DC, error) {
	m, err := r.query(ctx, name, dns.TypeSRV)
	if err != nil {
		return nil, err
	}
	extra := map[string][]netip.Addr{}
	for _, rr := range m.Extra {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
				k := strings.ToLower(a.Hdr.Name)
				extra[k] = append(extra[k], ip)
			}
		}
	}
	var out []DC
	for _, rr := range m.Answer {
		srv, ok := rr.(*dns.SRV)
		if !ok || srv.Target == "." {
			continue
		}
		target := strings.ToLower(srv.Target)
		addrs := extra[target]
		if len(addrs) == 0 {
			am, err := r.query(ctx, target, dns.TypeA)
			if err != nil && !errors.Is(err, errNoAnswer) {
				return nil, fmt.Errorf("address of %s: %w", strings.TrimSuffix(target, "."), err)
			}
			if am != nil {
				for _, arr := range am.Answer {
					if a, ok := arr.(*dns.A); ok {
						if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
							addrs = append(addrs, ip)
						}
					}
				}
			}
		}
		if len(addrs) == 0 {
			continue
		}
		slices.SortFunc(addrs, netip.Addr.Compare)
		out = append(out, DC{Host: strings.TrimSuffix(target, "."), Port: srv.Port, Priority: srv.Priority,
			Weight: srv.Weight, Addrs: slices.Compact(addrs)})
	}
	if len(out) == 0 {
		return nil, errNoAnswer
	}
	slices.SortStableFunc(out, func(a, b DC) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(b.Weight, a.Weight), strings.Compare(a.Host, b.Host))
	})
	return out, nil
}

// query asks the servers in turn until one answers. NXDOMAIN and an empty answer
// are errNoAnswer; a truncated UDP answer is asked again over TCP.
func (r resolver) query(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.RecursionDesired = true
	var errs []error
	for _, s := range r.servers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := exchange(ctx, q, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("DNS %s did not answer: %s", hostOf(s), plainNetError(err)))
			continue
		}
		switch m.Rcode {
		case dns.RcodeSuccess:
			if len(m.Answer) == 0 {
				return m, errNoAnswer
			}
			return m, nil
		case dns.RcodeNameError:
			return m, errNoAnswer
		default:
			errs = append(errs, fmt.Errorf("DNS %s answered %s", hostOf(s), dns.RcodeToString[m.Rcode]))
		}
	}
	return nil, errors.Join(errs...)
}

func exchange(ctx context.Context, q *dns.Msg, server string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultQueryTimeout)
	defer cancel()
	c := &dns.Client{Net: "udp"}
	m, _, err := c.ExchangeContext(ctx, q, server)
	if err == nil && m.Truncated {
		c.Net = "tcp"
		m, _, err = c.ExchangeContext(ctx, q, server)
	}
	return m, err
}

func hostOf(hostport string) string {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil || p == "53" {
		return h
	}
	return hostport
}

// plainNetError shortens a network error to what a user can act on.
func plainNetError(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return err.Error()
}
