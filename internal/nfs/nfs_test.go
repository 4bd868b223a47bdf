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
}

func TestRenderConfig(t *testing.T) {
	golden(t, "ganesha.conf", RenderConfig(ConfigOptions{StateDir: "/var/lib/basin/sandboxes/default", ExportsFile: "/var/lib/basin/sandboxes/default/exports.conf"}))
}
