package mountinfo

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Entry
		ok   bool
	}{
		{"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue",
			Entry{MountPoint: "/mnt2", Root: "/mnt1", FSType: "ext3", Source: "/dev/root", Options: "rw,noatime"}, true},
		// A btrfs subvolume, and spaces escaped as \040.
		{`77 30 0:41 /live /var/lib/basin/mounts/v\040x rw,nosuid,nodev,noexec,noatime shared:45 - btrfs /dev/loop3 rw,ssd,subvolid=256,subvol=/live`,
			Entry{MountPoint: "/var/lib/basin/mounts/v x", Root: "/live", FSType: "btrfs", Source: "/dev/loop3", Options: "rw,nosuid,nodev,noexec,noatime"}, true},
		// No optional fields at all.
		{"22 1 0:21 / /proc rw,nosuid - proc proc rw", Entry{MountPoint: "/proc", Root: "/", FSType: "proc", Source: "proc", Options: "rw,nosuid"}, true},
		{"garbage", Entry{}, false},
		{"1 2 3 4 5 6 7 8 9 10", Entry{}, false}, // no separator
	} {
		got, ok := parseLine(tc.line)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseLine(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

// Under's order is the order mounts can be taken down in: deeper mount points
// first, and of two mounts on one point the later (the one on top) first.
func TestDeepestFirst(t *testing.T) {
	es := []Entry{{MountPoint: "/d/m"}, {MountPoint: "/d/m/a@s1"}, {MountPoint: "/d/m/b"}, {MountPoint: "/d/m/a/x/y"}}
	// Under reverses mountinfo's order (latest first) before sorting.
	slices.Reverse(es)
	sortDeepestFirst(es)
	var got []string
	for _, e := range es {
		got = append(got, e.MountPoint)
	}
	want := []string{"/d/m/a/x/y", "/d/m/b", "/d/m/a@s1", "/d/m"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// MountPoints holds what IsMountPoint answers for, and not other directories.
func TestMountPoints(t *testing.T) {
	mps, err := MountPoints()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/", "/proc", "/proc/self"} {
		want, err := IsMountPoint(p)
		if err != nil {
			t.Fatal(err)
		}
		if mps[p] != want {
			t.Errorf("%s: MountPoints says %v, IsMountPoint %v", p, mps[p], want)
		}
	}
	if !mps["/"] {
		t.Error("/ is not among the mount points")
	}
}

// IsMountPoint, which does not read the table, agrees with it: every mount point
// the table lists is one, and their non-mount-point neighbours are not.
func TestIsMountPointAgreesWithTable(t *testing.T) {
	mps, err := MountPoints()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for mp := range mps {
		if _, err := os.Lstat(mp); err != nil {
			continue // hidden from us (another namespace's path, or shadowed)
		}
		ok, err := crossesMount(mp)
		if err != nil || mp == "/" {
			continue
		}
		checked++
		if !ok {
			t.Errorf("%s is in the mount table but IsMountPoint says no", mp)
		}
	}
	if checked == 0 {
		t.Fatal("no mount point checked")
	}
	for _, p := range []string{t.TempDir(), "/nonexistent/x", "/proc/self/fd"} {
		ok, err := IsMountPoint(p)
		if err != nil {
			t.Fatal(err)
		}
		if ok != mps[p] {
			t.Errorf("%s: IsMountPoint %v, table %v", p, ok, mps[p])
		}
	}
}

// A bind mount of a directory onto another of the same filesystem has the same
// device as its parent, and is still seen as a mount point.
func TestIsMountPointSeesSameFilesystemBind(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	for _, d := range []string{src, dst} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := IsMountPoint(dst); err != nil || ok {
		t.Fatalf("before the bind: %v, %v", ok, err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
	ok, err := IsMountPoint(dst)
	if err != nil || !ok {
		t.Fatalf("after the bind: %v, %v", ok, err)
	}
	if ok, _ := IsMountPoint(filepath.Join(dst, "..", "src")); ok {
		t.Fatal("the bind's source is not a mount point")
	}
}
