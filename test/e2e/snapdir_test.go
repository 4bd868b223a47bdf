package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/clienthost"
	"github.com/basin-nas/basin/test/nfsraw"
)

// dial41 opens an NFSv4.1 session to ep as host h (root), as a kernel client
// does before its first LOOKUP.
func dial41(t *testing.T, ctx context.Context, h *clienthost.Host, ep netip.Addr) *nfsraw.Client {
	t.Helper()
	return dialWith(t, ctx, h, ep, nfsraw.Dial41)
}

// snapView is one client's view of a volume's .snapshot, over NFSv3 (a mount of
// the volume, then LOOKUP and READDIR from its root, as `ls /mnt/vol/.snapshot`
// does) and over NFSv4.1.
type snapView struct {
	t   *testing.T
	ctx context.Context
	vol string
	v3  *nfs3.Client
	v4  *nfsraw.Client
}

func statusText(err error) string {
	if err == nil {
		return "OK"
	}
	return err.Error()
}

// lookup3 walks names from the volume's root over NFSv3.
func (sv *snapView) lookup3(names ...string) ([]byte, error) {
	fh := sv.v3.Root
	for _, n := range names {
		var err error
		if fh, _, err = sv.v3.Lookup(sv.ctx, fh, n); err != nil {
			return nil, err
		}
	}
	return fh, nil
}

