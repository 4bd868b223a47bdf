package smb

import (
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxOU bounds an organizationalUnit DN.
const maxOU = 1024

// ouValueRE is what an OU name may hold here: letters, digits, blanks inside, '-',
// '_' and '.'. This is narrower than AD allows on purpose: `net ads join
// createcomputer=` splits on '/', unescapes '\' at several levels and builds an LDAP
// DN from the rest, so ',', '+', '=', quotes, '\', '/', '#', ';', '<', '>' and '%'
// are refused rather than escaped.
var ouValueRE = regexp.MustCompile(`^[\pL\pN_.-]([\pL\pN _.-]*[\pL\pN_.-])?$`)

// OUPath turns an AD connection's organizationalUnit, a DN such as
// "OU=Sub,OU=Top,DC=basin,DC=test", into the form `net ads join createcomputer=`
// takes: "Top/Sub", from the top and relative to the domain. The DC= suffix, when
// present, must be the realm's (case-insensitive); without one the DN is read as
// relative to the domain ("OU=Sub,OU=Top").
//
// The empty DN, and "CN=Computers" with or without the realm's DC= suffix, give
// "": join without createcomputer=. Samba then creates the computer account over
// SAMR, and AD puts it in the domain's well-known computers container (its
// wellKnownObjects entry: CN=Computers unless an admin redirected it with
// redircmp). That path needs a user with rights on that container or machine
// account quota; a user delegated only an OU is refused there ("User specified
// does not have administrator privileges").
//
// Other CN= containers, DC= components that are not the realm's suffix, multi-valued
// RDNs and unsafe characters are refused with an error naming organizationalUnit.
func OUPath(dn, realm string) (string, error) {
	const field = "organizationalUnit"
	if strings.TrimSpace(dn) == "" {
		return "", nil
	}
	if err := validateRealm("domain", realm); err != nil {
		return "", err
	}
	if len(dn) > maxOU {
		return "", invalid(field, "must be at most %d bytes", maxOU)
	}
	if !utf8.ValidString(dn) || strings.ContainsFunc(dn, unicode.IsControl) {
		return "", invalid(field, "must be valid UTF-8 without control characters")
	}
	rdns := strings.Split(dn, ",")
	var ous []string
	var dcs []string
	for i, rdn := range rdns {
		typ, val, ok := strings.Cut(strings.TrimSpace(rdn), "=")
		if !ok || strings.Contains(val, "=") {
			return "", invalid(field, "must be a DN of TYPE=value parts separated by ',' (part %d is not)", i+1)
		}
		typ = strings.ToUpper(strings.TrimSpace(typ))
		val = strings.TrimSpace(val)
		if !ouValueRE.MatchString(val) {
			return "", invalid(field, "part %d: names may hold only letters, digits, blanks, '-', '_' and '.' (no escapes, quotes, '/', '+', ';', '#' or '%%')", i+1)
		}
		switch typ {
		case "OU":
			if len(dcs) > 0 {
				return "", invalid(field, "OU= parts must come before the DC= parts")
			}
			ous = append(ous, val)
		case "CN":
			if i != 0 || !strings.EqualFold(val, "Computers") {
				return "", invalid(field, "only OU= parts (or the default CN=Computers alone) are supported")
			}
			ous = append(ous, "") // marks the default container
		case "DC":
			dcs = append(dcs, strings.ToLower(val))
		default:
			return "", invalid(field, "part %d: unsupported attribute type %q (use OU= and DC=)", i+1, typ)
		}
	}
	if len(dcs) > 0 && strings.Join(dcs, ".") != strings.ToLower(realm) {
		return "", invalid(field, "is outside the domain %s (its DC= parts say %s)", strings.ToLower(realm), strings.Join(dcs, "."))
	}
	if len(ous) == 0 {
		return "", invalid(field, "names no OU (give OU=... parts, or leave it empty for the default Computers container)")
	}
	if ous[0] == "" {
		if len(ous) > 1 {
			return "", invalid(field, "CN=Computers cannot be combined with OU= parts")
		}
		return "", nil
	}
	slices.Reverse(ous)
	return strings.Join(ous, "/"), nil
}
