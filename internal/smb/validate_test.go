package smb

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestContainerDN(t *testing.T) {
	for _, tc := range []struct{ ou, realm, want string }{
		{"", "basin.test", "CN=Computers,DC=basin,DC=test"},
		{"Basin", "BASIN.TEST", "OU=Basin,DC=basin,DC=test"},
		{"Top/Sub", "corp.example.com", "OU=Sub,OU=Top,DC=corp,DC=example,DC=com"},
	} {
		got, err := ContainerDN(tc.ou, tc.realm)
		if err != nil || got != tc.want {
			t.Errorf("ContainerDN(%q, %q) = %q, %v; want %q", tc.ou, tc.realm, got, err, tc.want)
		}
	}
	// What OUPath makes from a DN comes back as that DN.
	path, err := OUPath("OU=Sub,OU=Top,DC=basin,DC=test", "basin.test")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := ContainerDN(path, "basin.test"); got != "OU=Sub,OU=Top,DC=basin,DC=test" {
		t.Errorf("round trip: %q", got)
	}
	for _, bad := range []struct{ ou, realm, field string }{{"a,b", "basin.test", "organizationalUnit"}, {"x/=y", "basin.test", "organizationalUnit"},
		{"Basin", "basin.test\n", "domain"}} {
		_, err := ContainerDN(bad.ou, bad.realm)
		wantField(t, err, bad.field)
	}
}

func TestDirectoryCheckArgs(t *testing.T) {
	got, err := DirectoryCheckArgs("/var/lib/basin/s/discovery.conf", "basinjoin", "dc1.basin.test", "OU=Basin,DC=basin,DC=test")
	want := []string{"net", "ads", "dn", "OU=Basin,DC=basin,DC=test", "distinguishedName", "allowedChildClassesEffective",
		"-s", "/var/lib/basin/s/discovery.conf", "-U", "basinjoin", "-S", "dc1.basin.test"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("args %q, %v; want %q", got, err, want)
	}
	for _, bad := range []struct{ user, server, dn, field string }{
		{"-x", "", "OU=Basin,DC=basin,DC=test", "username"},
		{"a%b", "", "OU=Basin,DC=basin,DC=test", "username"},
		{"u", "-S", "OU=Basin,DC=basin,DC=test", "server"},
		{"u", "", "OU=Basin,DC=basin,DC=test\n", "organizationalUnit"},
		{"u", "", "(objectClass=*)", "organizationalUnit"},
		{"u", "", "OU=Basin;x,DC=basin,DC=test", "organizationalUnit"},
	} {
		_, err := DirectoryCheckArgs("/c/smb.conf", bad.user, bad.server, bad.dn)
		wantField(t, err, bad.field)
	}
}

// Outputs of Samba 4.17's `net ads dn DN distinguishedName
// allowedChildClassesEffective` against test/addc's DC, as the spike printed them.
func TestCheckDirectory(t *testing.T) {
	const ou = "OU=Basin,DC=basin,DC=test"
	for _, tc := range []struct {
		name, out string
		rights    bool
		want      error
	}{
		{"delegated user", "Got 1 replies\n\ndistinguishedName: OU=Basin,DC=basin,DC=test\n\nallowedChildClassesEffective: computer\n\n", true, nil},
		{"user without rights", "Got 1 replies\n\ndistinguishedName: OU=Basin,DC=basin,DC=test\n\n", true, ErrInsufficientRights},
		{"default container needs none", "Got 1 replies\n\ndistinguishedName: OU=Basin,DC=basin,DC=test\n\n", false, nil},
		{"wrong password", "kerberos_kinit_password basinjoin@BASIN.TEST failed: Preauthentication failed\n", true, ErrBadCredentials},
		{"no such OU", "search failed: No such object\n", true, ErrOUNotFound},
		{"unreachable", "ads_connect: No logon servers are currently available to service the logon request.\n", true, ErrDCUnreachable},
		{"nothing", "", true, ErrJoinFailed},
		{"another DN", "Got 1 replies\n\ndistinguishedName: OU=Other,DC=basin,DC=test\n\nallowedChildClassesEffective: computer\n", true, ErrJoinFailed},
		{"other class", "Got 1 replies\n\ndistinguishedName: OU=Basin,DC=basin,DC=test\n\nallowedChildClassesEffective: user\nallowedChildClassesEffective: computerX\n", true, ErrInsufficientRights},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckDirectory(tc.out, ou, tc.rights)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			var je *JoinError
			if !errors.As(err, &je) || !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want a JoinError of %v", err, tc.want)
			}
			if tc.want == ErrOUNotFound && !strings.Contains(je.Reason, ou) {
				t.Errorf("reason %q does not name the OU", je.Reason)
			}
		})
	}
}

func FuzzCheckDirectory(f *testing.F) {
	f.Add("Got 1 replies\n\ndistinguishedName: OU=Basin,DC=basin,DC=test\n\nallowedChildClassesEffective: computer\n", true)
	f.Add("search failed: No such object\n", false)
	f.Fuzz(func(t *testing.T, out string, rights bool) {
		err := CheckDirectory(out, "OU=Basin,DC=basin,DC=test", rights)
		var je *JoinError
		if err != nil && !errors.As(err, &je) {
			t.Fatalf("%v is not a JoinError", err)
		}
	})
}