// list returns what each protocol lists in .snapshot (NFSv3 READDIR and
// READDIRPLUS, NFSv4.1 READDIR), and checks that they agree.
func (sv *snapView) list() ([]string, error) {
	sv.t.Helper()
	dir, err := sv.lookup3(".snapshot")
	if err != nil {
		return nil, fmt.Errorf("NFSv3 LOOKUP .snapshot: %w", err)
	}
	var lists [][]string
	for _, read := range []func(context.Context, []byte) ([]nfs3.DirEntry, error){sv.v3.ReadDir, sv.v3.ReadDirPlus} {
		ents, err := read(sv.ctx, dir)
		if err != nil {
			return nil, fmt.Errorf("NFSv3 READDIR .snapshot: %w", err)
		}
		names := []string{}
		for _, e := range ents {
			if e.Name != "." && e.Name != ".." {
				names = append(names, e.Name)
			}
		}
		slices.Sort(names)
		lists = append(lists, names)
	}
	fh4, err := sv.v4.LookupPath(sv.ctx, sv.vol, ".snapshot")
	if err != nil {
		return nil, fmt.Errorf("NFSv4.1 LOOKUP .snapshot: %w", err)
	}
	ents, err := sv.v4.ReadDirAll(sv.ctx, fh4)
	if err != nil {
		return nil, fmt.Errorf("NFSv4.1 READDIR .snapshot: %w", err)
	}
	names := []string{}
	for _, e := range ents {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	lists = append(lists, names)
	if !slices.Equal(lists[0], lists[1]) || !slices.Equal(lists[0], lists[2]) {
		return nil, fmt.Errorf(".snapshot lists differ: NFSv3 READDIR %v, READDIRPLUS %v, NFSv4.1 %v", lists[0], lists[1], lists[2])
	}
	return lists[0], nil
}

func (sv *snapView) wantList(want ...string) {
	sv.t.Helper()
	got, err := sv.list()
	if want == nil {
		want = []string{}
	}
	if err != nil || !slices.Equal(got, want) {
		sv.t.Fatalf(".snapshot lists %v (%v), want %v", got, err, want)
	}
}

// read reads .snapshot/<snap>/<file> over both protocols.
func (sv *snapView) read(snap, file string) (v3, v4 string, err error) {
	path := append([]string{".snapshot", snap}, strings.Split(file, "/")...)
	fh, err := sv.lookup3(path...)
	if err != nil {
		return "", "", fmt.Errorf("NFSv3: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := sv.v3.Read(sv.ctx, fh, buf, 0)
	if err != nil {
		return "", "", fmt.Errorf("NFSv3 READ: %w", err)
	}
	fh4, err := sv.v4.LookupPath(sv.ctx, append([]string{sv.vol}, path...)...)
	if err != nil {
		return string(buf[:n]), "", fmt.Errorf("NFSv4.1: %w", err)
	}
	rd := &nfsraw.Read{Count: 4096}
	if err := sv.v4.Run(sv.ctx, &nfsraw.PutFH{FH: fh4}, rd); err != nil {
		return string(buf[:n]), "", fmt.Errorf("NFSv4.1 READ: %w", err)
	}
	return string(buf[:n]), string(rd.Data), nil
}

func (sv *snapView) wantRead(snap, file, want string) {
	sv.t.Helper()
	v3, v4, err := sv.read(snap, file)
	if err != nil || v3 != want || v4 != want {
		sv.t.Fatalf(".snapshot/%s/%s reads %q over NFSv3 and %q over NFSv4.1 (%v), want %q", snap, file, v3, v4, err, want)
	}
}

// wantAbsent checks that .snapshot/<names...> is not found over either protocol.
func (sv *snapView) wantAbsent(names ...string) {
	sv.t.Helper()
	_, err3 := sv.lookup3(names...)
	_, err4 := sv.v4.LookupPath(sv.ctx, append([]string{sv.vol}, names...)...)
	if s, ok := nfs3.StatusOf(err3); !ok || s != nfs3.ErrNoEnt {
		sv.t.Fatalf("NFSv3 LOOKUP %s: %s, want NFS3ERR_NOENT", strings.Join(names, "/"), statusText(err3))
	}
	if s, ok := nfsraw.StatusOf(err4); !ok || s != nfsraw.ErrNoEnt {
		sv.t.Fatalf("NFSv4.1 LOOKUP %s: %s, want NFS4ERR_NOENT", strings.Join(names, "/"), statusText(err4))
	}
}

// snapshotVolume starts a server with volume vol1 (1 GiB, NFSv3 and NFSv4, its
// snapshot directory on, open to the subnet read-write) and returns it with the
// volume's endpoint, a client host and its view of the volume: an NFSv3 mount and
// an NFSv4.1 session.
//
// Its server provisions thin (the e2e servers' overcommit): a 1 GiB volume is
// provisioned whole, but a growth would not grow its filesystem until it fills.
// thickSnapshotVolume's server does not overcommit.
func snapshotVolume(t *testing.T, ctx context.Context) (*server, *client.Client, netip.Addr, *clienthost.Host, *snapView) {
	return snapshotVolumeOn(t, ctx, false)
}

func thickSnapshotVolume(t *testing.T, ctx context.Context) (*server, *client.Client, netip.Addr, *clienthost.Host, *snapView) {
	return snapshotVolumeOn(t, ctx, true)
}

func snapshotVolumeOn(t *testing.T, ctx context.Context, thick bool) (*server, *client.Client, netip.Addr, *clienthost.Host, *snapView) {
	t.Helper()
	s := newServer(t)
	if thick {
		s.start("--overcommit-ratio", "1")
		mutate(t, s.client(), "POST", loc+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "4", "network": "projects/p1/global/networks/default"})
	} else {
		s.start()
		nfsPool(t, s.client())
	}
	c := s.client()
	mutate(t, c, "POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3", "NFSV4"}, "snapshotDirectory": true, "unixPermissions": "0777",
		"exportPolicy": map[string]any{"rules": []any{rule(s.subnet.String(), "READ_WRITE", true, true, "true")}}})
	ep := endpoint(t, c, "vol1")
	h := s.host(201)
	return s, c, ep, h, &snapView{t: t, ctx: ctx, vol: "vol1", v3: mount3(t, ctx, h, ep, "/vol1"), v4: dial41(t, ctx, h, ep)}
}

