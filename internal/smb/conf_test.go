package smb

import (
	"errors"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func testGlobal() GlobalOptions {
	return GlobalOptions{
		Realm: "basin.test", Workgroup: "basin", MachineName: "BASIN-3F2A",
		StateDir:  "/var/lib/basin/sandboxes/default/smb",
		Addresses: []netip.Addr{netip.MustParseAddr("10.99.72.21"), netip.MustParseAddr("10.99.72.22")},
		AESOnly:   true, LDAPSigning: true, DCs: []string{"dc2.basin.test", "dc1.basin.test"},
	}
}

func TestRenderGlobalGolden(t *testing.T) {
	s, err := RenderGlobal(testGlobal())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "global.conf", s)

	o := testGlobal()
	o.AESOnly, o.LDAPSigning, o.Addresses, o.LogLevel, o.DCs = false, false, nil, 3, nil
	s, err = RenderGlobal(o)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "global_no_aes.conf", s)

	d, err := RenderDiscovery("basin.test", "/var/lib/basin/sandboxes/default/smb")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "discovery.conf", d)
}

// TestRenderGlobalSettings pins the settings the spike found necessary, so a
// golden-file rewrite cannot drop one unnoticed.
func TestRenderGlobalSettings(t *testing.T) {
	s, err := RenderGlobal(testGlobal())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\trealm = BASIN.TEST\n", "\tworkgroup = BASIN\n", "\tnetbios name = BASIN-3F2A\n",
		"\tinterfaces = 127.0.0.1 10.99.72.21 10.99.72.22\n", "\tbind interfaces only = yes\n",
		"\tregistry shares = yes\n", "\tidmap config BASIN : backend = rid\n", "\tidmap config BASIN : range = 100000-2099999999\n",
		"\tidmap config * : range = 3000-7999\n", "\tserver multi channel support = yes\n",
		"\tkerberos method = secrets and keytab\n", "\tkerberos encryption types = strong\n",
		"\tclient ldap sasl wrapping = seal\n", "\trpc start on demand helpers = no\n",
		"\tpassword server = dc2.basin.test dc1.basin.test\n",
		"\twinbindd socket directory = /run/samba/winbindd\n",
		"\tprivate dir = /var/lib/basin/sandboxes/default/smb/private\n",
		"\tfruit:aapl = yes\n", "\tfruit:nfs_aces = no\n", "\tmax log size = " + MaxLogKiB + "\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q", want)
		}
	}
	// No log file named after a client's machine name (%m): see RenderGlobal.
	for _, bad := range []string{"dns forwarder", "/var/lib/samba", "/var/log/samba", "/etc/samba", "log file", "%m"} {
		if strings.Contains(s, bad) {
			t.Errorf("contains %q", bad)
		}
	}
	o := testGlobal()
	o.AESOnly = false
	s, _ = RenderGlobal(o)
	if !strings.Contains(s, "\tkerberos encryption types = all\n") {
		t.Error("without AES the encryption types are not all")
	}
}

