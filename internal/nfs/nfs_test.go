package nfs

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		os.WriteFile(path, []byte(got), 0o644)
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs:\n got:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestRenderExport(t *testing.T) {
	ex := Export{ID: 7, Path: "/var/lib/basin/mounts/vabc", Pseudo: "/vol1", Protocols: []int{4, 3}, Clients: []Client{
		{Clients: []string{"10.99.0.101"}, Access: AccessRW, Squash: NoRootSquash, Protocols: []int{3, 4}},
		{Clients: []string{"10.99.0.0/24", "10.99.1.5"}, Access: AccessRO, Squash: RootSquash, Protocols: []int{3}},
		{Clients: []string{"10.99.2.0/24"}, Access: AccessRW, Squash: AllSquash, AnonUID: 1234, Protocols: []int{4}},
		{Clients: []string{"10.99.3.3"}, Access: AccessNone, Squash: NoRootSquash, Protocols: []int{3, 4}},
	}}
	golden(t, "export.conf", ex.Render())
	golden(t, "export_no_policy.conf", Export{ID: 8, Path: "/m/x", Pseudo: "/x", Protocols: []int{3}}.Render())
	golden(t, "export_snapshot_dir.conf", Export{ID: 9, Path: "/var/lib/basin/mounts/vabc@.snapshot", Pseudo: "/vol1/.snapshot",
		Protocols: []int{3, 4}, NoAttrCache: true, Clients: []Client{
			{Clients: []string{"10.99.0.101"}, Access: AccessRO, Squash: NoRootSquash, Protocols: []int{3, 4}},
		}}.Render())
	// A dual-protocol NTFS volume: attributes always read afresh (Samba
	// changes them), and permission changes refused.
	golden(t, "export_ntfs.conf", Export{ID: 11, Path: "/var/lib/basin/mounts/vntfs", Pseudo: "/docs", Protocols: []int{3, 4},
		NoAttrCache: true, NTFS: true, Clients: []Client{
			{Clients: []string{"10.99.0.0/24"}, Access: AccessRW, Squash: RootSquash, Protocols: []int{3, 4}},
		}}.Render())
	golden(t, "export_ceph.conf", Export{ID: 10, Path: "/volumes/basin/vabc/5a371ad6-7c48-4795-956a-c2bc9c9581ea", Pseudo: "/vol1",
		Protocols: []int{3, 4}, Ceph: &CephFSAL{FS: "cephfs", UserID: "basin.vabc", Secret: "AQBmS0ppAAAAABAAv4hXyGQmTf4mWvQkYYGPbA=="},
		Clients: []Client{{Clients: []string{"10.99.0.0/24"}, Access: AccessRW, Squash: RootSquash, Protocols: []int{3, 4}}}}.Render())
}

// A rule for every address (Trident's default export rule, 0.0.0.0/0) is
// written as Ganesha's "*", which its parser takes where it refuses a /0.
func TestRenderExportAnyClient(t *testing.T) {
	ex := Export{ID: 12, Path: "/var/lib/basin/mounts/vany", Pseudo: "/pvc-1", Protocols: []int{3, 4}, Clients: []Client{
		{Clients: []string{"10.99.0.101"}, Access: AccessNone, Squash: RootSquash, Protocols: []int{3, 4}},
		{Clients: []string{"10.99.0.0/24", "0.0.0.0/0"}, Access: AccessRO, Squash: RootSquash, Protocols: []int{3}},
		{Clients: []string{"0.0.0.0/0"}, Access: AccessRW, Squash: NoRootSquash, Protocols: []int{3, 4}},
	}}
	if err := ex.Validate(); err != nil {
		t.Fatal(err)
	}
	golden(t, "export_any_client.conf", ex.Render())
}

