package e2e

import (
	"context"
	"errors"
	"io/fs"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/internal/smb"
	"github.com/basin-nas/basin/test/addc"
	"github.com/basin-nas/basin/test/clienthost"
	"github.com/basin-nas/basin/test/nfsraw"
)

// nfsActor is an NFS client of one volume as one AUTH_SYS identity (uid,
// gid, as Linux clients send them): NFSv3 through internal/nfs3, NFSv4.1
// through test/nfsraw.
type nfsActor struct {
	v3 *nfs3.Client
	v4 *nfsraw.Client
	r4 []byte // the volume's root, NFSv4
}

func dialActor(ctx context.Context, t *testing.T, h *clienthost.Host, sh smbShare, version int, uid, gid uint32) *nfsActor {
	t.Helper()
	a := &nfsActor{}
	if version == 4 {
		a.v4, a.r4 = dial41As(ctx, t, h, sh, nfsraw.Auth{UID: uid, GID: gid, Machine: "styles"})
		return a
	}
	if err := h.Within(func() (err error) {
		a.v3, err = nfs3.Mount(ctx, sh.Endpoint.String(), "/"+sh.Share, nfs3.Options{Auth: nfs3.Auth{UID: uid, GID: gid, Machine: "styles"}})
		return err
	}); err != nil {
		t.Fatalf("NFSv3 as %d/%d: %v", uid, gid, err)
	}
	t.Cleanup(func() { a.v3.Close() })
	return a
}

var actorOwner = []byte("styles/open")

func (a *nfsActor) read(ctx context.Context, name string) error {
	if a.v3 != nil {
		fh, _, err := a.v3.Lookup(ctx, a.v3.Root, name)
		if err != nil {
			return err
		}
		_, _, err = a.v3.Read(ctx, fh, make([]byte, 64), 0)
		return err
	}
	fh, st, err := a.v4.OpenFile(ctx, a.r4, name, nfsraw.ShareAccessRead, nfsraw.ShareDenyNone, actorOwner, false)
	if err != nil {
		return err
	}
	return a.v4.Run(ctx, &nfsraw.PutFH{FH: fh}, &nfsraw.Read{StateID: st, Count: 64})
}

func (a *nfsActor) chmod(ctx context.Context, name string, mode uint32) error {
	if a.v3 != nil {
		fh, _, err := a.v3.Lookup(ctx, a.v3.Root, name)
		if err != nil {
			return err
		}
		return a.v3.SetAttr(ctx, fh, nfs3.SetAttrs{Mode: &mode})
	}
	return a.v4.Run(ctx, &nfsraw.PutFH{FH: a.r4}, &nfsraw.Lookup{Name: name}, &nfsraw.SetAttr{Mode: &mode})
}

// create makes name with mode (NFSv3 CREATE; NFSv4.1 OPEN, then SETATTR).
func (a *nfsActor) create(ctx context.Context, name string, mode uint32) error {
	if a.v3 != nil {
		_, err := a.v3.Create(ctx, a.v3.Root, name, mode)
		return err
	}
	if _, _, err := a.v4.OpenFile(ctx, a.r4, name, nfsraw.ShareAccessBoth, nfsraw.ShareDenyNone, actorOwner, true); err != nil {
		return err
	}
	return a.chmod(ctx, name, mode)
}

// refused says whether err is the NFS status of a refused permission or
// access check (PERM or ACCES; want names which).
func nfsRefused(err error, want string) bool {
	switch want {
	case "PERM":
		return isNFS3Status(err, nfs3.ErrPerm) || isNFS4Status(err, 1)
	case "ACCES":
		return isNFS3Status(err, nfs3.ErrAcces) || isNFS4Status(err, 13)
	}
	return isNFS3Status(err, nfs3.ErrPerm) || isNFS4Status(err, 1) || isNFS3Status(err, nfs3.ErrAcces) || isNFS4Status(err, 13)
}

// smbcacls runs smbcacls as u on file in sh with args, retrying (10 s) while
// the server's LSA cannot look names up yet (exit 2; see smbad_test.go).
func (l *smbLab) smbcacls(ctx context.Context, u addc.User, sh smbShare, file string, args ...string) (string, error) {
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		o, err := l.shareTool(ctx, u, "smbcacls", append([]string{unc(sh), file}, args...)...)
		var ee *exec.ExitError
		if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 2 || time.Now().After(end) {
			return o, err
		}
	}
}

