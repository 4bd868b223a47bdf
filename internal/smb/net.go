package smb

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
)

// NetBinary is Samba's net tool; argv here start with it.
const NetBinary = "net"

// PasswordFD is the descriptor net reads the AD password from: a command built
// by JoinArgs, LeaveArgs or EnctypesArgs runs with PasswordEnv in its environment
// and the read end of a pipe as its first extra file (exec.Cmd.ExtraFiles[0] is
// descriptor 3); the caller writes the password, then closes the write end.
//
// Samba 4.17's common command line (cli_credentials_guess) reads PASSWD_FD up to
// a newline or end of file before parsing -U, and `-U user` without '%' keeps that
// password. PASSWD (the environment) also works but stays readable in
// /proc/<pid>/environ; net has no --password-file option in 4.17 and prompting
// needs a terminal. The password therefore never appears in argv, the
// environment or a file.
const PasswordFD = 3

// PasswordEnv is the environment entry that points net at PasswordFD.
var PasswordEnv = fmt.Sprintf("PASSWD_FD=%d", PasswordFD)

// JoinOptions are a `net ads join`'s inputs besides the password.
type JoinOptions struct {
	Conf     string // the sandbox's smb.conf (RenderGlobal)
	Username string // the AD connection's user, allowed to create computers in the OU
	// OUPath is OUPath's result: "Top/Sub", or "" for the default Computers
	// container.
	OUPath string
	// Server optionally pins the DC (Discover's first host); "" lets Samba find
	// one through the sandbox's resolv.conf.
	Server string
}

// JoinArgs is the argv of the join: net ads join -s <conf> -U <user>
// --no-dns-updates [-S <dc>] [createcomputer=<Top/Sub>]. DNS registration is a
// separate step (DNSRegisterArgs: registering during the join needs the machine
// name to resolve to its FQDN), and the Kerberos encryption types another
// (EnctypesArgs: the join ignores `kerberos encryption types`). The password goes
// through PasswordFD.
func JoinArgs(o JoinOptions) ([]string, error) {
	if err := validateConfPath(o.Conf); err != nil {
		return nil, err
	}
	if err := validateUsername(o.Username); err != nil {
		return nil, err
	}
	a := []string{NetBinary, "ads", "join", "-s", o.Conf, "-U", o.Username, "--no-dns-updates"}
	if o.Server != "" {
		if err := validateServer(o.Server); err != nil {
			return nil, err
		}
		a = append(a, "-S", o.Server)
	}
	if o.OUPath != "" {
		for _, part := range strings.Split(o.OUPath, "/") {
			if !ouValueRE.MatchString(part) {
				return nil, invalid("organizationalUnit", "the OU path must be OUPath's result (names of letters, digits, blanks, '-', '_' and '.' separated by '/')")
			}
		}
		a = append(a, "createcomputer="+o.OUPath)
	}
	return a, nil
}

// LeaveArgs is the argv that deletes the computer account: net ads leave -s
// <conf> -U <user> [-S <dc>], the password through PasswordFD. Run
// DNSUnregisterArgs first: a stale A record blocks the next join's registration
// under that name.
func LeaveArgs(conf, username, server string) ([]string, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	if err := validateUsername(username); err != nil {
		return nil, err
	}
	a := []string{NetBinary, "ads", "leave", "-s", conf, "-U", username}
	if server != "" {
		if err := validateServer(server); err != nil {
			return nil, err
		}
		a = append(a, "-S", server)
	}
	return a, nil
}

// DNSRegisterArgs registers the SMB server's name with its endpoint addresses
// using the machine account (-P, no password): net ads dns register -s <conf> -P
// <fqdn> <ip>...
func DNSRegisterArgs(conf, fqdn string, addrs []netip.Addr) ([]string, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	if err := validateRealm("fqdn", fqdn); err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, invalid("addresses", "at least one address is required")
	}
	a := []string{NetBinary, "ads", "dns", "register", "-s", conf, "-P", fqdn}
	for _, ip := range addrs {
		if !ip.IsValid() || ip.Zone() != "" || ip.IsUnspecified() {
			return nil, invalid("addresses", "%q is not a unicast address", ip)
		}
		a = append(a, ip.String())
	}
	return a, nil
}

// DNSUnregisterArgs removes the name's records with the machine account: net ads
// dns unregister -s <conf> -P <fqdn>. Run it before LeaveArgs.
func DNSUnregisterArgs(conf, fqdn string) ([]string, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	if err := validateRealm("fqdn", fqdn); err != nil {
		return nil, err
	}
	return []string{NetBinary, "ads", "dns", "unregister", "-s", conf, "-P", fqdn}, nil
}

// Kerberos encryption type sets for msDS-SupportedEncryptionTypes.
const (
	EnctypesAES    = 24 // AES128 + AES256
	EnctypesJoined = 28 // RC4 + AES128 + AES256: what a 4.17 join writes
)

