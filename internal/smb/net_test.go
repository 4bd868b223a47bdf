package smb

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestJoinArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    JoinOptions
		want []string
	}{
		{"OU and server", JoinOptions{Conf: "/s/smb.conf", Username: "basinjoin", OUPath: "BasinVolumes/Servers", Server: "dc1.basin.test"},
			[]string{"net", "ads", "join", "-s", "/s/smb.conf", "-U", "basinjoin", "--no-dns-updates", "-S", "dc1.basin.test", "createcomputer=BasinVolumes/Servers"}},
		{"default container", JoinOptions{Conf: "/s/smb.conf", Username: `BASIN\basinjoin`},
			[]string{"net", "ads", "join", "-s", "/s/smb.conf", "-U", `BASIN\basinjoin`, "--no-dns-updates"}},
		{"UPN and server IP", JoinOptions{Conf: "/s/smb.conf", Username: "join@basin.test", Server: "10.99.72.10", OUPath: "Basin Volumes"},
			[]string{"net", "ads", "join", "-s", "/s/smb.conf", "-U", "join@basin.test", "--no-dns-updates", "-S", "10.99.72.10", "createcomputer=Basin Volumes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := JoinArgs(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestNetArgsInvalid(t *testing.T) {
	ok := JoinOptions{Conf: "/s/smb.conf", Username: "basinjoin"}
	for _, tc := range []struct {
		name, field string
		mod         func(*JoinOptions)
	}{
		// '%' would make net read the rest of -U as the password.
		{"percent in user", "username", func(o *JoinOptions) { o.Username = "basinjoin%Passw0rd" }},
		{"option as user", "username", func(o *JoinOptions) { o.Username = "--debuglevel=10" }},
		{"newline in user", "username", func(o *JoinOptions) { o.Username = "a\nb" }},
		{"empty user", "username", func(o *JoinOptions) { o.Username = "" }},
		{"relative conf", "conf", func(o *JoinOptions) { o.Conf = "smb.conf" }},
		{"bad server", "server", func(o *JoinOptions) { o.Server = "-Sdc" }},
		{"OU not from OUPath", "organizationalUnit", func(o *JoinOptions) { o.OUPath = "A,DC=x" }},
		{"OU empty part", "organizationalUnit", func(o *JoinOptions) { o.OUPath = "A//B" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.mod(&o)
			_, err := JoinArgs(o)
			wantField(t, err, tc.field)
		})
	}
	_, err := LeaveArgs("/s/smb.conf", "a%b", "")
	wantField(t, err, "username")
	_, err = EnctypesArgs("/s/smb.conf", "basinjoin", "basin-3f2a", true)
	wantField(t, err, "machineName")
	_, err = DNSRegisterArgs("/s/smb.conf", "basin-3f2a.basin.test", nil)
	wantField(t, err, "addresses")
	_, err = DNSRegisterArgs("/s/smb.conf", "basin-3f2a.basin.test;x", []netip.Addr{netip.MustParseAddr("10.99.72.21")})
	wantField(t, err, "fqdn")
	_, err = DNSUnregisterArgs("/s/smb.conf", "")
	wantField(t, err, "fqdn")
	_, err = WorkgroupArgs("/s/smb.conf", "dc 1")
	wantField(t, err, "server")
}

func TestOtherNetArgs(t *testing.T) {
	ips := []netip.Addr{netip.MustParseAddr("10.99.72.21"), netip.MustParseAddr("10.99.72.22")}
	for _, tc := range []struct {
		name string
		got  func() ([]string, error)
		want []string
	}{
		{"leave", func() ([]string, error) { return LeaveArgs("/s/smb.conf", "basinjoin", "") },
			[]string{"net", "ads", "leave", "-s", "/s/smb.conf", "-U", "basinjoin"}},
		{"leave pinned", func() ([]string, error) { return LeaveArgs("/s/smb.conf", "basinjoin", "dc2.basin.test") },
			[]string{"net", "ads", "leave", "-s", "/s/smb.conf", "-U", "basinjoin", "-S", "dc2.basin.test"}},
		{"dns register", func() ([]string, error) { return DNSRegisterArgs("/s/smb.conf", "basin-3f2a.basin.test", ips) },
			[]string{"net", "ads", "dns", "register", "-s", "/s/smb.conf", "-P", "basin-3f2a.basin.test", "10.99.72.21", "10.99.72.22"}},
		{"dns unregister", func() ([]string, error) { return DNSUnregisterArgs("/s/smb.conf", "basin-3f2a.basin.test") },
			[]string{"net", "ads", "dns", "unregister", "-s", "/s/smb.conf", "-P", "basin-3f2a.basin.test"}},
		{"enctypes AES", func() ([]string, error) { return EnctypesArgs("/s/smb.conf", "basinjoin", "BASIN-3F2A", true) },
			[]string{"net", "ads", "enctypes", "set", "-s", "/s/smb.conf", "-U", "basinjoin", "BASIN-3F2A$", "24"}},
		{"enctypes default", func() ([]string, error) { return EnctypesArgs("/s/smb.conf", "basinjoin", "BASIN-3F2A", false) },
			[]string{"net", "ads", "enctypes", "set", "-s", "/s/smb.conf", "-U", "basinjoin", "BASIN-3F2A$", "28"}},
		{"testjoin", func() ([]string, error) { return CheckJoinArgs("/s/smb.conf") },
			[]string{"net", "ads", "testjoin", "-s", "/s/smb.conf"}},
		{"workgroup", func() ([]string, error) { return WorkgroupArgs("/s/discover.conf", "10.99.72.10") },
			[]string{"net", "ads", "workgroup", "-s", "/s/discover.conf", "-S", "10.99.72.10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.got()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
	if PasswordEnv != "PASSWD_FD=3" {
		t.Fatalf("PasswordEnv = %q", PasswordEnv)
	}
}

func TestClassifyJoinError(t *testing.T) {
	kinds := map[string]error{
		"dc_unreachable": ErrDCUnreachable, "bad_credentials": ErrBadCredentials, "account_unusable": ErrAccountUnusable,
		"insufficient_rights": ErrInsufficientRights, "ou_not_found": ErrOUNotFound, "bad_machine_name": ErrBadMachineName,
		"name_taken": ErrNameTaken, "clock_skew": ErrClockSkew, "join_failed": ErrJoinFailed, "ok": nil,
	}
	files, err := filepath.Glob("testdata/join/*.txt")
	if err != nil || len(files) < 15 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".txt")
		kindName, _, _ := strings.Cut(base, "__")
		want, ok := kinds[kindName]
		if !ok {
			t.Fatalf("%s: unknown kind %q", f, kindName)
		}
		seen[kindName] = true
		t.Run(base, func(t *testing.T) {
			out, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got := ClassifyJoinError(string(out))
			if want == nil {
				if got != nil {
					t.Fatalf("a successful join classified as %v", got)
				}
				return
			}
			if !errors.Is(got, want) {
				t.Fatalf("got %v, want kind %v", got, want)
			}
			var je *JoinError
			if !errors.As(got, &je) || je.Detail == "" || strings.Contains(je.Detail, "\n") {
				t.Fatalf("no one-line detail: %#v", got)
			}
			if !strings.HasPrefix(got.Error(), je.Reason) {
				t.Fatalf("message %q does not lead with the reason", got)
			}
		})
	}
	for k := range kinds {
		if !seen[k] {
			t.Errorf("no fixture for %s", k)
		}
	}
	// net retries over NTLM after a Kerberos refusal and finds the password pipe
	// read: the detail is the line that decided, not the last one.
	var je *JoinError
	if err := ClassifyJoinError("kerberos_kinit_password u@R failed: Preauthentication failed\nError reading password from file descriptor 3: empty password\n"); !errors.As(err, &je) ||
		!strings.Contains(je.Detail, "Preauthentication failed") {
		t.Fatalf("detail of a Kerberos refusal: %v", err)
	}
	if err := ClassifyJoinError(""); !errors.Is(err, ErrJoinFailed) {
		t.Fatalf("empty output: %v", err)
	}
	if err := ClassifyJoinError("something new went wrong"); !errors.Is(err, ErrJoinFailed) || !strings.Contains(err.Error(), "something new went wrong") {
		t.Fatalf("unknown output: %v", err)
	}
}

func FuzzClassifyJoinError(f *testing.F) {
	files, _ := filepath.Glob("testdata/join/*.txt")
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, out string) {
		err := ClassifyJoinError(out)
		if err == nil {
			return
		}
		var je *JoinError
		if !errors.As(err, &je) || je.Kind == nil || strings.Contains(je.Detail, "\n") || len(je.Detail) > 304 {
			t.Fatalf("%#v", err)
		}
	})
}

func TestParseWorkgroup(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"Workgroup: BASIN\n", "BASIN"},
		{"Workgroup: basin", "BASIN"},
		{"lp_load_ex: refreshing parameters\nWorkgroup: CORP-EU\r\n", "CORP-EU"},
	} {
		got, err := ParseWorkgroup(tc.out)
		if err != nil || got != tc.want {
			t.Errorf("ParseWorkgroup(%q) = %q, %v; want %q", tc.out, got, err, tc.want)
		}
	}
	for _, out := range []string{"", "CLDAP query failed!\n", "Workgroup: \n", "Workgroup: ABCDEFGHIJKLMNOPQ\n", "Workgroup: BA;SIN\n"} {
		if got, err := ParseWorkgroup(out); err == nil {
			t.Errorf("ParseWorkgroup(%q) = %q, want an error", out, got)
		}
	}
}

func FuzzParseWorkgroup(f *testing.F) {
	f.Add("Workgroup: BASIN\n")
	f.Fuzz(func(t *testing.T, out string) {
		w, err := ParseWorkgroup(out)
		if err != nil {
			return
		}
		// Whatever it accepts renders.
		o := testGlobal()
		o.Workgroup = w
		if _, err := RenderGlobal(o); err != nil {
			t.Fatalf("ParseWorkgroup gave %q, RenderGlobal refused it: %v", w, err)
		}
	})
}

func TestPasswordPipe(t *testing.T) {
	r, err := PasswordPipe("Passw0rd!Join")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b := make([]byte, 64)
	n, _ := r.Read(b)
	if string(b[:n]) != "Passw0rd!Join\n" {
		t.Fatalf("read %q", b[:n])
	}
	if _, err := PasswordPipe("a\nb"); err == nil {
		t.Fatal("a password with a newline would be cut by net")
	}
	if _, err := PasswordPipe(""); err == nil {
		t.Fatal("empty password accepted")
	}
}
