package smb

import (
	"errors"
	"regexp"
	"strings"
)

// ContainerDN is the distinguished name of the container a join with ouPath
// (OUPath's result: "Top/Sub", or "" for the default) puts the computer object
// in: "OU=Sub,OU=Top,DC=basin,DC=test", or "CN=Computers,DC=basin,DC=test".
func ContainerDN(ouPath, realm string) (string, error) {
	if err := validateRealm("domain", realm); err != nil {
		return "", err
	}
	var rdns []string
	if ouPath == "" {
		rdns = []string{"CN=Computers"}
	} else {
		parts := strings.Split(ouPath, "/")
		for i := len(parts) - 1; i >= 0; i-- {
			if !ouValueRE.MatchString(parts[i]) {
				return "", invalid("organizationalUnit", "the OU path must be OUPath's result (names of letters, digits, blanks, '-', '_' and '.' separated by '/')")
			}
			rdns = append(rdns, "OU="+parts[i])
		}
	}
	for _, l := range strings.Split(strings.ToLower(realm), ".") {
		rdns = append(rdns, "DC="+l)
	}
	return strings.Join(rdns, ","), nil
}

// dnRE is what DirectoryCheckArgs accepts as a DN: ContainerDN's output.
var dnRE = regexp.MustCompile(`^(CN|OU)=[A-Za-z0-9 ._-]+(,OU=[A-Za-z0-9 ._-]+)*(,DC=[A-Za-z0-9-]+)+$`)

// DirectoryCheckArgs asks a DC, as the AD user, for the container a join would
// create the computer in: net ads dn <dn> distinguishedName
// allowedChildClassesEffective -s <conf> -U <user> [-S <dc>]. The bind checks the
// credentials (Kerberos, then NTLM), the answer whether the container exists, and
// AD's constructed allowedChildClassesEffective whether this user may create
// computer objects in it: nothing is written to the domain. The password goes
// through PasswordFD; CheckDirectory reads the output.
func DirectoryCheckArgs(conf, username, server, dn string) ([]string, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	if err := validateUsername(username); err != nil {
		return nil, err
	}
	if !dnRE.MatchString(dn) || len(dn) > maxOU {
		return nil, invalid("organizationalUnit", "%q is not a container DN ContainerDN makes", dn)
	}
	a := []string{NetBinary, "ads", "dn", dn, "distinguishedName", "allowedChildClassesEffective", "-s", conf, "-U", username}
	if server != "" {
		if err := validateServer(server); err != nil {
			return nil, err
		}
		a = append(a, "-S", server)
	}
	return a, nil
}

var (
	dnLineRE    = regexp.MustCompile(`(?mi)^distinguishedName:[ \t]*(.+?)[ \t]*\r?$`)
	childLineRE = regexp.MustCompile(`(?mi)^allowedChildClassesEffective:[ \t]*computer[ \t]*\r?$`)
)

// CheckDirectory reads DirectoryCheckArgs' output (stdout and stderr together)
// for container dn: nil when the bind worked, the container exists and, if
// needRights, the user may create computer objects in it; otherwise a
// *JoinError in plain words (wrong password, OU missing, no rights, DC
// unreachable…). The default Computers container needs no right of its own
// (ms-DS-MachineAccountQuota lets any user join a few machines there), so the
// caller passes needRights = false for it.
func CheckDirectory(out, dn string, needRights bool) error {
	m := dnLineRE.FindStringSubmatch(out)
	if m == nil || !strings.EqualFold(m[1], dn) {
		var je *JoinError
		if !errors.As(ClassifyJoinError(out), &je) {
			return &JoinError{Kind: ErrOUNotFound, Reason: ErrOUNotFound.Error() + ": " + dn}
		}
		if je.Kind == ErrOUNotFound {
			je.Reason = ErrOUNotFound.Error() + ": " + dn
		}
		return je
	}
	if needRights && !childLineRE.MatchString(out) {
		return &JoinError{Kind: ErrInsufficientRights, Reason: ErrInsufficientRights.Error() + " (" + dn + ")"}
	}
	return nil
}