// A Kerberos volume's rules: each CLIENT block admits the flavors of its rule
// (SecType), in the rule's order; a block without flavors keeps the export's
// (sys).
func TestRenderExportKrb5(t *testing.T) {
	ex := Export{ID: 11, Path: "/var/lib/basin/mounts/vkrb", Pseudo: "/krb", Protocols: []int{4}, Clients: []Client{
		{Clients: []string{"10.99.0.101"}, Access: AccessRW, Squash: RootSquash, Protocols: []int{4}, Sec: []Flavor{FlavorKrb5p}},
		{Clients: []string{"10.99.0.0/24"}, Access: AccessRO, Squash: RootSquash, Protocols: []int{4}, Sec: []Flavor{FlavorKrb5p, FlavorKrb5, FlavorKrb5i, FlavorKrb5}},
		{Clients: []string{"10.99.1.0/24"}, Access: AccessNone, Squash: RootSquash, Protocols: []int{4}},
	}}
	if err := ex.Validate(); err != nil {
		t.Fatal(err)
	}
	golden(t, "export_krb5.conf", ex.Render())
}

// A sandbox serving Kerberos volumes accepts tickets for its principal with
// its keytab; its callback credentials stay in its own directory.
func TestRenderConfigKrb5(t *testing.T) {
	o := ConfigOptions{StateDir: "/var/lib/basin/sandboxes/default", Grace: true, Includes: []string{"exports/11.conf"},
		Krb5: &Krb5{Principal: "nfs@basin-1a2b.basin.test", Keytab: "/var/lib/basin/sandboxes/default/smb/s1234abcd/private/krb5.keytab",
			IdmapConf: "/var/lib/basin/sandboxes/default/idmapd.conf"}}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	golden(t, "ganesha_krb5.conf", RenderConfig(o))
}

func TestRenderConfig(t *testing.T) {
	o := ConfigOptions{StateDir: "/var/lib/basin/sandboxes/default", PluginsDir: "/usr/local/lib/basin/ganesha/lib/ganesha"}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	golden(t, "ganesha.conf", RenderConfig(o))

	// Grace with its defaults, and the exports of mounted volumes included,
	// parents first; relative paths are read from ganesha.conf's directory.
	o.Grace = true
	o.Includes = []string{"exports/7.conf", "exports/9.conf", "exports/12.conf", "/var/lib/basin/sandboxes/default/exports/3.conf"}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	golden(t, "ganesha_grace.conf", RenderConfig(o))

	o.LeaseLifetime, o.GracePeriod = 10*time.Second, 15*time.Second
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	got := RenderConfig(o)
	for _, want := range []string{"\tGraceless = false;\n\tLease_Lifetime = 10;\n\tGrace_Period = 15;\n", "\n%include \"exports/7.conf\"\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("config lacks %q:\n%s", want, got)
		}
	}
	// Includes without grace (a restart that keeps the exports but not state).
	o.Grace = false
	if got := RenderConfig(o); !strings.Contains(got, "Graceless = true;") || strings.Contains(got, "Lease_Lifetime") || !strings.Contains(got, "%include \"exports/12.conf\"") {
		t.Errorf("includes without grace:\n%s", got)
	}
}