// TestSecurityStyles (issue 33, criterion 1): on [SMB, NFSV3] and
// [SMB, NFSV4] volumes of each security style, who may read and change
// permissions over each protocol, as docs/design-dual-protocol.md gives
// ONTAP's semantics.
//
// NTFS: the NT ACL decides over both protocols. A file alice restricted to
// herself over SMB is readable over NFS by alice alone (bob, in Domain Users,
// was let in by the group bits before), and by root only where the export
// rule grants root access; a chmod or chown over NFS is refused
// (NFS3ERR_PERM / NFS4ERR_PERM), even alice's, and leaves the ACL as it was.
//
// UNIX: the mode bits decide over both protocols. alice's 0600 file is hers
// over SMB too; her chmod over NFS opens it to bob over both; bob cannot set
// an ACL on it over SMB.
func TestSecurityStyles(t *testing.T) {
	l := newSMBLab(t, nil)
	alice, bob := l.user("alice"), l.user("bob")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	aliceUID := uint32(smb.DomainIDMin + l.rid(ctx, "(sAMAccountName=alice)"))
	bobUID := uint32(smb.DomainIDMin + l.rid(ctx, "(sAMAccountName=bob)"))
	domainUsers := uint32(smb.DomainIDMin + 513)
	squashed, rooted := l.h, l.s.host(151)

	for _, c := range []struct {
		style, proto string
		version      int
	}{{"NTFS", "NFSV3", 3}, {"NTFS", "NFSV4", 4}, {"UNIX", "NFSV3", 3}, {"UNIX", "NFSV4", 4}} {
		t.Run(c.style+" "+c.proto, func(t *testing.T) {
			id := strings.ToLower(c.style[:1] + c.proto[3:]) // nv3, nv4, uv3, uv4
			v3, v4 := c.version == 3, c.version == 4
			// A UNIX volume's root is 0770 root's unless asked otherwise: 0777
			// lets alice make her file in it (an NTFS volume's starts so).
			sh := l.volume(id, map[string]any{"protocols": []string{"SMB", c.proto}, "securityStyle": c.style, "unixPermissions": "0777",
				"exportPolicy": map[string]any{"rules": []any{
					rule(l.s.addrN(150), "READ_WRITE", v3, v4, "false"),
					rule(l.s.addrN(151), "READ_WRITE", v3, v4, "true")}}})
			asAlice := dialActor(ctx, t, squashed, sh, c.version, aliceUID, domainUsers)
			asBob := dialActor(ctx, t, squashed, sh, c.version, bobUID, domainUsers)
			asStranger := dialActor(ctx, t, squashed, sh, c.version, 4242, 4242)
			asRoot := dialActor(ctx, t, squashed, sh, c.version, 0, 0)
			asRootAllowed := dialActor(ctx, t, rooted, sh, c.version, 0, 0)
			aliceSMB, bobSMB := l.mount(ctx, sh, alice, sh.Share), l.mount(ctx, sh, bob, sh.Share)
			expect := func(what string, err error, want string) {
				t.Helper()
				switch {
				case want == "OK" && err != nil:
					t.Errorf("%s: %v, want it allowed", what, err)
				case want == "SMB-DENIED" && !errors.Is(err, fs.ErrPermission):
					t.Errorf("%s: %v, want STATUS_ACCESS_DENIED", what, err)
				case want != "OK" && want != "SMB-DENIED" && !nfsRefused(err, want):
					t.Errorf("%s: %v, want NFS %s", what, err, want)
				}
			}
			readSMB := func(fs interface{ ReadFile(string) ([]byte, error) }, name string) error {
				_, err := fs.ReadFile(name)
				return err
			}

			// user.NTACL, where Samba keeps NT ACLs, is Basin's on either
			// style: no SMB client reads or plants it as an extended
			// attribute (a planted one would decide access in a clone that
			// follows NT ACLs). An NTFS share keeps other EAs; a UNIX one
			// has none (ea support = no).
			if err := aliceSMB.WriteFile("ea.txt", []byte("ea\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			h := l.holder(t, sh, alice)
			if got := h.do("openea ea.txt"); got[0] != "granted" {
				t.Fatalf("open ea.txt: %v", got)
			}
			if got := h.do("setea NTACL forged"); got[1] == "00000000" {
				t.Errorf("alice set the EA NTACL over SMB: %v", got)
			}
			other := h.do("setea BASINTEST kept")
			if ok := other[1] == "00000000"; ok != (c.style == "NTFS") {
				t.Errorf("alice set another EA over SMB: %v (want it set only on NTFS)", other)
			}
			if got := h.do("eas"); strings.Contains(strings.ToUpper(strings.Join(got, " ")), "NTACL") {
				t.Errorf("EAs listed over SMB: %v", got)
			}
			h.do("close")

			if c.style == "NTFS" {
				// alice writes a file over SMB and restricts it to herself.
				if err := aliceSMB.WriteFile("a.txt", []byte("alice's\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if o, err := l.smbcacls(ctx, alice, sh, "a.txt", "--set", "ACL:"+l.dc.Domain+`\alice:ALLOWED/0/FULL`); err != nil {
					t.Fatalf("alice restricts a.txt: %v\n%s", err, o)
				}
				expect("alice reads a.txt over SMB", readSMB(aliceSMB, "a.txt"), "OK")
				expect("bob reads a.txt over SMB", readSMB(bobSMB, "a.txt"), "SMB-DENIED")
				expect("alice reads a.txt over NFS", asAlice.read(ctx, "a.txt"), "OK")
				expect("bob (Domain Users) reads a.txt over NFS", asBob.read(ctx, "a.txt"), "ACCES")
				expect("uid 4242 reads a.txt over NFS", asStranger.read(ctx, "a.txt"), "ACCES")
				expect("squashed root reads a.txt over NFS", asRoot.read(ctx, "a.txt"), "ACCES")
				expect("root with root access reads a.txt over NFS", asRootAllowed.read(ctx, "a.txt"), "OK")
				// Permission changes over NFS are refused, the owner's and
				// root's too, and leave the ACL as it was.
				expect("alice's chmod 0777 over NFS", asAlice.chmod(ctx, "a.txt", 0o777), "PERM")
				expect("root's chmod 0777 over NFS", asRootAllowed.chmod(ctx, "a.txt", 0o777), "PERM")
				if v3 {
					fh, _, err := asAlice.v3.Lookup(ctx, asAlice.v3.Root, "a.txt")
					if err != nil {
						t.Fatal(err)
					}
					expect("alice's chown to bob over NFS", asAlice.v3.SetAttr(ctx, fh, nfs3.SetAttrs{UID: &bobUID}), "PERM")
				}
				expect("bob reads a.txt over SMB after the chmods", readSMB(bobSMB, "a.txt"), "SMB-DENIED")
				expect("bob reads a.txt over NFS after the chmods", asBob.read(ctx, "a.txt"), "ACCES")
				if o, err := l.smbcacls(ctx, alice, sh, "a.txt"); err != nil || !strings.Contains(strings.ToLower(o), `\alice:allowed/0x0/full`) || strings.Contains(o, "Everyone") {
					t.Errorf("a.txt's ACL after the refused chmods: %v\n%s", err, o)
				}
				// A chmod to the mode already there is no change, and passes
				// (tar, rsync and cp -p set what is there).
				if v3 {
					fh, _, err := asAlice.v3.Lookup(ctx, asAlice.v3.Root, "a.txt")
					if err != nil {
						t.Fatal(err)
					}
					at, err := asAlice.v3.GetAttr(ctx, fh)
					if err != nil {
						t.Fatal(err)
					}
					mode := at.Mode & 0o7777
					expect("alice's chmod to a.txt's own mode over NFS", asAlice.v3.SetAttr(ctx, fh, nfs3.SetAttrs{Mode: &mode}), "OK")
				}
				// A grant in the NT ACL lets in over NFS whom it names, by
				// that entry alone (bob's NFS group here is not Domain
				// Users), and nobody else.
				if err := aliceSMB.WriteFile("g.txt", []byte("for bob\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if o, err := l.smbcacls(ctx, alice, sh, "g.txt", "--set", "ACL:"+l.dc.Domain+`\alice:ALLOWED/0/FULL,ACL:`+l.dc.Domain+`\bob:ALLOWED/0/READ`); err != nil {
					t.Fatalf("alice grants bob g.txt: %v\n%s", err, o)
				}
				bobAlone := dialActor(ctx, t, squashed, sh, c.version, bobUID, 4242)
				expect("bob (named in g.txt's ACL, group 4242) reads g.txt over NFS", bobAlone.read(ctx, "g.txt"), "OK")
				expect("uid 4242 reads g.txt over NFS", asStranger.read(ctx, "g.txt"), "ACCES")
				expect("bob reads g.txt over SMB", readSMB(bobSMB, "g.txt"), "OK")
				return
			}

			// UNIX: alice makes a 0600 file over NFS.
			if err := asAlice.create(ctx, "u.txt", 0o600); err != nil {
				t.Fatalf("alice creates u.txt over NFS: %v", err)
			}
			expect("alice reads u.txt over SMB", readSMB(aliceSMB, "u.txt"), "OK")
			expect("bob reads u.txt over SMB", readSMB(bobSMB, "u.txt"), "SMB-DENIED")
			expect("bob reads u.txt over NFS", asBob.read(ctx, "u.txt"), "ACCES")
			expect("uid 4242 reads u.txt over NFS", asStranger.read(ctx, "u.txt"), "ACCES")
			expect("squashed root reads u.txt over NFS", asRoot.read(ctx, "u.txt"), "ACCES")
			expect("root with root access reads u.txt over NFS", asRootAllowed.read(ctx, "u.txt"), "OK")
			expect("bob's chmod of alice's file over NFS", asBob.chmod(ctx, "u.txt", 0o666), "")
			// bob cannot give himself access over SMB either.
			if o, err := l.smbcacls(ctx, bob, sh, "u.txt", "--set", "ACL:"+l.dc.Domain+`\bob:ALLOWED/0/FULL`); err == nil {
				t.Errorf("bob set an ACL on alice's u.txt over SMB:\n%s", o)
			} else if !strings.Contains(o, "ACCESS_DENIED") {
				t.Errorf("bob's ACL on alice's u.txt: %v, want NT_STATUS_ACCESS_DENIED\n%s", err, o)
			}
			// alice's chmod over NFS is what SMB sees.
			expect("alice's chmod 0644 over NFS", asAlice.chmod(ctx, "u.txt", 0o644), "OK")
			expect("bob reads u.txt over NFS after alice's chmod", asBob.read(ctx, "u.txt"), "OK")
			expect("bob reads u.txt over SMB after alice's chmod", readSMB(bobSMB, "u.txt"), "OK")
			if err := bobSMB.WriteFile("u.txt", []byte("bob's\n"), 0o644); !errors.Is(err, fs.ErrPermission) {
				t.Errorf("bob writes u.txt (0644, alice's) over SMB: %v, want STATUS_ACCESS_DENIED", err)
			}
		})
	}

	// A clone of an SMB volume whose root alice narrowed to herself keeps that
	// root: its NT ACL, which a chmod to unixPermissions would have made Samba
	// drop (Everyone: Full control).
	t.Run("NTFS clone", func(t *testing.T) {
		src := l.volume("clsrc", nil)
		acl := "ACL:" + l.dc.Domain + `\alice:ALLOWED/0x3/FULL`
		if o, err := l.smbcacls(ctx, alice, src, `\`, "--set", acl); err != nil {
			t.Fatalf("alice narrows the root: %v\n%s", err, o)
		}
		listRoot := func(sh smbShare, u addc.User) error {
			_, err := l.mount(ctx, sh, u, sh.Share).ReadDir(".")
			return err
		}
		if err := listRoot(src, bob); !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("bob lists the narrowed root: %v, want STATUS_ACCESS_DENIED", err)
		}
		mutate(t, l.c, "POST", loc+"/volumes/clsrc/snapshots?snapshotId=s1", map[string]any{})
		clone := l.volume("clone", map[string]any{"restoreParameters": map[string]any{"sourceSnapshot": strings.TrimPrefix(loc, "/v1/") + "/volumes/clsrc/snapshots/s1"}})
		if err := listRoot(clone, bob); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("bob lists the clone's root: %v, want STATUS_ACCESS_DENIED", err)
		}
		if err := listRoot(clone, alice); err != nil {
			t.Errorf("alice lists the clone's root: %v", err)
		}
		o, err := l.smbcacls(ctx, alice, clone, `\`)
		if err != nil || !strings.Contains(strings.ToLower(o), `\alice:allowed/`) || strings.Contains(o, "Everyone") {
			t.Errorf("the clone's root ACL: %v\n%s", err, o)
		}
	})
}
