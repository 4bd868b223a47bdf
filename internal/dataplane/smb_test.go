package dataplane

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

func TestSMBInstanceID(t *testing.T) {
	a := smbInstanceID("projects/p/locations/l/activeDirectories/ad1")
	if !regexp.MustCompile(`^s[0-9a-f]{8}$`).MatchString(a) {
		t.Fatalf("id %q", a)
	}
	// sha256("projects/p/locations/l/activeDirectories/ad1")[:4], fixed: the
	// directory name must never change between Basin versions.
	if a != "sbb94e028" {
		t.Fatalf("id %s changed", a)
	}
	if b := smbInstanceID("projects/p/locations/l/activeDirectories/ad2"); b == a {
		t.Fatal("two AD connections, one id")
	}
	if smbInstanceID("x") != smbInstanceID("x") {
		t.Fatal("not deterministic")
	}
}

func TestSMBLoopback(t *testing.T) {
	seen := map[netip.Addr]bool{}
	for _, ad := range []string{"a", "b", "c", "d", "e"} {
		lo := smbLoopback(smbInstanceID(ad))
		b := lo.As4()
		if !lo.Is4() || !lo.IsLoopback() || lo == netip.MustParseAddr("127.0.0.1") || b[3] == 0 || b[3] == 255 {
			t.Errorf("loopback %s", lo)
		}
		if seen[lo] {
			t.Errorf("loopback %s twice", lo)
		}
		seen[lo] = true
		if smbLoopback(smbInstanceID(ad)) != lo {
			t.Error("not deterministic")
		}
	}
}

func TestPlanFor(t *testing.T) {
	rec := SMBMembership{AD: "ad1", Realm: "BASIN.TEST", MachineName: "BASIN-1A2B"}
	for _, tc := range []struct {
		name     string
		recorded bool
		want     SMBMembership
		plan     joinPlan
	}{
		{"nothing recorded", false, rec, planJoin},
		{"same machine", true, rec, planResume},
		{"same machine, other case", true, SMBMembership{Realm: "basin.test", MachineName: "basin-1a2b"}, planResume},
		{"other machine name", true, SMBMembership{Realm: "BASIN.TEST", MachineName: "BASIN-FFFF"}, planConflict},
		{"other realm", true, SMBMembership{Realm: "OTHER.TEST", MachineName: "BASIN-1A2B"}, planConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := planFor(rec, tc.recorded, tc.want); got != tc.plan {
				t.Errorf("plan %d, want %d", got, tc.plan)
			}
		})
	}
}

