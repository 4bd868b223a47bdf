package smb

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// NFSService is the Kerberos service name of NFS (RFC 7530 §3.2.1): clients ask
// for a ticket to nfs/<server's DNS name>.
const NFSService = "nfs"

// ServicePrincipal is service/fqdn, the SPN a client asks a ticket for
// (without the realm).
func ServicePrincipal(service, fqdn string) string {
	return service + "/" + strings.ToLower(fqdn)
}

var serviceRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// validateSPN checks service/fqdn as ServicePrincipal makes it.
func validateSPN(spn string) error {
	svc, host, ok := strings.Cut(spn, "/")
	if !ok || !serviceRE.MatchString(svc) {
		return invalid("spn", "must be service/host with a service name of lower-case letters, digits and '-'")
	}
	return validateRealm("spn", host)
}

// SPNListArgs lists the machine account's service principal names with the
// machine account's own credentials (-P): net ads setspn list -s <conf> -P.
// ParseSPNs reads the answer.
func SPNListArgs(conf string) ([]string, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	return []string{NetBinary, "ads", "setspn", "list", "-s", conf, "-P"}, nil
}

// SPNAddArgs adds spn (ServicePrincipal's service/fqdn) to the machine
// account as the machine account itself: net ads setspn add -s <conf> -P <spn>.
// AD lets a computer write its own servicePrincipalName only for host names it
// has (a validated write: its dNSHostName or NetBIOS name), so no user's
// password is needed for the machine's own names.
func SPNAddArgs(conf, spn string) ([]string, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	if err := validateSPN(spn); err != nil {
		return nil, err
	}
	return []string{NetBinary, "ads", "setspn", "add", "-s", conf, "-P", spn}, nil
}

// KeytabAddArgs adds service's keys to the instance's keytab (the default one,
// which Environ points at its own file): net ads keytab add -s <conf> -P
// <service>. net writes service/<netbios name> and service/<fqdn> under every
// encryption type of the machine account, from the machine password Samba keeps
// (no round trip to the domain for the keys), at the account's current key
// version (msDS-KeyVersionNumber, KvnoArgs), keeping the previous version's.
// winbindd does not rewrite the keytab when it changes the machine password
// (Samba 4.17, `kerberos method = secrets and keytab`; seen with `wbinfo
// --change-secret`): run it again when the key version moves.
func KeytabAddArgs(conf, service string) ([]string, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	if !serviceRE.MatchString(service) {
		return nil, invalid("service", "must be lower-case letters, digits and '-'")
	}
	return []string{NetBinary, "ads", "keytab", "add", "-s", conf, "-P", service}, nil
}

// KeytabListArgs lists the instance's keytab: net ads keytab list -s <conf>.
// ParseKeytabPrincipals reads the answer.
func KeytabListArgs(conf string) ([]string, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	return []string{NetBinary, "ads", "keytab", "list", "-s", conf}, nil
}

var spnLineRE = regexp.MustCompile(`(?m)^\s+([A-Za-z][A-Za-z0-9-]*/[A-Za-z0-9.-]+)\s*$`)

// ParseSPNs reads `net ads setspn list`'s answer: its indented service/host
// lines, each lower-cased.
func ParseSPNs(out string) []string {
	var spns []string
	for _, m := range spnLineRE.FindAllStringSubmatch(out, -1) {
		spns = append(spns, strings.ToLower(m[1]))
	}
	return spns
}

var keytabLineRE = regexp.MustCompile(`(?m)^\s*(\d+)\s+\S+\s+(\S+@\S+)\s*$`)

// ParseKeytabPrincipals reads `net ads keytab list`'s answer ("Vno  Type
// Principal" rows): the principals, each once, in the order they first appear.
func ParseKeytabPrincipals(out string) []string {
	var ps []string
	seen := map[string]bool{}
	for _, m := range keytabLineRE.FindAllStringSubmatch(out, -1) {
		if !seen[m[2]] {
			seen[m[2]] = true
			ps = append(ps, m[2])
		}
	}
	return ps
}

// KeytabHas reports whether `net ads keytab list`'s answer has keys of
// principal at key version kvno.
func KeytabHas(out, principal string, kvno int) bool {
	for _, m := range keytabLineRE.FindAllStringSubmatch(out, -1) {
		if m[2] == principal && m[1] == strconv.Itoa(kvno) {
			return true
		}
	}
	return false
}

// KvnoArgs asks the domain for the machine account's key version with its
// own credentials: net ads search -s <conf> -P (sAMAccountName=<NAME>$)
// msDS-KeyVersionNumber. ParseKvno reads the answer.
func KvnoArgs(conf, machineName string) ([]string, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	if err := validateMachineName("machineName", machineName); err != nil {
		return nil, err
	}
	return []string{NetBinary, "ads", "search", "-s", conf, "-P", "(sAMAccountName=" + machineName + "$)", "msDS-KeyVersionNumber"}, nil
}

var kvnoRE = regexp.MustCompile(`(?m)^msDS-KeyVersionNumber:\s*(\d+)\s*$`)

// ParseKvno reads KvnoArgs' answer.
func ParseKvno(out string) (int, error) {
	m := kvnoRE.FindAllStringSubmatch(out, -1)
	if len(m) != 1 {
		return 0, fmt.Errorf("net ads search: %d msDS-KeyVersionNumber lines, want one", len(m))
	}
	return strconv.Atoi(m[0][1])
}
