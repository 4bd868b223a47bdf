package smb

import (
	"errors"
	"os"
	"slices"
	"testing"
)

func TestServicePrincipal(t *testing.T) {
	if got := ServicePrincipal(NFSService, "BKR-1A2B.basin.test"); got != "nfs/bkr-1a2b.basin.test" {
		t.Fatalf("got %q", got)
	}
}

func TestSPNArgs(t *testing.T) {
	const conf = "/var/lib/basin/sandboxes/n/smb/s1/smb.conf"
	for _, tc := range []struct {
		name string
		args func() ([]string, error)
		want []string // nil: a *FieldError
	}{
		{"list", func() ([]string, error) { return SPNListArgs(conf) },
			[]string{"net", "ads", "setspn", "list", "-s", conf, "-P"}},
		{"add", func() ([]string, error) { return SPNAddArgs(conf, "nfs/bkr-1a2b.basin.test") },
			[]string{"net", "ads", "setspn", "add", "-s", conf, "-P", "nfs/bkr-1a2b.basin.test"}},
		{"add an option", func() ([]string, error) { return SPNAddArgs(conf, "-U/x.test") }, nil},
		{"add no host", func() ([]string, error) { return SPNAddArgs(conf, "nfs") }, nil},
		{"add a bad host", func() ([]string, error) { return SPNAddArgs(conf, "nfs/a b.test") }, nil},
		{"add relative conf", func() ([]string, error) { return SPNAddArgs("smb.conf", "nfs/a.test") }, nil},
		{"keytab add", func() ([]string, error) { return KeytabAddArgs(conf, "nfs") },
			[]string{"net", "ads", "keytab", "add", "-s", conf, "-P", "nfs"}},
		{"keytab add a principal", func() ([]string, error) { return KeytabAddArgs(conf, "nfs/x.test") }, nil},
		{"keytab add an option", func() ([]string, error) { return KeytabAddArgs(conf, "-d10") }, nil},
		{"keytab list", func() ([]string, error) { return KeytabListArgs(conf) },
			[]string{"net", "ads", "keytab", "list", "-s", conf}},
		{"kvno", func() ([]string, error) { return KvnoArgs(conf, "BKR-1A2B") },
			[]string{"net", "ads", "search", "-s", conf, "-P", "(sAMAccountName=BKR-1A2B$)", "msDS-KeyVersionNumber"}},
		{"kvno of a filter", func() ([]string, error) { return KvnoArgs(conf, "X)(cn=*") }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.args()
			if tc.want == nil {
				var ie *FieldError
				if !errors.As(err, &ie) {
					t.Fatalf("got %q, %v; want a *FieldError", got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestParseSPNs(t *testing.T) {
	out, err := os.ReadFile("testdata/spn/setspn-list.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"host/bkr-1a2b.basin.test", "restrictedkrbhost/bkr-1a2b.basin.test", "host/bkr-1a2b",
		"restrictedkrbhost/bkr-1a2b", "nfs/bkr-1a2b.basin.test"}
	if got := ParseSPNs(string(out)); !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if got := ParseSPNs("Registered SPNs for BKR-1A2B\n"); len(got) != 0 {
		t.Fatalf("none registered: %q", got)
	}
}

func TestParseKeytabPrincipals(t *testing.T) {
	out, err := os.ReadFile("testdata/spn/keytab-list.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"host/bkr-1a2b.basin.test@BASIN.TEST", "host/BKR-1A2B@BASIN.TEST",
		"restrictedkrbhost/bkr-1a2b.basin.test@BASIN.TEST", "restrictedkrbhost/BKR-1A2B@BASIN.TEST",
		"BKR-1A2B$@BASIN.TEST", "nfs/bkr-1a2b.basin.test@BASIN.TEST", "nfs/BKR-1A2B@BASIN.TEST"}
	if got := ParseKeytabPrincipals(string(out)); !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	// No keytab yet: net prints an error and no rows.
	if got := ParseKeytabPrincipals("ads_keytab_list: Could not open keytab\n"); len(got) != 0 {
		t.Fatalf("got %q", got)
	}
}

func TestKeytabHasAndParseKvno(t *testing.T) {
	out, err := os.ReadFile("testdata/spn/keytab-list.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !KeytabHas(string(out), "nfs/bkr-1a2b.basin.test@BASIN.TEST", 1) {
		t.Error("kvno 1 not found")
	}
	if KeytabHas(string(out), "nfs/bkr-1a2b.basin.test@BASIN.TEST", 2) || KeytabHas(string(out), "nfs/other.basin.test@BASIN.TEST", 1) {
		t.Error("found what is not there")
	}
	kv, err := os.ReadFile("testdata/spn/kvno.txt")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ParseKvno(string(kv)); n != 2 || err != nil {
		t.Fatalf("ParseKvno = %d, %v", n, err)
	}
	for _, bad := range []string{"Got 0 replies\n", "msDS-KeyVersionNumber: 1\nmsDS-KeyVersionNumber: 2\n", "msDS-KeyVersionNumber: x\n"} {
		if _, err := ParseKvno(bad); err == nil {
			t.Errorf("ParseKvno(%q) accepted", bad)
		}
	}
}

func FuzzParseKeytabPrincipals(f *testing.F) {
	if out, err := os.ReadFile("testdata/spn/keytab-list.txt"); err == nil {
		f.Add(string(out))
	}
	f.Fuzz(func(t *testing.T, s string) {
		ParseKeytabPrincipals(s)
		ParseSPNs(s)
		ParseKvno(s)
		KeytabHas(s, "nfs/a.test@A.TEST", 1)
	})
}
