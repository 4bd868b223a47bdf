package smb

import (
	"errors"
	"strings"
	"testing"
)

func argvs(steps []LocalGroupStep) []string {
	var out []string
	for _, s := range steps {
		out = append(out, strings.Join(s.Argv, " "))
	}
	return out
}

func TestLocalGroupsPlan(t *testing.T) {
	const conf = "/d/smb.conf"
	// From nothing: each group is created and given its privileges, then its
	// members added; security operators get the privilege itself.
	steps, err := LocalGroupsPlan(conf, "basin", LocalGroups{}, LocalGroups{Administrators: []string{"alice", `OTHER\Admins`},
		SecurityOperators: []string{"bob@basin.test"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"net sam createbuiltingroup Administrators -s /d/smb.conf",
		`net sam rights grant BUILTIN\Administrators SeBackupPrivilege SeRestorePrivilege SeTakeOwnershipPrivilege SeSecurityPrivilege SeDiskOperatorPrivilege -s /d/smb.conf`,
		`net sam addmem BUILTIN\Administrators BASIN\alice -s /d/smb.conf`,
		`net sam addmem BUILTIN\Administrators OTHER\Admins -s /d/smb.conf`,
		"net sam rights grant bob@basin.test SeSecurityPrivilege -s /d/smb.conf",
	}
	if got := argvs(steps); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if steps[2].Member != "alice" || steps[2].Field != "administrators" || steps[0].Member != "" {
		t.Errorf("steps name the wrong member: %+v", steps)
	}
	if !steps[0].Exists("Could not create Administrators: ... already exists") || !steps[2].Exists(`BASIN\alice is already a member`) {
		t.Error("a step that finds its work done is taken for a failure")
	}

	// A change: names compare case-insensitively and qualified; removed ones go.
	steps, err = LocalGroupsPlan(conf, "BASIN", LocalGroups{Administrators: []string{"alice", "carol"}, BackupOperators: []string{"bk"},
		SecurityOperators: []string{"sec"}}, LocalGroups{Administrators: []string{`basin\ALICE`}})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{
		"net sam createbuiltingroup Administrators -s /d/smb.conf",
		`net sam rights grant BUILTIN\Administrators SeBackupPrivilege SeRestorePrivilege SeTakeOwnershipPrivilege SeSecurityPrivilege SeDiskOperatorPrivilege -s /d/smb.conf`,
		`net sam delmem BUILTIN\Administrators BASIN\carol -s /d/smb.conf`,
		`net sam delmem BUILTIN\Backup Operators BASIN\bk -s /d/smb.conf`,
		`net sam rights revoke BASIN\sec SeSecurityPrivilege -s /d/smb.conf`,
	}
	if got := argvs(steps); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Nothing asked, nothing applied: no command.
	if steps, _ := LocalGroupsPlan(conf, "BASIN", LocalGroups{}, LocalGroups{}); len(steps) != 0 {
		t.Errorf("empty plan has steps: %v", argvs(steps))
	}
}

func TestValidateLocalGroups(t *testing.T) {
	for _, g := range []LocalGroups{
		{Administrators: []string{"-s/etc/passwd"}},
		{Administrators: []string{"a\nb"}},
		{BackupOperators: []string{`\alice`}},
		{BackupOperators: []string{`A\B\c`}},
		{SecurityOperators: []string{"x", "X"}},
		{SecurityOperators: []string{"%U"}},
		{Administrators: []string{""}},
	} {
		err := ValidateLocalGroups(g)
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%+v: accepted (%v)", g, err)
		}
		if _, err := LocalGroupsPlan("/d/smb.conf", "BASIN", LocalGroups{}, g); err == nil {
			t.Errorf("%+v: planned", g)
		}
	}
	if err := ValidateLocalGroups(LocalGroups{Administrators: []string{"Domain Admins", `BASIN\alice`, "bob@basin.test"}}); err != nil {
		t.Error(err)
	}
}
