package smb

import (
	"encoding/hex"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// NetBIOS name limits. A NetBIOS name is at most 15 characters (Samba refuses 16:
// "Our netbios name can be at most 15 chars long"); Basin's machine names are
// "<prefix>-<4 hex>", which leaves the prefix 10.
const (
	MaxNetBIOSName   = 15
	MaxNetBIOSPrefix = 10
)

var (
	netbiosRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*$`)
	allDigitsRE = regexp.MustCompile(`^[0-9]+$`)
	// machineNameRE is what MachineName produces.
	machineNameRE = regexp.MustCompile(`^[A-Z0-9][A-Z0-9-]{0,9}-[0-9A-F]{4}$`)
	// dnsNameRE is a DNS domain name: labels of 1-63 letters, digits or hyphens.
	dnsNameRE = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)
)

// ValidateNetBIOSPrefix checks an AD connection's netBiosPrefix: 1-10 letters,
// digits or '-', not starting with '-' and not all digits (a NetBIOS computer name
// of digits only is refused by Windows).
func ValidateNetBIOSPrefix(p string) error {
	switch {
	case p == "":
		return invalid("netBiosPrefix", "is required")
	case len(p) > MaxNetBIOSPrefix:
		return invalid("netBiosPrefix", "must be at most %d characters (the service appends \"-\" and 4 hex digits, and a NetBIOS name has at most %d)", MaxNetBIOSPrefix, MaxNetBIOSName)
	case !netbiosRE.MatchString(p):
		return invalid("netBiosPrefix", "must be letters, digits or '-', not starting with '-'")
	case allDigitsRE.MatchString(p):
		return invalid("netBiosPrefix", "must not be all digits")
	}
	return nil
}

// MachineName returns a new SMB server name for a directory: the prefix in upper
// case, "-", and 4 upper-case hex digits read from rnd (crypto/rand.Reader in
// production), e.g. "BASIN-3F2A". It is at most 15 characters.
func MachineName(prefix string, rnd io.Reader) (string, error) {
	if err := ValidateNetBIOSPrefix(prefix); err != nil {
		return "", err
	}
	var b [2]byte
	if _, err := io.ReadFull(rnd, b[:]); err != nil {
		return "", fmt.Errorf("machine name: read random bytes: %w", err)
	}
	return strings.ToUpper(prefix) + "-" + strings.ToUpper(hex.EncodeToString(b[:])), nil
}

// validateMachineName checks a name MachineName made (field names the input).
func validateMachineName(field, name string) error {
	if !machineNameRE.MatchString(name) || allDigitsRE.MatchString(name[:strings.LastIndexByte(name, '-')]) {
		return invalid(field, "must be an upper-case NetBIOS name of the form PREFIX-XXXX of at most %d characters", MaxNetBIOSName)
	}
	return nil
}

// validateRealm checks a DNS domain name (the AD realm).
func validateRealm(field, realm string) error {
	if realm == "" {
		return invalid(field, "is required")
	}
	if len(realm) > 253 || !dnsNameRE.MatchString(realm) {
		return invalid(field, "must be a DNS domain name of at most 253 characters (labels of 1-63 letters, digits or hyphens)")
	}
	return nil
}

// validateWorkgroup checks a domain's NetBIOS name as CLDAP returns it: 1-15
// letters, digits, '-', '_' or '.', in the forms AD allows.
func validateWorkgroup(field, w string) error {
	if w == "" {
		return invalid(field, "is required")
	}
	if len(w) > MaxNetBIOSName || !workgroupRE.MatchString(w) {
		return invalid(field, "must be a NetBIOS domain name: 1-%d letters, digits, '-', '_' or '.', starting with a letter or digit", MaxNetBIOSName)
	}
	return nil
}

var workgroupRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
