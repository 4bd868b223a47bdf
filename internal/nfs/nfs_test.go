package nfs

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
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
}

func TestRenderConfig(t *testing.T) {
	golden(t, "ganesha.conf", RenderConfig(ConfigOptions{StateDir: "/var/lib/basin/sandboxes/default", PluginsDir: "/usr/local/lib/basin/ganesha/lib/ganesha"}))
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