// TestSnapshotDirectoryInsideTheVolume: from a client host, over NFSv3 and
// NFSv4.1, what `ls /mnt/vol/.snapshot` and `cat /mnt/vol/.snapshot/<s>/f` do
// against a volume mounted whole: LOOKUP .snapshot at its root, READDIR it,
// read a snapshot's files, and get a read-only error on any change. .snapshot
// follows snapshot creates, deletes and a revert, and the snapshotDirectory
// option: off, it is not there; on again, it is back.
func TestSnapshotDirectoryInsideTheVolume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, c, ep, h, sv := snapshotVolume(t, ctx)
	write := func(p, content string) {
		t.Helper()
		if err := writePath(ctx, sv.v3, p, content); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	snapshot := func(id string) { mutate(t, c, "POST", loc+"/volumes/vol1/snapshots?snapshotId="+id, map[string]any{}) }

	// With no snapshot yet, .snapshot is there and empty; the volume's own
	// listing does not show it (a hidden name, as upstream's).
	sv.wantList()
	ents, err := sv.v3.ReadDir(ctx, sv.v3.Root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name == ".snapshot" {
			t.Fatal("READDIR of the volume's root lists .snapshot")
		}
	}

	write("f", "before")
	write("d/g", "deep before")
	snapshot("s1")
	write("f", "after")
	write("new", "written after s1")
	sv.wantList("s1")
	sv.wantRead("s1", "f", "before")
	sv.wantRead("s1", "d/g", "deep before")
	sv.wantAbsent(".snapshot", "s1", "new")
	sv.wantAbsent(".snapshot", "nosuch")
	if got, _ := readPath(ctx, sv.v3, "f"); got != "after" {
		t.Fatalf("the live volume reads %q", got)
	}

	t.Run("read-only", func(t *testing.T) {
		dir, _ := sv.lookup3(".snapshot")
		s1, _ := sv.lookup3(".snapshot", "s1")
		f, _ := sv.lookup3(".snapshot", "s1", "f")
		rofs3 := func(what string, err error) {
			t.Helper()
			if s, ok := nfs3.StatusOf(err); !ok || s != nfs3.ErrROFS {
				t.Errorf("NFSv3 %s: %s, want NFS3ERR_ROFS", what, statusText(err))
			}
		}
		_, err := sv.v3.Write(ctx, f, []byte("x"), 0, nfs3.FileSync)
		rofs3("WRITE .snapshot/s1/f", err)
		rofs3("SETATTR .snapshot/s1/f", sv.v3.SetAttr(ctx, f, nfs3.SetAttrs{Mode: nfs3.Mode(0o777)}))
		_, err = sv.v3.Create(ctx, s1, "x", 0o644)
		rofs3("CREATE in .snapshot/s1", err)
		_, err = sv.v3.Mkdir(ctx, dir, "x", 0o755)
		rofs3("MKDIR in .snapshot", err)
		rofs3("REMOVE .snapshot/s1/f", sv.v3.Remove(ctx, s1, "f"))
		rofs3("RMDIR .snapshot/s1", sv.v3.Rmdir(ctx, dir, "s1"))
		rofs3("RENAME .snapshot/s1", sv.v3.Rename(ctx, dir, "s1", dir, "s9"))
		rofs4 := func(what string, err error) {
			t.Helper()
			if s, ok := nfsraw.StatusOf(err); !ok || s != nfsraw.ErrROFS {
				t.Errorf("NFSv4.1 %s: %s, want NFS4ERR_ROFS", what, statusText(err))
			}
		}
		f4, err := sv.v4.LookupPath(ctx, "vol1", ".snapshot", "s1", "f")
		if err != nil {
			t.Fatal(err)
		}
		dir4, _ := sv.v4.LookupPath(ctx, "vol1", ".snapshot")
		s14, _ := sv.v4.LookupPath(ctx, "vol1", ".snapshot", "s1")
		rofs4("WRITE .snapshot/s1/f", sv.v4.Run(ctx, &nfsraw.PutFH{FH: f4}, &nfsraw.Write{Data: []byte("x")}))
		m := uint32(0o777)
		rofs4("SETATTR .snapshot/s1/f", sv.v4.Run(ctx, &nfsraw.PutFH{FH: f4}, &nfsraw.SetAttr{Mode: &m}))
		rofs4("CREATE in .snapshot/s1", sv.v4.Run(ctx, &nfsraw.PutFH{FH: s14}, &nfsraw.Create{Name: "x", Mode: 0o755}))
		rofs4("CREATE in .snapshot", sv.v4.Run(ctx, &nfsraw.PutFH{FH: dir4}, &nfsraw.Create{Name: "x", Mode: 0o755}))
		rofs4("REMOVE .snapshot/s1/f", sv.v4.Run(ctx, &nfsraw.PutFH{FH: s14}, &nfsraw.Remove{Name: "f"}))
		rofs4("REMOVE .snapshot/s1", sv.v4.Run(ctx, &nfsraw.PutFH{FH: dir4}, &nfsraw.Remove{Name: "s1"}))
		sv.wantRead("s1", "f", "before")
	})

	// Creates, deletes: .snapshot follows; a deleted snapshot's handles are stale.
	snapshot("s2")
	write("f", "after s2")
	sv.wantList("s1", "s2")
	sv.wantRead("s2", "f", "after")
	oldF, _ := sv.lookup3(".snapshot", "s1", "f")
	mutate(t, c, "DELETE", loc+"/volumes/vol1/snapshots/s1", nil)
	sv.wantList("s2")
	sv.wantAbsent(".snapshot", "s1")
	if _, _, err := sv.v3.Read(ctx, oldF, make([]byte, 16), 0); err == nil {
		t.Fatal("a deleted snapshot's file is still readable through its handle")
	}
	// A snapshot deleted and made again under the same name shows its new content.
	snapshot("s1")
	sv.wantList("s1", "s2")
	sv.wantRead("s1", "f", "after s2")

	// A revert to s2 deletes the newer s1 and serves s2's data live.
	mutate(t, c, "POST", loc+"/volumes/vol1:revert", map[string]any{"snapshotId": "s2"})
	sv.v3 = mount3(t, ctx, h, ep, "/vol1") // the live data's handles are stale after a revert
	sv.wantList("s2")
	sv.wantRead("s2", "f", "after")
	if got, _ := readPath(ctx, sv.v3, "f"); got != "after" {
		t.Fatalf("after the revert the live volume reads %q", got)
	}

	// The option off: no .snapshot, and its handles are stale; on again: back.
	dir, _ := sv.lookup3(".snapshot")
	mutate(t, c, "PATCH", loc+"/volumes/vol1?updateMask=snapshotDirectory", map[string]any{"snapshotDirectory": false})
	sv.wantAbsent(".snapshot")
	if _, err := sv.v3.ReadDir(ctx, dir); err == nil {
		t.Fatal("the snapshot directory's handle still lists it with the option off")
	}
	mutate(t, c, "PATCH", loc+"/volumes/vol1?updateMask=snapshotDirectory", map[string]any{"snapshotDirectory": true})
	sv.wantList("s2")
	sv.wantRead("s2", "d/g", "deep before")

	// An export policy change reaches .snapshot too (updated in place): the
	// client, now read-only, still reads it; a client the policy no longer names
	// gets nothing of it.
	mutate(t, c, "PATCH", loc+"/volumes/vol1?updateMask=exportPolicy", map[string]any{"exportPolicy": map[string]any{"rules": []any{
		rule(h.Addr.String(), "READ_ONLY", true, true, "true")}}})
	sv.wantList("s2")
	sv.wantRead("s2", "f", "after")
	other := dial41(t, ctx, s.host(202), ep)
	if _, err := other.LookupPath(ctx, "vol1", ".snapshot"); err == nil {
		t.Fatal("a client the policy no longer names reached .snapshot")
	}
	s.stop(syscall.SIGTERM)
}