func TestGlobalHostileValues(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		mod         func(*GlobalOptions)
	}{
		{"realm newline", "domain", func(o *GlobalOptions) { o.Realm = "basin.test\n[evil]" }},
		{"realm empty", "domain", func(o *GlobalOptions) { o.Realm = "" }},
		{"realm semicolon", "domain", func(o *GlobalOptions) { o.Realm = "basin.test;x" }},
		{"realm too long", "domain", func(o *GlobalOptions) { o.Realm = strings.Repeat("a.", 130) + "test" }},
		{"workgroup newline", "workgroup", func(o *GlobalOptions) { o.Workgroup = "BASIN\ninclude = /etc/passwd" }},
		{"workgroup hash", "workgroup", func(o *GlobalOptions) { o.Workgroup = "BA#SIN" }},
		{"workgroup too long", "workgroup", func(o *GlobalOptions) { o.Workgroup = "ABCDEFGHIJKLMNOP" }},
		{"workgroup empty", "workgroup", func(o *GlobalOptions) { o.Workgroup = "" }},
		{"machine name lower", "machineName", func(o *GlobalOptions) { o.MachineName = "basin-3f2a" }},
		{"machine name long", "machineName", func(o *GlobalOptions) { o.MachineName = "BASINPREF16-ABCD" }},
		{"machine name newline", "machineName", func(o *GlobalOptions) { o.MachineName = "BASIN-3F2A\n" }},
		{"state dir relative", "stateDir", func(o *GlobalOptions) { o.StateDir = "var/lib/x" }},
		{"state dir newline", "stateDir", func(o *GlobalOptions) { o.StateDir = "/var/lib/x\n[share]" }},
		{"state dir percent", "stateDir", func(o *GlobalOptions) { o.StateDir = "/var/lib/%u" }},
		{"state dir semicolon", "stateDir", func(o *GlobalOptions) { o.StateDir = "/var/lib/a;b" }},
		{"state dir unclean", "stateDir", func(o *GlobalOptions) { o.StateDir = "/var/lib/../x" }},
		{"state dir root", "stateDir", func(o *GlobalOptions) { o.StateDir = "/" }},
		{"address unspecified", "addresses", func(o *GlobalOptions) { o.Addresses = []netip.Addr{netip.IPv4Unspecified()} }},
		{"address zero value", "addresses", func(o *GlobalOptions) { o.Addresses = []netip.Addr{{}} }},
		{"log level", "logLevel", func(o *GlobalOptions) { o.LogLevel = 11 }},
		{"dc newline", "dcs", func(o *GlobalOptions) { o.DCs = []string{"dc1.basin.test\n[evil]"} }},
		{"dc option", "dcs", func(o *GlobalOptions) { o.DCs = []string{"-x"} }},
		{"dc blank", "dcs", func(o *GlobalOptions) { o.DCs = []string{"dc1 dc2"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testGlobal()
			tc.mod(&o)
			s, err := RenderGlobal(o)
			wantField(t, err, tc.field)
			if s != "" {
				t.Fatal("rendered despite the error")
			}
		})
	}
	_, err := RenderDiscovery("basin.test\n", "/x")
	wantField(t, err, "domain")
	_, err = RenderDiscovery("basin.test", "x")
	wantField(t, err, "stateDir")
}

func TestEnviron(t *testing.T) {
	env := testGlobal().Environ()
	want := "KRB5_KTNAME=FILE:/var/lib/basin/sandboxes/default/smb/private/krb5.keytab"
	if len(env) != 2 || env[0] != want || !strings.HasPrefix(env[1], "KRB5_CONFIG=/var/lib/basin/sandboxes/default/smb/") {
		t.Fatalf("Environ = %q", env)
	}
}

// testparm parses conf with Samba's own parser (testparm -s -v: every parameter
// with its effective value) and returns section → key → value. It skips the test
// when testparm is not installed; it is a parser, no daemon, and needs no root.
func testparm(t *testing.T, conf string) map[string]map[string]string {
	t.Helper()
	bin, err := exec.LookPath("testparm")
	if err != nil {
		t.Skip("testparm not installed (apt-get install samba-common-bin)")
	}
	path := filepath.Join(t.TempDir(), "smb.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-s", "-v", path)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("testparm: %v\n%s", err, stderr.String())
	}
	// testparm loads what it can and only warns: an unknown parameter, a bad value
	// or a global parameter in a share section (which `net conf setparm` refuses).
	for _, warn := range []string{"nknown parameter", "Invalid", "Global parameter", "not allowed", "ERROR"} {
		if strings.Contains(stderr.String(), warn) {
			t.Fatalf("testparm refused a parameter:\n%s", stderr.String())
		}
	}
	res := map[string]map[string]string{}
	sec := ""
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]") {
			sec = strings.ToLower(strings.Trim(l, "[]"))
			res[sec] = map[string]string{}
			continue
		}
		if k, v, ok := strings.Cut(l, " = "); ok && sec != "" {
			res[sec][strings.ToLower(k)] = v
		}
	}
	return res
}

// wantParsed asserts Samba read every rendered key with the rendered value
// (case-insensitive: Samba prints booleans as Yes/No).
func wantParsed(t *testing.T, parsed map[string]string, rendered map[string]string) {
	t.Helper()
	for k, v := range rendered {
		got, ok := parsed[strings.ToLower(k)]
		if !ok {
			t.Errorf("Samba does not know %q (or renames it)", k)
			continue
		}
		if !strings.EqualFold(got, v) {
			t.Errorf("%s: Samba reads %q, rendered %q", k, got, v)
		}
	}
}

