package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/nfsraw"
)

// A real sandbox (root, Basin's Ganesha): after NFSv3 and NFSv4.0 reads and
// writes on some exports, the batched read (GetNFSIO and GetTotalOPS per export)
// gives exactly what the per-export read (four GetNFSv*IO and GetTotalOPS) does,
// for exports with I/O in one version, in two, and in none; an export Ganesha
// does not have is absent. Names: bridge bst0, namespace basin-bst0, subnet
// 10.99.214.0/24.
func TestExportsIOMatchesExportIO(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := Network{Name: "bst", Bridge: "bst0", Prefix: netip.MustParsePrefix("10.99.214.0/24"),
		FirstEndpoint: netip.MustParseAddr("10.99.214.10"), LastEndpoint: netip.MustParseAddr("10.99.214.127")}
	m, mounts := rootManager(t, ctx, n)
	addr := n.FirstEndpoint
	host := n.HostAddr().String()
	ids := []uint64{21, 22, 23}
	for _, id := range ids {
		name := fmt.Sprintf("v%d", id-20)
		vol := tmpfsVolume(t, mounts, name, "size=4m")
		os.WriteFile(filepath.Join(vol, "f"), make([]byte, 64<<10), 0o666)
		ex := nfs.Export{ID: id, Path: vol, Pseudo: "/" + name, Protocols: []int{3, 4},
			Clients: []nfs.Client{{Clients: []string{host}, Access: nfs.AccessRW, Squash: nfs.NoRootSquash, Protocols: []int{3, 4}}}}
		if err := m.Export(ctx, "bst", addr, ex); err != nil {
			t.Fatal(err)
		}
	}

	// Export 21: NFSv3 writes and reads, and NFSv4.0 reads; 22: NFSv3 writes;
	// 23: nothing.
	v3 := func(name string, writes, reads int) {
		t.Helper()
		c, err := nfs3.Mount(ctx, addr.String(), "/"+name, nfs3.Options{})
		if err != nil {
			t.Fatalf("mount %s: %v", name, err)
		}
		defer c.Close()
		fh, _, err := c.Lookup(ctx, c.Root, "f")
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		for i := range writes {
			if _, err := c.Write(ctx, fh, buf, int64(i)*4096, nfs3.FileSync); err != nil {
				t.Fatal(err)
			}
		}
		for i := range reads {
			if _, _, err := c.Read(ctx, fh, buf, int64(i)*4096); err != nil {
				t.Fatal(err)
			}
		}
	}
	v3("v1", 3, 5)
	v3("v2", 2, 0)
	c4, err := nfsraw.Dial(ctx, addr.String(), 2049, nfsraw.Auth{Machine: "bst"})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := c4.Run(ctx, &nfsraw.PutRootFH{}, &nfsraw.Lookup{Name: "v1"}, &nfsraw.Lookup{Name: "f"}, &nfsraw.Read{Count: 8192}); err != nil {
			t.Fatalf("NFSv4.0 read: %v", err)
		}
	}
	c4.Close()

	// The real daemon declares GetNFSIO as the parser reads it.
	bus := m.sandboxes["bst"].busAddress()
	out, err := exec.CommandContext(ctx, "busctl", "--address="+bus, "introspect", "org.ganesha.nfsd",
		"/org/ganesha/nfsd/ExportMgr", "org.ganesha.nfsd.exportstats").CombinedOutput()
	if err != nil {
		t.Logf("busctl introspect: %v %s", err, out)
	} else {
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, ".GetNFSIO ") {
				t.Logf("%s", strings.Join(strings.Fields(l), " "))
				if !strings.Contains(l, "bs(tt)a(qs(tttttt)(tttttt))") {
					t.Errorf("GetNFSIO's signature changed: %s", l)
				}
			}
		}
	}

	per := map[uint64]nfs.ExportIO{}
	for _, id := range ids {
		if per[id], err = m.ExportIO(ctx, "bst", id); err != nil {
			t.Fatal(err)
		}
	}
	got, err := m.ExportsIO(ctx, "bst", append(ids, 99))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("per export: %+v\nbatched: %+v", per, got)
	if len(got) != len(ids) {
		t.Fatalf("batched read has %d exports, want %d (export 99 absent)", len(got), len(ids))
	}
	for _, id := range ids {
		if got[id] != per[id] {
			t.Errorf("export %d: batched %+v\nper export %+v", id, got[id], per[id])
		}
	}
	// The load arrived where it was sent: both versions' reads on 21.
	if r := per[21].Read.Ops; r != 5+4 {
		t.Errorf("export 21 counted %d reads, want 9 (5 NFSv3, 4 NFSv4.0)", r)
	}
	if w := per[22].Write; w.Ops != 2 || w.TransferredBytes != 2*4096 {
		t.Errorf("export 22 writes %+v, want 2 of 4 KiB", w)
	}
	if x := per[23]; x.Read.Ops != 0 || x.Write.Ops != 0 {
		t.Errorf("export 23 has I/O: %+v", x)
	}
}
