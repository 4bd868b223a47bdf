// Package smb holds Basin's Samba and Active Directory logic that needs no sandbox:
// everything here is pure (or, for DC discovery, plain DNS) and unit-tested without
// root, daemons or namespaces. The sandbox side (running winbindd, smbd and
// samba-dcerpcd, feeding net its password, loading shares) uses these pieces.
//
// A short tour, in the order a directory and a share come to life:
//
//   - [ValidateNetBIOSPrefix] and [MachineName]: the SMB server's NetBIOS name,
//     "<PREFIX>-<4 hex>", at most 15 characters.
//   - [Discover]: domain controllers through the AD connection's DNS servers (site
//     SRV records first, then the domain-wide ones).
//   - [WorkgroupArgs] and [ParseWorkgroup]: the domain's NetBIOS name from a CLDAP
//     ping by `net ads workgroup`, run against [RenderDiscovery]'s configuration.
//   - [RenderGlobal]: the sandbox's smb.conf [global] section.
//   - [OUPath], [JoinArgs], [EnctypesArgs], [DNSRegisterArgs], [CheckJoinArgs]:
//     joining. The password never appears in argv or the environment: net reads
//     it from a pipe ([PasswordPipe], [PasswordEnv], [PasswordFD]).
//     [ClassifyJoinError] turns net's output into plain errors.
//   - [ShareParams], [ShareDiff]: a volume's registry share (`net conf setparm`).
//   - [MountOptions]: what a client runs to mount the share.
//   - [DNSUnregisterArgs], [LeaveArgs]: leaving, in that order.
//
// And for metrics, per-share I/O from smbd's own profile (profile.go):
// [ParseProfileDump] reads `tdbdump` of each process's counters, [ParseTcons]
// `smbstatus -S -j`'s shares per process, and [Accountant] sums each child's
// growth into the share it serves; [Accountant.State] and [RestoreAccountant]
// (accountstate.go) carry its sums across a restart of Basin.
//
// Every value that ends up in a configuration or an argv is validated first; a bad
// one is a [*FieldError] naming the field (errors.Is(err, ErrInvalid)).
//
// It knows nothing of Basin's model (drivers never import it): the controller
// translates a model.ActiveDirectory and a model.Volume into the options here.
// Imported by the dataplane and controller packages.
package smb
