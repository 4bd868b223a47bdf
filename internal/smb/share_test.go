package smb

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

const (
	testPath = "/var/lib/basin/mounts/v1"
	testSnap = "/var/lib/basin/sandboxes/default/smb/snapshots/v1"
)

func TestShareParams(t *testing.T) {
	base := map[string]string{"path": testPath, "read only": "no", "guest ok": "no", "vfs objects": "fruit streams_xattr acl_xattr",
		"fruit:metadata": "stream", "fruit:resource": "file", "fruit:veto_appledouble": "yes",
		"fruit:wipe_intentionally_left_blank_rfork": "yes", "fruit:delete_empty_adfiles": "yes",
		"posix locking": "no", "durable handles": "yes", "acl_xattr:ignore system acls": "no"}
	with := func(kv ...string) map[string]string {
		m := maps.Clone(base)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	shadow := []string{"vfs objects", "fruit streams_xattr shadow_copy2 acl_xattr", "shadow:snapdir", testSnap, "shadow:basedir", testPath,
		"shadow:format", DefaultSnapshotFormat, "shadow:sort", "desc", "shadow:localtime", "no"}
	plain := []string{"browseable", "yes", "oplocks", "no", "level2 oplocks", "no"}
	// A UNIX-style volume: no acl_xattr, mode bits shown as the NT ACL.
	unix := func(m map[string]string, objs string) map[string]string {
		m = maps.Clone(m)
		delete(m, "acl_xattr:ignore system acls")
		m["vfs objects"], m["nt acl support"], m["inherit acls"], m["dos filemode"], m["ea support"] = objs, "yes", "no", "no", "no"
		return m
	}
	for _, tc := range []struct {
		name     string
		settings []Setting
		want     map[string]string
		nfs      bool
	}{
		{"defaults", nil, with("browseable", "yes", "oplocks", "yes", "level2 oplocks", "yes"), false},
		// A dual-protocol volume's SMB locks are POSIX locks NFS clients meet,
		// and then no handle may be durable (Samba 4.17 panics reconnecting one
		// that holds locks); its oplocks are kernel leases NFS opens break.
		{"dual protocol", nil, with("browseable", "yes", "oplocks", "yes", "level2 oplocks", "yes",
			"posix locking", "yes", "durable handles", "no", "kernel oplocks", "yes"), true},
		// CA asks for durable handles: they win over NFS clients seeing SMB locks.
		{"dual protocol CA", []Setting{ContinuouslyAvailable}, with("browseable", "yes", "oplocks", "yes", "level2 oplocks", "yes",
			"durable handles", "yes", "kernel oplocks", "no", "kernel share modes", "no", "posix locking", "no"), true},
		{"browsable only", []Setting{Browsable}, with(plain...), false},
		{"non browsable", []Setting{NonBrowsable}, with(append(slices.Clone(plain), "browseable", "no")...), false},
		{"encrypt", []Setting{EncryptData}, with(append(slices.Clone(plain), "server smb encrypt", "required")...), false},
		{"abe", []Setting{AccessBasedEnumeration}, with(append(slices.Clone(plain), "access based share enum", "yes", "hide unreadable", "yes")...), false},
		{"previous versions", []Setting{ShowPreviousVersions}, with(append(slices.Clone(plain), shadow...)...), false},
		{"show snapshot", []Setting{ShowSnapshot}, with(append(slices.Clone(plain), shadow...)...), false},
		// Durable handles need a batch oplock or a handle lease: CA brings oplocks.
		{"continuously available", []Setting{ContinuouslyAvailable}, with("browseable", "yes", "oplocks", "yes", "level2 oplocks", "yes",
			"durable handles", "yes", "kernel oplocks", "no", "kernel share modes", "no", "posix locking", "no"), false},
		{"oplocks", []Setting{Oplocks}, with("browseable", "yes", "oplocks", "yes", "level2 oplocks", "yes"), false},
		// change notify is global in Samba 4.17: the flag changes nothing per share.
		{"change notify", []Setting{ChangeNotify}, with(plain...), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ShareParams(ShareSpec{Name: "vol1", Path: testPath, Settings: tc.settings, SnapshotDir: testSnap, NFS: tc.nfs})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name     string
		settings []Setting
		want     map[string]string
	}{
		{"dual protocol UNIX style", nil, unix(with("browseable", "yes", "oplocks", "yes", "level2 oplocks", "yes",
			"posix locking", "yes", "durable handles", "no", "kernel oplocks", "yes"), "fruit streams_xattr")},
		{"dual protocol UNIX style with previous versions", []Setting{ShowPreviousVersions}, unix(with(append(slices.Clone(plain), append(shadow,
			"posix locking", "yes", "durable handles", "no", "kernel oplocks", "yes")...)...), "fruit streams_xattr shadow_copy2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ShareParams(ShareSpec{Name: "vol1", Path: testPath, Settings: tc.settings, SnapshotDir: testSnap, NFS: true, UnixStyle: true})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestShareParamsInvalid(t *testing.T) {
	ok := ShareSpec{Name: "vol1", Path: testPath, SnapshotDir: testSnap}
	for _, tc := range []struct {
		name, field string
		mod         func(*ShareSpec)
	}{
		{"both browsable", "smbSettings", func(s *ShareSpec) { s.Settings = []Setting{Browsable, NonBrowsable} }},
		{"unknown setting", "smbSettings", func(s *ShareSpec) { s.Settings = []Setting{10} }},
		{"unspecified setting", "smbSettings", func(s *ShareSpec) { s.Settings = []Setting{0} }},
		{"relative path", "path", func(s *ShareSpec) { s.Path = "mounts/v1" }},
		{"path newline", "path", func(s *ShareSpec) { s.Path = testPath + "\n" }},
		{"path percent", "path", func(s *ShareSpec) { s.Path = "/m/%S" }},
		{"snapshots without dir", "snapshotDirectory", func(s *ShareSpec) { s.Settings = []Setting{ShowPreviousVersions}; s.SnapshotDir = "" }},
		{"snapshot dir inside", "snapshotDirectory", func(s *ShareSpec) {
			s.Settings = []Setting{ShowSnapshot}
			s.SnapshotDir = testPath + "/.snapshot"
		}},
		{"bad format", "snapshotFormat", func(s *ShareSpec) { s.Settings = []Setting{ShowSnapshot}; s.SnapshotFormat = "plain" }},
		{"format with slash", "snapshotFormat", func(s *ShareSpec) { s.Settings = []Setting{ShowSnapshot}; s.SnapshotFormat = "../%Y" }},
		{"comment newline", "description", func(s *ShareSpec) { s.Comment = "a\nb" }},
		{"reserved name", "shareName", func(s *ShareSpec) { s.Name = "Global" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.mod(&s)
			_, err := ShareParams(s)
			wantField(t, err, tc.field)
		})
	}
}

func TestValidateShareName(t *testing.T) {
	for _, n := range []string{"vol1", "V", "a_b-c", strings.Repeat("a", 80), "homes2", "ipc"} {
		if err := ValidateShareName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	bad := []string{"", "global", "GLOBAL", "homes", "Printers", "ipc$", "print$", strings.Repeat("a", 81), "-a", "_a", "a b", "a\x00"}
	for _, c := range `/\[]:|<>+=;,*?"$.%#` {
		bad = append(bad, "a"+string(c)+"b")
	}
	for _, n := range bad {
		t.Run(fmt.Sprintf("%q", n), func(t *testing.T) { wantField(t, ValidateShareName(n), "shareName") })
	}
}

// TestShareParamsSambaParses loads a share with every setting through Samba's
// parser: each key must be the canonical name (what `net conf` stores and lists)
// and keep its value.
func TestShareParamsSambaParses(t *testing.T) {
	o := testGlobal()
	o.StateDir = t.TempDir()
	o.Addresses = []netip.Addr{netip.MustParseAddr("127.0.0.2")}
	mkdirs(t, o)
	g, err := RenderGlobal(o)
	if err != nil {
		t.Fatal(err)
	}
	all := []Setting{EncryptData, NonBrowsable, ChangeNotify, Oplocks, ShowPreviousVersions, AccessBasedEnumeration, ContinuouslyAvailable}
	p, err := ShareParams(ShareSpec{Name: "vol1", Path: testPath, Settings: all, SnapshotDir: testSnap, Comment: "Basin volume vol1"})
	if err != nil {
		t.Fatal(err)
	}
	// A registry share cannot be declared in a file; with registry shares on, a
	// file section is still parsed the same way.
	var b strings.Builder
	b.WriteString(g + "[vol1]\n")
	for _, k := range slices.Sorted(maps.Keys(p)) {
		fmt.Fprintf(&b, "\t%s = %s\n", k, p[k])
	}
	parsed := testparm(t, b.String())
	sec, ok := parsed["vol1"]
	if !ok {
		t.Fatalf("no [vol1] in testparm's output")
	}
	// testparm lists a share's parameters only where they differ from the
	// defaults, which -v lists under [global]: a key missing from the share must be
	// a known one whose default is the rendered value.
	eff := maps.Clone(parsed["global"])
	maps.Copy(eff, sec)
	wantParsed(t, eff, p)
}

func TestShareDiff(t *testing.T) {
	old := map[string]string{"path": "/m/v1", "browseable": "yes", "server smb encrypt": "required", "oplocks": "yes"}
	new := map[string]string{"path": "/m/v1", "browseable": "no", "oplocks": "yes", "hide unreadable": "yes"}
	got := ShareDiff(old, new)
	want := []Step{
		{Op: SetParm, Key: "browseable", Value: "no"},
		{Op: SetParm, Key: "hide unreadable", Value: "yes"},
		{Op: DelParm, Key: "server smb encrypt"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if d := ShareDiff(new, new); len(d) != 0 {
		t.Fatalf("no change gave %+v", d)
	}
	create := ShareDiff(nil, new)
	if len(create) != len(new) || create[0].Key != "browseable" {
		t.Fatalf("create gave %+v", create)
	}
	// Applying the steps to old gives new.
	applied := maps.Clone(old)
	for _, s := range got {
		if s.Op == SetParm {
			applied[s.Key] = s.Value
		} else {
			delete(applied, s.Key)
		}
	}
	if !maps.Equal(applied, new) {
		t.Fatalf("applied %v, want %v", applied, new)
	}
	if a := (Step{Op: SetParm, Key: "browseable", Value: "no"}).Args("/s/smb.conf", "vol1"); !slices.Equal(a,
		[]string{"net", "-s", "/s/smb.conf", "conf", "setparm", "vol1", "browseable", "no"}) {
		t.Fatalf("setparm argv %q", a)
	}
	if a := (Step{Op: DelParm, Key: "hide unreadable"}).Args("/s/smb.conf", "vol1"); !slices.Equal(a,
		[]string{"net", "-s", "/s/smb.conf", "conf", "delparm", "vol1", "hide unreadable"}) {
		t.Fatalf("delparm argv %q", a)
	}
	if a := DelShareArgs("/s/smb.conf", "vol1"); !slices.Equal(a, []string{"net", "-s", "/s/smb.conf", "conf", "delshare", "vol1"}) {
		t.Fatalf("delshare argv %q", a)
	}
}

func FuzzShareDiff(f *testing.F) {
	f.Add("a=1,b=2", "b=3,c=4")
	f.Fuzz(func(t *testing.T, a, b string) {
		parse := func(s string) map[string]string {
			m := map[string]string{}
			for _, kv := range strings.Split(s, ",") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					m[k] = v
				}
			}
			return m
		}
		old, new := parse(a), parse(b)
		applied := maps.Clone(old)
		for _, s := range ShareDiff(old, new) {
			if s.Op == SetParm {
				applied[s.Key] = s.Value
			} else {
				delete(applied, s.Key)
			}
		}
		if !maps.Equal(applied, new) {
			t.Fatalf("diff of %v → %v applied gives %v", old, new, applied)
		}
	})
}
