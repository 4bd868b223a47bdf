package smb

import (
	"fmt"
	"slices"
	"strings"
)

// LocalGroups are an Active Directory policy's grants on the SMB server itself (its
// administrators, backupOperators and securityOperators fields): domain users or
// groups made members of the server's BUILTIN groups, and granted privileges.
//
//   - Administrators join BUILTIN\Administrators, which holds the privileges a
//     Windows server's Administrators hold over files and shares: SeBackup,
//     SeRestore, SeTakeOwnership, SeSecurity and SeDiskOperator (share
//     permissions). With them an administrator takes ownership of the volume's
//     root and sets its NT ACL, as on Windows.
//   - BackupOperators join BUILTIN\Backup Operators: SeBackup and SeRestore.
//   - SecurityOperators are granted SeSecurityPrivilege (audit ACLs, SACLs).
//
// Samba keeps these in the instance's own passdb and privilege databases (its
// private and state directories); nothing of the host's is touched.
type LocalGroups struct {
	Administrators    []string `json:"administrators,omitempty"`
	BackupOperators   []string `json:"backupOperators,omitempty"`
	SecurityOperators []string `json:"securityOperators,omitempty"`
}

// Empty reports whether nothing is granted.
func (g LocalGroups) Empty() bool {
	return len(g.Administrators) == 0 && len(g.BackupOperators) == 0 && len(g.SecurityOperators) == 0
}

// The BUILTIN groups LocalGroups fills, and the privileges each holds.
const (
	BuiltinAdministrators   = "Administrators"
	BuiltinBackupOperators  = "Backup Operators"
	SecurityPrivilege       = "SeSecurityPrivilege"
	maxLocalGroupMembers    = 100
	maxLocalGroupMemberName = 256
)

// BuiltinPrivileges are the privileges granted to each BUILTIN group, as Windows
// grants them on a file server.
var BuiltinPrivileges = map[string][]string{
	BuiltinAdministrators:  {"SeBackupPrivilege", "SeRestorePrivilege", "SeTakeOwnershipPrivilege", SecurityPrivilege, "SeDiskOperatorPrivilege"},
	BuiltinBackupOperators: {"SeBackupPrivilege", "SeRestorePrivilege"},
}