// EnctypesArgs sets the computer account's Kerberos encryption types: AES only when
// aes (the AD connection's aesEncryption), else what the join writes. The join
// itself ignores `kerberos encryption types`. net ads enctypes set -s <conf> -U
// <user> <NAME>$ <24|28>, password through PasswordFD.
func EnctypesArgs(conf, username, machineName string, aes bool) ([]string, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	if err := validateUsername(username); err != nil {
		return nil, err
	}
	if err := validateMachineName("machineName", machineName); err != nil {
		return nil, err
	}
	types := EnctypesJoined
	if aes {
		types = EnctypesAES
	}
	return []string{NetBinary, "ads", "enctypes", "set", "-s", conf, "-U", username, machineName + "$", fmt.Sprint(types)}, nil
}

// CheckJoinArgs checks the machine account (no password): net ads testjoin -s
// <conf>; it prints "Join is OK".
func CheckJoinArgs(conf string) ([]string, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	return []string{NetBinary, "ads", "testjoin", "-s", conf}, nil
}

// WorkgroupArgs asks a DC for the domain's NetBIOS name by a CLDAP ping (no
// credentials): net ads workgroup -s <conf> [-S <dc>], with conf from
// RenderDiscovery. ParseWorkgroup reads the answer. With server "" net finds a DC
// of the conf's realm through the sandbox's resolv.conf (the path the spike used
// for `net ads lookup`); with -S it pings that DC only and sends no realm (net's
// own behaviour with -S).
func WorkgroupArgs(conf, server string) ([]string, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	a := []string{NetBinary, "ads", "workgroup", "-s", conf}
	if server != "" {
		if err := validateServer(server); err != nil {
			return nil, err
		}
		a = append(a, "-S", server)
	}
	return a, nil
}

var workgroupLineRE = regexp.MustCompile(`(?m)^Workgroup:[ \t]*(\S+)[ \t]*\r?$`)

// ParseWorkgroup reads `net ads workgroup`'s "Workgroup: BASIN" and checks the
// name as RenderGlobal will.
func ParseWorkgroup(out string) (string, error) {
	m := workgroupLineRE.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("net ads workgroup: no \"Workgroup:\" line in its output")
	}
	if err := validateWorkgroup("workgroup", m[1]); err != nil {
		return "", fmt.Errorf("net ads workgroup: %w", err)
	}
	return strings.ToUpper(m[1]), nil
}

func validateConfPath(p string) error { return validateDir("conf", p) }

// validateUsername checks the join user: no '%' (net would read the rest as the
// password), no leading '-' (an option), no control characters.
func validateUsername(u string) error {
	if err := checkValue("username", u, 256); err != nil {
		return err
	}
	if strings.HasPrefix(u, "-") {
		return invalid("username", "must not start with '-'")
	}
	return nil
}

func validateServer(s string) error {
	if _, err := netip.ParseAddr(s); err == nil {
		return nil
	}
	return validateRealm("server", s)
}

// Join failure kinds; ClassifyJoinError's errors wrap one of them.
var (
	ErrBadCredentials     = errors.New("the AD user name or password is wrong")
	ErrAccountUnusable    = errors.New("the AD user account cannot log on")
	ErrInsufficientRights = errors.New("the AD user may not create computer accounts there")
	ErrOUNotFound         = errors.New("the organizational unit does not exist")
	ErrDCUnreachable      = errors.New("no domain controller could be reached")
	ErrNameTaken          = errors.New("the machine name is already taken in the domain")
	ErrClockSkew          = errors.New("this server's clock differs too much from the domain controller's")
	ErrBadMachineName     = errors.New("the domain refused the machine name")
	ErrJoinFailed         = errors.New("joining the domain failed")
	// ErrServerStart is no refusal by the domain: the machine is joined, but
	// its SMB server (samba-dcerpcd, winbindd, smbd) did not start; the join
	// is kept and the start is tried again.
	ErrServerStart = errors.New("the SMB server did not start")
)

// JoinError is a classified `net ads join` failure.
type JoinError struct {
	Kind   error  // one of the Err* kinds above
	Reason string // plain words for the user
	Detail string // net's own line, e.g. "Failed to join domain: ...: Logon failure"
}

func (e *JoinError) Error() string {
	if e.Detail == "" {
		return e.Reason
	}
	return e.Reason + " (net: " + e.Detail + ")"
}

// Unwrap makes errors.Is(err, ErrClockSkew) and the like work.
func (e *JoinError) Unwrap() error { return e.Kind }