func TestMembershipValidate(t *testing.T) {
	ok := SMBMembership{AD: "ad1", Realm: "basin.test", MachineName: "BASIN-1A2B", DNS: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(*SMBMembership){
		"no AD":          func(m *SMBMembership) { m.AD = "" },
		"no DNS":         func(m *SMBMembership) { m.DNS = nil },
		"long name":      func(m *SMBMembership) { m.MachineName = "BASINPREF16-ABCD" },
		"bad realm":      func(m *SMBMembership) { m.Realm = "bad realm" },
		"bad workgroup":  func(m *SMBMembership) { m.Workgroup = "a b" },
		"no machine":     func(m *SMBMembership) { m.MachineName = "" },
		"realm injected": func(m *SMBMembership) { m.Realm = "basin.test\n\tinclude = /x" },
	} {
		t.Run(name, func(t *testing.T) {
			m := ok
			f(&m)
			if err := m.validate(); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestInstanceEtc(t *testing.T) {
	mb := SMBMembership{Realm: "BASIN.TEST", MachineName: "BASIN-1A2B",
		DNS: []netip.Addr{netip.MustParseAddr("10.99.73.5"), netip.MustParseAddr("10.99.73.6")},
		KDC: netip.MustParseAddr("10.99.73.5"), KDCHostname: "DC1.basin.test"}
	lo := netip.MustParseAddr("127.9.9.9")
	files := instanceEtc(mb, nil, lo)
	if got := files["resolv.conf"]; got != "nameserver 10.99.73.5\nnameserver 10.99.73.6\nsearch basin.test\n" {
		t.Errorf("resolv.conf:\n%s", got)
	}
	if got := files["hosts"]; !strings.Contains(got, "127.9.9.9 basin-1a2b.basin.test basin-1a2b\n") ||
		!strings.Contains(got, "10.99.73.5 dc1.basin.test\n") {
		t.Errorf("hosts before any endpoint:\n%s", got)
	}
	files = instanceEtc(mb, []netip.Addr{netip.MustParseAddr("10.99.73.20")}, lo)
	if got := files["hosts"]; !strings.Contains(got, "10.99.73.20 basin-1a2b.basin.test basin-1a2b\n") {
		t.Errorf("hosts with an endpoint:\n%s", got)
	}
	if got := files["nsswitch.conf"]; !strings.Contains(got, "passwd: files winbind\n") || !strings.Contains(got, "group: files winbind\n") {
		t.Errorf("nsswitch.conf:\n%s", got)
	}
}

func TestRenderKrb5(t *testing.T) {
	mb := SMBMembership{Realm: "basin.test"}
	got := renderKrb5(mb)
	if !strings.Contains(got, "default_realm = BASIN.TEST\n") || !strings.Contains(got, "dns_lookup_kdc = true\n") || strings.Contains(got, "[realms]") {
		t.Errorf("krb5.conf without a KDC:\n%s", got)
	}
	mb.KDC, mb.KDCHostname, mb.AESOnly = netip.MustParseAddr("10.99.73.5"), "DC1.basin.test", true
	got = renderKrb5(mb)
	for _, want := range []string{"dns_lookup_kdc = false\n", "kdc = dc1.basin.test\n", "BASIN.TEST = {", "permitted_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("krb5.conf with a KDC lacks %q:\n%s", want, got)
		}
	}
}

func TestParseConfList(t *testing.T) {
	out := "[global]\n\tworkgroup = X\n\n[vol1]\n\tpath = /data/mounts/v1\n\tread only = no\n\tshadow:format = @GMT-%Y.%m.%d-%H.%M.%S\n\n[Vol2]\n\tcomment = a = b\n"
	got := parseConfList(out)
	if len(got) != 2 || got["vol1"]["path"] != "/data/mounts/v1" || got["vol1"]["read only"] != "no" ||
		got["vol1"]["shadow:format"] != "@GMT-%Y.%m.%d-%H.%M.%S" || got["Vol2"]["comment"] != "a = b" {
		t.Errorf("parseConfList = %v", got)
	}
	if len(parseConfList("")) != 0 {
		t.Error("shares from nothing")
	}
}

func TestServiceAddr(t *testing.T) {
	for _, tc := range []struct{ prefix, set, want string }{
		{"10.99.0.0/24", "", "10.99.0.254"},
		{"10.99.73.0/24", "", "10.99.73.254"},
		{"10.99.0.0/16", "", "10.99.255.254"},
		{"10.99.0.0/24", "10.99.0.9", "10.99.0.9"},
	} {
		n := Network{Prefix: netip.MustParsePrefix(tc.prefix)}
		if tc.set != "" {
			n.ServiceAddr = netip.MustParseAddr(tc.set)
		}
		if got := n.serviceAddr().String(); got != tc.want {
			t.Errorf("%s %q: %s, want %s", tc.prefix, tc.set, got, tc.want)
		}
	}
}

func TestAddrList(t *testing.T) {
	got := addrList(map[string]netip.Addr{"b": netip.MustParseAddr("10.0.0.2"), "a": netip.MustParseAddr("10.0.0.1"), "c": netip.MustParseAddr("10.0.0.2")})
	if len(got) != 2 || got[0].String() != "10.0.0.1" || got[1].String() != "10.0.0.2" {
		t.Errorf("addrList = %v", got)
	}
}

// The instance's directories: made once, never replaced (its mount namespace
// binds etc/ and var/), with Samba's directories, files and a var/run link.
func TestPrepareDirs(t *testing.T) {
	box := t.TempDir()
	os.MkdirAll(filepath.Join(box, "etc"), 0o755)
	os.WriteFile(filepath.Join(box, "etc", "passwd"), []byte("root:x:0:0::/:/bin/false\n"), 0o644)
	os.WriteFile(filepath.Join(box, "etc", "nsswitch.conf"), []byte("passwd: files\n"), 0o644)
	os.WriteFile(filepath.Join(box, "etc", "mtab"), []byte("basin /data/mounts/nfs1 btrfs rw 0 0\n"), 0o644)
	sb := &sandbox{dir: box}
	in := &smbInstance{id: "s12345678", dir: filepath.Join(box, "smb", "s12345678"), sb: sb}
	mb := SMBMembership{Realm: "BASIN.TEST", MachineName: "BASIN-1A2B", DNS: []netip.Addr{netip.MustParseAddr("10.99.73.5")}}
	// An instance made by an older Basin: its lock directory 0700.
	os.MkdirAll(filepath.Join(in.dir, "lock"), 0o700)
	if err := in.prepareDirs(mb, nil); err != nil {
		t.Fatal(err)
	}
	for _, dm := range instanceDirModes(in.dir) {
		if fi, err := os.Stat(dm.path); err != nil || fi.Mode().Perm() != dm.mode {
			t.Errorf("%s: %v (%v), want %v", dm.path, fi.Mode().Perm(), err, dm.mode)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(in.dir, "etc", "hostname")); string(data) != "basin-1a2b\n" {
		t.Errorf("hostname %q", data)
	}
	// The instance's mtab is its own (its shares, writeMtab), never the sandbox's.
	if data, err := os.ReadFile(filepath.Join(in.dir, "etc", "mtab")); err != nil || len(data) != 0 {
		t.Errorf("mtab %q (%v), want an empty one", data, err)
	}
	if err := in.writeMtab(map[string]map[string]string{"v1": {"path": box}}); err != nil {
		t.Fatal(err)
	}
	ino := func(p string) uint64 {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	etcIno, varIno := ino(filepath.Join(in.dir, "etc")), ino(filepath.Join(in.dir, "var"))
	for _, p := range []string{"private", "lock", "state", "cache", "run/ncalrpc", "log", "var/log/samba", "var/lib/samba", "krb5.conf", "etc/passwd", "etc/resolv.conf", "etc/hosts"} {
		if _, err := os.Stat(filepath.Join(in.dir, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(in.dir, "var", "run")); err != nil || l != "../run" {
		t.Errorf("var/run -> %q, %v", l, err)
	}
	if data, _ := os.ReadFile(filepath.Join(in.dir, "etc", "nsswitch.conf")); !strings.Contains(string(data), "winbind") {
		t.Errorf("nsswitch.conf is the sandbox's: %s", data)
	}
	if err := in.prepareDirs(mb, []netip.Addr{netip.MustParseAddr("10.99.73.20")}); err != nil {
		t.Fatal(err)
	}
	if ino(filepath.Join(in.dir, "etc")) != etcIno || ino(filepath.Join(in.dir, "var")) != varIno {
		t.Error("a bound directory was replaced")
	}
	if data, _ := os.ReadFile(filepath.Join(in.dir, "etc", "hosts")); !strings.Contains(string(data), "10.99.73.20 basin-1a2b.basin.test") {
		t.Errorf("hosts not rewritten: %s", data)
	}
	if data, _ := os.ReadFile(filepath.Join(in.dir, "etc", "mtab")); !strings.HasPrefix(string(data), "basin "+box+" ") {
		t.Errorf("mtab after prepareDirs again: %q, want the share's line kept", data)
	}
}

// Each daemon runs in the instance's namespaces, in the foreground, on the
// instance's smb.conf and Kerberos files, with its own small bounding set.
func TestSMBServices(t *testing.T) {
	sb := &sandbox{dir: "/data/sandboxes/n1", ns: "basin-br0"}
	in := &smbInstance{id: "s12345678", dir: "/data/sandboxes/n1/smb/s12345678", sb: sb,
		holder: pidProc(4242)}
	svcs := in.services()
	var names []string
	for _, s := range svcs {
		names = append(names, s.Name)
		c := in.command(s)
		argv := strings.Join(c.Argv(), " ")
		want := "nsenter -t 4242 -m -n -u -- setpriv --bounding-set " + s.Caps + " --inh-caps -all --no-new-privs -- "
		if !strings.HasPrefix(argv, want) {
			t.Errorf("%s: %s", s.Name, argv)
		}
		// Each logs to log.<its own name> in the instance's log/: no log file
		// is named by a client (log.%m).
		conf := "smb.conf"
		if s.Name == "samba-dcerpcd" {
			conf = "dcerpcd.conf" // its TCP endpoints on the loopback alone (smb.RenderDCERPC)
		}
		if !strings.Contains(argv, " -s /data/sandboxes/n1/smb/s12345678/"+conf+" --foreground --no-process-group"+
			" --log-basename=/data/sandboxes/n1/smb/s12345678/log") {
			t.Errorf("%s: %s", s.Name, argv)
		}
		env := strings.Join(c.Env, " ")
		if !strings.Contains(env, "KRB5_CONFIG=/data/sandboxes/n1/smb/s12345678/krb5.conf") ||
			!strings.Contains(env, "KRB5_KTNAME=FILE:/data/sandboxes/n1/smb/s12345678/private/krb5.keytab") {
			t.Errorf("%s env: %s", s.Name, env)
		}
		if !strings.HasPrefix(s.Caps, "-all,") || strings.Contains(s.Caps, "sys_admin") || strings.Contains(s.Caps, "sys_ptrace") ||
			strings.Contains(s.Caps, "net_admin") || strings.Contains(s.Caps, "kill") {
			t.Errorf("%s caps %s", s.Name, s.Caps)
		}
		if s.Ready == nil {
			t.Errorf("%s has no readiness probe", s.Name)
		}
	}
	if strings.Join(names, ",") != strings.Join(smbDaemons, ",") {
		t.Errorf("services %v, want %v", names, smbDaemons)
	}
}

// pidProc is a process that is only a pid (a holder in tests of argv).
type pidProc int

func (p pidProc) Pid() int                 { return int(p) }
func (pidProc) Wait() error                { select {} }
func (pidProc) Signal(sig os.Signal) error { return nil }
