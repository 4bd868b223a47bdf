package smb

import (
	"fmt"
	"net/netip"
	"strings"
)

// MountOption is what the v1 API's Volume.mountOptions holds for SMB
// (google.cloud.netapp.v1.MountOption); the caller adds protocol SMB.
type MountOption struct {
	Export       string // the share name
	ExportFull   string // \\name.domain\share
	Instructions string // Windows and Linux commands
	IPAddress    string // the volume's endpoint address
}

// MountSpec describes one SMB volume for its clients.
type MountSpec struct {
	MachineName string     // the SMB server's NetBIOS name (MachineName)
	Realm       string     // the AD domain ("basin.test")
	Workgroup   string     // the domain's NetBIOS name ("BASIN"), for username= mounts
	Share       string     // the share name
	Address     netip.Addr // the volume's endpoint address ("" when it has none yet)
	Encrypt     bool       // ENCRYPT_DATA: Linux clients must ask for sealing
}

// MountOptions returns the UNC path \\NAME.domain\share (lower-case FQDN, which
// is the computer's dNSHostName and the name Kerberos needs: by IP, Kerberos
// fails with ACCESS_DENIED: an address has no SPN) and the commands a Windows (`net use`)
// and a Linux (`mount -t cifs`, Kerberos or a password) client runs.
func MountOptions(s MountSpec) (MountOption, error) {
	if err := validateMachineName("machineName", s.MachineName); err != nil {
		return MountOption{}, err
	}
	if err := validateRealm("domain", s.Realm); err != nil {
		return MountOption{}, err
	}
	if err := ValidateShareName(s.Share); err != nil {
		return MountOption{}, err
	}
	wg := strings.ToUpper(s.Workgroup)
	if wg != "" {
		if err := validateWorkgroup("workgroup", wg); err != nil {
			return MountOption{}, err
		}
	} else {
		wg = strings.ToUpper(strings.SplitN(s.Realm, ".", 2)[0])
	}
	host := strings.ToLower(s.MachineName) + "." + strings.ToLower(strings.TrimSuffix(s.Realm, "."))
	realm := strings.ToUpper(strings.TrimSuffix(s.Realm, "."))
	unc := `\\` + host + `\` + s.Share
	opts := "vers=3.1.1"
	if s.Encrypt {
		opts += ",seal"
	}
	instr := fmt.Sprintf(`Windows (a domain member, signed in as a domain user): net use Z: %[1]s /persistent:yes. `+
		`Linux with Kerberos: kinit USER@%[2]s, then sudo mkdir -p /mnt/%[3]s && sudo mount -t cifs //%[4]s/%[3]s /mnt/%[3]s -o sec=krb5,cruid=$(id -u),%[5]s. `+
		`Linux with a password: sudo mount -t cifs //%[4]s/%[3]s /mnt/%[3]s -o username=USER,domain=%[6]s,%[5]s (mount.cifs asks for the password). `+
		`Use the name, not the address: Kerberos needs it. Access follows the share's and files' NT ACLs.`,
		unc, realm, s.Share, host, opts, wg)
	mo := MountOption{Export: s.Share, ExportFull: unc, Instructions: instr}
	if s.Address.IsValid() {
		mo.IPAddress = s.Address.String()
	}
	return mo, nil
}