func parseRendered(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), " = "); ok {
			m[k] = v
		}
	}
	return m
}

func TestRenderGlobalSambaParses(t *testing.T) {
	o := testGlobal()
	o.StateDir = t.TempDir()
	o.Addresses = []netip.Addr{netip.MustParseAddr("127.0.0.2")}
	mkdirs(t, o)
	s, err := RenderGlobal(o)
	if err != nil {
		t.Fatal(err)
	}
	parsed := testparm(t, s)
	wantParsed(t, parsed["global"], parseRendered(s))
}

func mkdirs(t *testing.T, o GlobalOptions) {
	t.Helper()
	d := o.Dirs()
	for _, p := range []string{d.Private, d.Lock, d.State, d.Cache, d.Run, d.NCALRPC, d.Log} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRenderGlobalLoopback(t *testing.T) {
	o := testGlobal()
	o.Loopback = netip.MustParseAddr("127.3.4.5")
	s, err := RenderGlobal(o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, "\tinterfaces = 127.3.4.5 10.99.72.21 10.99.72.22\n") {
		t.Errorf("interfaces with a loopback of its own:\n%s", s)
	}
	for _, bad := range []string{"10.0.0.1", "::1"} {
		o.Loopback = netip.MustParseAddr(bad)
		if _, err := RenderGlobal(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("loopback %s: %v", bad, err)
		}
	}
}

// samba-dcerpcd's file listens on the loopback address alone (its TCP
// endpoints would otherwise be on every tenant endpoint) and is otherwise
// smbd's, which Samba parses the same.
func TestRenderDCERPC(t *testing.T) {
	o := testGlobal()
	o.Loopback = netip.MustParseAddr("127.3.4.5")
	o.StateDir = t.TempDir()
	mkdirs(t, o)
	full, err := RenderGlobal(o)
	if err != nil {
		t.Fatal(err)
	}
	rpc, err := RenderDCERPC(o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rpc, "\tinterfaces = 127.3.4.5\n") || !strings.Contains(rpc, "\tbind interfaces only = yes\n") {
		t.Errorf("samba-dcerpcd's interfaces:\n%s", rpc)
	}
	if len(o.Addresses) != 2 {
		t.Fatal("RenderDCERPC changed its caller's addresses")
	}
	want := parseRendered(full)
	want["interfaces"] = "127.3.4.5"
	if got := parseRendered(rpc); !maps.Equal(got, want) {
		t.Errorf("samba-dcerpcd's file differs from smbd's beyond interfaces:\n%s", rpc)
	}
	wantParsed(t, testparm(t, rpc)["global"], parseRendered(rpc))
}

// A state directory whose sockets would not fit a socket address is refused
// with the numbers (winbindd exits at once on it, with nothing in its own log
// but that line).
func TestCheckSocketPaths(t *testing.T) {
	short := GlobalOptions{StateDir: "/var/lib/basin/sandboxes/default/smb/s0df116fe"}
	if err := short.CheckSocketPaths(); err != nil {
		t.Fatalf("default layout refused: %v", err)
	}
	// 112 bytes, as an e2e test's temporary directory once made it.
	long := GlobalOptions{StateDir: "/tmp/TestRestartWithoutInterruption3030220740/001/sandboxes/default/smb/s0df116fe"}
	err := long.CheckSocketPaths()
	if err == nil || !strings.Contains(err.Error(), "112 bytes") || !strings.Contains(err.Error(), "5 bytes shorter") {
		t.Fatalf("a 112-byte socket path: %v", err)
	}
	// 107 fits, 108 does not.
	base := "/" + strings.Repeat("d", 107-len("/state/winbindd_privileged/pipe")-1)
	if err := (GlobalOptions{StateDir: base}).CheckSocketPaths(); err != nil {
		t.Fatalf("107 bytes refused: %v", err)
	}
	if err := (GlobalOptions{StateDir: base + "x"}).CheckSocketPaths(); err == nil {
		t.Fatal("108 bytes accepted")
	}
}