// ValidateLocalGroups checks each list: at most 100 names, each a user or group
// name ("alice", "Domain Admins", "BASIN\alice"), at most 256 bytes, no control
// characters, none of ';#%', no leading '-' (an option to net), no duplicates.
func ValidateLocalGroups(g LocalGroups) error {
	for _, l := range []struct {
		field string
		names []string
	}{{"administrators", g.Administrators}, {"backupOperators", g.BackupOperators}, {"securityOperators", g.SecurityOperators}} {
		if len(l.names) > maxLocalGroupMembers {
			return invalid(l.field, "at most %d names", maxLocalGroupMembers)
		}
		seen := map[string]bool{}
		for _, n := range l.names {
			if err := checkValue(l.field, n, maxLocalGroupMemberName); err != nil {
				return err
			}
			if strings.HasPrefix(n, "-") {
				return invalid(l.field, "a name must not start with '-'")
			}
			if strings.Count(n, `\`) > 1 || strings.HasPrefix(n, `\`) || strings.HasSuffix(n, `\`) {
				return invalid(l.field, `%q: want a name or DOMAIN\name`, n)
			}
			if seen[strings.ToLower(n)] {
				return invalid(l.field, "%q is listed twice", n)
			}
			seen[strings.ToLower(n)] = true
		}
	}
	return nil
}

// QualifyMember names a member in the domain: "alice" becomes "BASIN\alice";
// "BASIN\alice" and "alice@basin.test" stay as they are.
func QualifyMember(workgroup, name string) string {
	if strings.ContainsAny(name, `\@`) {
		return name
	}
	return strings.ToUpper(workgroup) + `\` + name
}

// LocalGroupStep is one `net sam` command of a LocalGroupsPlan.
type LocalGroupStep struct {
	Argv []string
	// Member is the policy's name the step adds or grants to ("" for the
	// group's own setup): a failure on it is that name's fault.
	Member, Field string
	// Exists tells the output of a step that may find its work done (a group
	// already created) from a failure.
	Exists func(out string) bool
}

// LocalGroupsPlan returns the `net sam` commands that turn the grants applied
// (what an earlier plan did; zero at first) into want: create and privilege the
// BUILTIN groups want uses, add and remove members, grant and revoke
// SeSecurityPrivilege. Names are qualified with workgroup. Commands run inside the
// instance, with winbindd answering (names become SIDs through it).
func LocalGroupsPlan(conf, workgroup string, applied, want LocalGroups) ([]LocalGroupStep, error) {
	if err := validateConfPath(conf); err != nil {
		return nil, err
	}
	if err := ValidateLocalGroups(want); err != nil {
		return nil, err
	}
	net := func(a ...string) []string { return append([]string{NetBinary, "sam"}, append(a, "-s", conf)...) }
	var steps []LocalGroupStep
	for _, g := range []struct {
		group, field string
		had, want    []string
	}{
		{BuiltinAdministrators, "administrators", applied.Administrators, want.Administrators},
		{BuiltinBackupOperators, "backupOperators", applied.BackupOperators, want.BackupOperators},
	} {
		if len(g.want) > 0 {
			steps = append(steps,
				LocalGroupStep{Argv: net("createbuiltingroup", g.group), Exists: func(out string) bool {
					return strings.Contains(out, "already exists") || strings.Contains(out, "Created BUILTIN group")
				}},
				LocalGroupStep{Argv: net(append([]string{"rights", "grant", `BUILTIN\` + g.group}, BuiltinPrivileges[g.group]...)...)})
		}
		add, del := diffNames(workgroup, g.had, g.want)
		for _, n := range add {
			steps = append(steps, LocalGroupStep{Argv: net("addmem", `BUILTIN\`+g.group, QualifyMember(workgroup, n)), Member: n, Field: g.field,
				Exists: func(out string) bool { return strings.Contains(out, "is already a member") }})
		}
		for _, n := range del {
			steps = append(steps, LocalGroupStep{Argv: net("delmem", `BUILTIN\`+g.group, QualifyMember(workgroup, n)),
				Exists: func(out string) bool {
					return strings.Contains(out, "not a member") || strings.Contains(out, "Could not find")
				}})
		}
	}
	add, del := diffNames(workgroup, applied.SecurityOperators, want.SecurityOperators)
	for _, n := range add {
		steps = append(steps, LocalGroupStep{Argv: net("rights", "grant", QualifyMember(workgroup, n), SecurityPrivilege), Member: n, Field: "securityOperators"})
	}
	for _, n := range del {
		steps = append(steps, LocalGroupStep{Argv: net("rights", "revoke", QualifyMember(workgroup, n), SecurityPrivilege),
			Exists: func(out string) bool {
				return strings.Contains(out, "Failed to resolve") || strings.Contains(out, "Could not find")
			}})
	}
	return steps, nil
}

// diffNames returns the names of want that had lacks and those of had that want
// lacks, comparing qualified names without regard to case (as Windows does).
func diffNames(workgroup string, had, want []string) (add, del []string) {
	key := func(n string) string { return strings.ToLower(QualifyMember(workgroup, n)) }
	in := func(l []string, n string) bool {
		return slices.ContainsFunc(l, func(m string) bool { return key(m) == key(n) })
	}
	for _, n := range want {
		if !in(had, n) {
			add = append(add, n)
		}
	}
	for _, n := range had {
		if !in(want, n) {
			del = append(del, n)
		}
	}
	return add, del
}

// MemberError is a policy's name the domain does not know.
func MemberError(field, name, out string) error {
	return &JoinError{Kind: ErrJoinFailed, Reason: fmt.Sprintf("%s: %q is not a user or group the domain knows", field, name), Detail: firstLineOf(out)}
}

func firstLineOf(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
