package smb

import "testing"

func TestOUPath(t *testing.T) {
	for _, tc := range []struct {
		name, dn, realm, want string
		bad                   bool
	}{
		{name: "two levels", dn: "OU=Sub,OU=Top,DC=basin,DC=test", realm: "basin.test", want: "Top/Sub"},
		{name: "spike OU", dn: "OU=Servers,OU=BasinVolumes,DC=basin,DC=test", realm: "BASIN.TEST", want: "BasinVolumes/Servers"},
		{name: "one level, lower-case types, blanks", dn: "ou=Basin Volumes, dc=Basin, dc=Test", realm: "basin.test", want: "Basin Volumes"},
		{name: "relative DN", dn: "OU=Servers,OU=BasinVolumes", realm: "basin.test", want: "BasinVolumes/Servers"},
		{name: "empty is the default container", dn: "", realm: "basin.test", want: ""},
		{name: "CN=Computers alone", dn: "CN=Computers", realm: "basin.test", want: ""},
		{name: "CN=Computers in the realm", dn: "CN=Computers,DC=basin,DC=test", realm: "basin.test", want: ""},
		{name: "other realm", dn: "OU=Top,DC=evil,DC=test", realm: "basin.test", bad: true},
		{name: "parent realm only", dn: "OU=Top,DC=test", realm: "basin.test", bad: true},
		{name: "DC in the middle", dn: "OU=A,DC=basin,OU=B,DC=test", realm: "basin.test", bad: true},
		{name: "other CN", dn: "CN=Users,DC=basin,DC=test", realm: "basin.test", bad: true},
		{name: "CN with OU", dn: "CN=Computers,OU=Top,DC=basin,DC=test", realm: "basin.test", bad: true},
		{name: "slash", dn: "OU=A/B,DC=basin,DC=test", realm: "basin.test", bad: true},
		{name: "escaped comma", dn: `OU=A\,B,DC=basin,DC=test`, realm: "basin.test", bad: true},
		{name: "multi-valued RDN", dn: "OU=A+CN=B,DC=basin,DC=test", realm: "basin.test", bad: true},
		{name: "quote", dn: `OU="A",DC=basin,DC=test`, realm: "basin.test", bad: true},
		{name: "newline", dn: "OU=A\n,DC=basin,DC=test", realm: "basin.test", bad: true},
		{name: "percent", dn: "OU=%u,DC=basin,DC=test", realm: "basin.test", bad: true},
		{name: "empty value", dn: "OU=,DC=basin,DC=test", realm: "basin.test", bad: true},
		{name: "no equals", dn: "Servers", realm: "basin.test", bad: true},
		{name: "DC only", dn: "DC=basin,DC=test", realm: "basin.test", bad: true},
		{name: "unknown type", dn: "O=Org,DC=basin,DC=test", realm: "basin.test", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := OUPath(tc.dn, tc.realm)
			if tc.bad {
				wantField(t, err, "organizationalUnit")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("OUPath(%q) = %q, want %q", tc.dn, got, tc.want)
			}
		})
	}
}

func FuzzOUPath(f *testing.F) {
	for _, s := range []string{"OU=Sub,OU=Top,DC=basin,DC=test", "CN=Computers", "", `OU=a\,b`, "OU=A/B"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dn string) {
		p, err := OUPath(dn, "basin.test")
		if err != nil || p == "" {
			return
		}
		// Whatever OUPath accepts, JoinArgs accepts and passes as one argument.
		a, err := JoinArgs(JoinOptions{Conf: "/s/smb.conf", Username: "u", OUPath: p})
		if err != nil {
			t.Fatalf("OUPath gave %q, JoinArgs refused it: %v", p, err)
		}
		if a[len(a)-1] != "createcomputer="+p {
			t.Fatalf("argv %q", a)
		}
	})
}