// A sandbox serving CephFS keeps its NFSv4 client records in RADOS under its
// own node id and grace database, and names itself by that identity.
func TestRenderConfigRADOS(t *testing.T) {
	o := ConfigOptions{StateDir: "/var/lib/basin/sandboxes/default", Grace: true, Identity: "basin-br0-n1",
		RADOS:    &RADOSRecovery{CephConf: "/var/lib/basin/sandboxes/default/ceph.conf", UserID: "basin-ganesha", Pool: "basin-nfs", Namespace: "basin", NodeID: "basin-br0-n1", GraceOID: "grace-basin-br0-n1"},
		Includes: []string{"exports/7.conf"}}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	golden(t, "ganesha_rados.conf", RenderConfig(o))
	for name, mutate := range map[string]func(o *ConfigOptions){
		"no grace":           func(o *ConfigOptions) { o.Grace = false },
		"quote in identity":  func(o *ConfigOptions) { o.Identity = `a"b` },
		"space in pool":      func(o *ConfigOptions) { r := *o.RADOS; r.Pool = "a b"; o.RADOS = &r },
		"empty node id":      func(o *ConfigOptions) { r := *o.RADOS; r.NodeID = ""; o.RADOS = &r },
		"empty grace object": func(o *ConfigOptions) { r := *o.RADOS; r.GraceOID = ""; o.RADOS = &r },
		"relative conf":      func(o *ConfigOptions) { r := *o.RADOS; r.CephConf = "ceph.conf"; o.RADOS = &r },
		"brace in user":      func(o *ConfigOptions) { r := *o.RADOS; r.UserID = "x}"; o.RADOS = &r },
	} {
		bad := o
		mutate(&bad)
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// What RenderConfig writes is checked first: include paths Ganesha's lexer
// takes, each once; lease and grace in Ganesha's bounds, grace no shorter than
// the lease; directories its parser reads back as given.
func TestValidateConfig(t *testing.T) {
	ok := ConfigOptions{StateDir: "/var/lib/basin/sandboxes/n-1", Grace: true, Includes: []string{"exports/1.conf", "/d/x_y-z.conf"}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	cases := map[string]func(o *ConfigOptions){
		"relative state dir":        func(o *ConfigOptions) { o.StateDir = "sandboxes/n" },
		"quote in state dir":        func(o *ConfigOptions) { o.StateDir = `/x"; } EXPORT { Path = "/` },
		"newline in plugins dir":    func(o *ConfigOptions) { o.PluginsDir = "/usr/lib\nx" },
		"space in include":          func(o *ConfigOptions) { o.Includes = []string{"/tmp/Test A/exports/1.conf"} },
		"at sign in include":        func(o *ConfigOptions) { o.Includes = []string{"/var/lib/basin@2/exports/1.conf"} },
		"quote in include":          func(o *ConfigOptions) { o.Includes = []string{`exports/1.conf"`} },
		"dot-dot in include":        func(o *ConfigOptions) { o.Includes = []string{"exports/../../etc/x.conf"} },
		"double slash in include":   func(o *ConfigOptions) { o.Includes = []string{"exports//1.conf"} },
		"trailing slash in include": func(o *ConfigOptions) { o.Includes = []string{"exports/"} },
		"empty include":             func(o *ConfigOptions) { o.Includes = []string{""} },
		"include twice":             func(o *ConfigOptions) { o.Includes = []string{"exports/1.conf", "exports/1.conf"} },
		"grace shorter than lease":  func(o *ConfigOptions) { o.LeaseLifetime, o.GracePeriod = 30*time.Second, 20*time.Second },
		"lease over 180 s":          func(o *ConfigOptions) { o.LeaseLifetime, o.GracePeriod = 181*time.Second, 200*time.Second },
		"grace over 270 s":          func(o *ConfigOptions) { o.GracePeriod = 271 * time.Second },
		"lease not whole seconds":   func(o *ConfigOptions) { o.LeaseLifetime = 1500 * time.Millisecond },
		"grace not whole seconds":   func(o *ConfigOptions) { o.GracePeriod = 40*time.Second + time.Millisecond },
		"negative lease":            func(o *ConfigOptions) { o.LeaseLifetime = -time.Second },
		"principal without host":    func(o *ConfigOptions) { o.Krb5 = &Krb5{Principal: "nfs", Keytab: "/k/krb5.keytab"} },
		"principal as nfs/host":     func(o *ConfigOptions) { o.Krb5 = &Krb5{Principal: "nfs/a.test", Keytab: "/k/krb5.keytab"} },
		"quote in principal":        func(o *ConfigOptions) { o.Krb5 = &Krb5{Principal: `nfs@a"`, Keytab: "/k/krb5.keytab"} },
		"relative keytab":           func(o *ConfigOptions) { o.Krb5 = &Krb5{Principal: "nfs@a.test", Keytab: "krb5.keytab"} },
		"quote in keytab":           func(o *ConfigOptions) { o.Krb5 = &Krb5{Principal: "nfs@a.test", Keytab: `/k"; }`} },
		"relative idmapd.conf": func(o *ConfigOptions) {
			o.Krb5 = &Krb5{Principal: "nfs@a.test", Keytab: "/k", IdmapConf: "idmapd.conf"}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			o := ok
			o.Includes = slices.Clone(ok.Includes)
			mutate(&o)
			if err := o.Validate(); err == nil {
				t.Fatalf("accepted %+v", o)
			}
		})
	}
	// Without grace, its durations are not rendered and not checked.
	o := ok
	o.Grace, o.LeaseLifetime = false, time.Hour
	if err := o.Validate(); err != nil {
		t.Fatalf("lease checked without grace: %v", err)
	}
}

// Everything written into Ganesha's configuration is checked first: an ID that
// does not fit its 16 bits (or is the pseudo root's 0), a path or client that could
// break out of the EXPORT block.
func TestValidate(t *testing.T) {
	ok := Export{ID: 1, Path: "/var/lib/basin/mounts/vabc@s1", Pseudo: "/vol_1-x/.snapshot/s1", Protocols: []int{3},
		Clients: []Client{{Clients: []string{"10.99.0.0/24", "10.99.1.5"}, Access: AccessRO, Squash: RootSquash, AnonUID: 65534, Protocols: []int{3}}}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid export refused: %v", err)
	}
	if err := (Export{ID: MaxExportID, Path: "/a", Pseudo: "/b"}).Validate(); err != nil {
		t.Fatalf("id %d refused: %v", MaxExportID, err)
	}
	cases := map[string]func(e *Export){
		"id 0 (the pseudo root)":  func(e *Export) { e.ID = 0 },
		"id 65536":                func(e *Export) { e.ID = 65536 },
		"id far out":              func(e *Export) { e.ID = 1 << 40 },
		"quote in path":           func(e *Export) { e.Path = `/m/x"; } EXPORT { Path = "/` },
		"brace in pseudo":         func(e *Export) { e.Pseudo = "/x}" },
		"relative path":           func(e *Export) { e.Path = "m/x" },
		"dot-dot in path":         func(e *Export) { e.Path = "/m/../etc" },
		"newline in path":         func(e *Export) { e.Path = "/m/x\nFSAL" },
		"client with config":      func(e *Export) { e.Clients[0].Clients = []string{"10.0.0.1; Access_Type = RW"} },
		"IPv4-mapped IPv6 client": func(e *Export) { e.Clients[0].Clients = []string{"::ffff:10.0.0.1"} },
		"hostname client":         func(e *Export) { e.Clients[0].Clients = []string{"*"} },
		"unknown access":          func(e *Export) { e.Clients[0].Access = "MDONLY" },
		"unknown squash":          func(e *Export) { e.Clients[0].Squash = "Squash_Uid_Only" },
		"NFS version 2":           func(e *Export) { e.Protocols = []int{2} },
		"CephFS key with a quote": func(e *Export) { e.Ceph = &CephFSAL{FS: "cephfs", UserID: "basin.v", Secret: `AQBmS0ppAAAAABAA"; }`} },
		"CephFS user with spaces": func(e *Export) { e.Ceph = &CephFSAL{FS: "cephfs", UserID: "basin v", Secret: "AQBmS0ppAAAAABAAv4hX=="} },
		"CephFS name empty":       func(e *Export) { e.Ceph = &CephFSAL{UserID: "basin.v", Secret: "AQBmS0ppAAAAABAAv4hX=="} },
		"unknown flavor":          func(e *Export) { e.Clients[0].Sec = []Flavor{"krb5; Access_Type = RW"} },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			e := ok
			e.Clients = append([]Client(nil), ok.Clients...)
			mutate(&e)
			if err := e.Validate(); err == nil {
				t.Fatalf("accepted %+v", e)
			}
		})
	}
	for _, id := range []uint64{0, 65536} {
		if _, err := exportID(id); err == nil {
			t.Fatalf("exportID(%d) accepted", id)
		}
	}
}

// A grace database is named after its identity, and after the generation for
// any host after the first: generation 0 keeps the name of the databases made
// before generations existed.
func TestGraceOID(t *testing.T) {
	for _, c := range []struct {
		gen  int64
		want string
	}{{0, "grace-basin-br0-n1"}, {1, "grace-basin-br0-n1.e1"}, {4096, "grace-basin-br0-n1.e4096"}} {
		if got := GraceOID("basin-br0-n1", c.gen); got != c.want {
			t.Errorf("GraceOID(gen %d) = %q, want %q", c.gen, got, c.want)
		}
	}
	// The longest node id a sandbox has (63 characters), at a late
	// generation, is a valid configuration.
	node := strings.Repeat("n", 63)
	o := ConfigOptions{StateDir: "/var/lib/basin/sandboxes/default", Grace: true, Identity: node,
		RADOS: &RADOSRecovery{CephConf: "/c/ceph.conf", UserID: "u", Pool: "p", Namespace: "ns", NodeID: node, GraceOID: GraceOID(node, 1<<31-1)}}
	if err := o.Validate(); err != nil {
		t.Errorf("a 63-character node id's grace object: %v", err)
	}
}