// joinPatterns are matched in order against net's output (case-insensitive); the
// first match decides. The order puts specific reasons before the generic ones
// that often share a line with them.
var joinPatterns = []struct {
	kind   error
	reason string
	texts  []string
}{
	{ErrClockSkew, "", []string{"clock skew too great", "krb_ap_err_skew", "ap_err_skew", "time skew", "time difference at dc", "time_difference_at_dc"}},
	{ErrBadMachineName, "", []string{"can be at most 15 chars", "improperly formed account name", "format of the specified computer name is invalid"}},
	{ErrNameTaken, "", []string{"already in use", "entry_exists", "nt_status_user_exists", "account already exists", "already exists",
		// NT_STATUS_NONE_MAPPED: a computer account of that name exists elsewhere.
		"none of the information to be translated has been translated"}},
	{ErrOUNotFound, "", []string{"no such object", "invalid dn syntax", "couldn't lookup computer container"}},
	{ErrAccountUnusable, "the AD user account is locked out", []string{"account locked out", "account_locked_out"}},
	{ErrAccountUnusable, "the AD user account is disabled", []string{"account disabled", "nt_status_account_disabled", "client's credentials have been revoked"}},
	{ErrAccountUnusable, "the AD user's password has expired or must be changed", []string{"must change password", "password has expired", "password_expired", "password_must_change"}},
	{ErrInsufficientRights, "", []string{"insufficient access", "does not have administrator privileges", "insufficient quota", "constraint violation", "nt_status_access_denied", "access denied", "access is denied"}},
	{ErrBadCredentials, "", []string{"logon failure", "nt_status_logon_failure", "preauthentication failed", "client not found in kerberos database", "attempted logon is invalid", "invalid credentials", "nt_status_no_such_user", "nt_status_wrong_password"}},
	{ErrDCUnreachable, "", []string{"failed to find dc", "no logon servers", "cannot contact any kdc", "cannot find kdc", "nt_status_io_timeout", "device timeout", "not completed before the time-out",
		"connection refused", "nt_status_connection_refused", "host_unreachable", "network_unreachable", "no route to host", "network name cannot be found", "unable to find a suitable server", "nt_status_bad_network_name", "could not find a domain controller"}},
}

// ClassifyJoinError maps `net ads join`'s combined output (stdout and stderr) to
// a *JoinError in plain words, wrapping one of the Err* kinds: wrong password,
// missing rights on the OU, DC unreachable, name taken, clock skew (and a few
// more); anything else is ErrJoinFailed. A successful join's output ("Joined
// 'NAME' to dns domain ...") gives nil.
// net never prints the password; the caller must still not log it.
func ClassifyJoinError(output string) error {
	out := strings.TrimSpace(output)
	if out == "" {
		return &JoinError{Kind: ErrJoinFailed, Reason: ErrJoinFailed.Error() + " without a message"}
	}
	if ok, _ := regexp.MatchString(`(?m)^(Joined '|Using short domain name)`, out); ok && !strings.Contains(out, "Failed to join") {
		return nil
	}
	lower := strings.ToLower(out)
	for _, p := range joinPatterns {
		for _, t := range p.texts {
			if strings.Contains(lower, t) {
				reason := p.reason
				if reason == "" {
					reason = p.kind.Error()
				}
				return &JoinError{Kind: p.kind, Reason: reason, Detail: detailLine(out, t)}
			}
		}
	}
	return &JoinError{Kind: ErrJoinFailed, Reason: ErrJoinFailed.Error(), Detail: detailLine(out, "")}
}

// detailLine picks net's line that says what went wrong: the one holding
// matched (the text that decided the kind; net goes on after a Kerberos failure
// and its last line may be about something else, such as an NTLM retry finding
// the password pipe empty), else its "Failed to join domain: ..." line, else the
// last non-empty line; at most 300 bytes.
func detailLine(out, matched string) string {
	lines := strings.Split(out, "\n")
	pick := ""
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if matched != "" && strings.Contains(strings.ToLower(l), matched) {
			pick = l
			break
		}
		pick = l
		if matched == "" && strings.Contains(l, "Failed to join domain") {
			break
		}
	}
	if len(pick) > 300 {
		pick = pick[:300] + "…"
	}
	return pick
}

// maxPassword is AD's limit on a password (and well below a pipe's buffer, so
// PasswordPipe never blocks).
const maxPassword = 256

// PasswordPipe returns the read end of a pipe holding password and a newline, its
// write end already closed: pass it as exec.Cmd.ExtraFiles[0] (descriptor
// PasswordFD) with PasswordEnv, and close it after Start. net reads up to the
// newline, so a password containing one is refused (as is an empty one). The
// error never repeats the password.
func PasswordPipe(password string) (*os.File, error) {
	if password == "" || len(password) > maxPassword || strings.ContainsAny(password, "\n\x00") {
		return nil, invalid("password", "must be 1-%d bytes without newlines or NUL", maxPassword)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("password pipe: %w", err)
	}
	_, werr := w.Write([]byte(password + "\n"))
	cerr := w.Close()
	if err := errors.Join(werr, cerr); err != nil {
		r.Close()
		return nil, fmt.Errorf("password pipe: %w", err)
	}
	return r, nil
}
