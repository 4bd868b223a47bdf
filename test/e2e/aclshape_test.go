package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/nfs3"
)

// posixACL is a POSIX ACL as Linux keeps it in system.posix_acl_access
// (version 2, then tag, permissions and id per entry, sorted by tag and id).
type aclEntry struct {
	tag, perm uint16
	id        uint32
}

func posixACL(es ...aclEntry) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// ACL tags and the "no id" of the owner, group, mask and other entries.
const (
	aclUserObj, aclUser, aclGroupObj, aclGroup, aclMask, aclOther = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
	aclNoID                                                       = 0xffffffff
)

// TestPOSIXACLShapes: Ganesha (built with POSIX ACLs) reads the ACL of every
// file it checks access to, and an ACL is whatever a file's owner sets. Files
// with ACLs of every shape, among them those whose entries all needed a DENY
// ACE beside their ALLOW (which overflowed the ACE array in Ganesha 4.3, a
// heap overflow on the first access check: Basin patch 0015), are read over
// NFS by users the ACLs name and one they do not, each allowed or refused as
// POSIX says for these shapes (Ganesha's conversion differs in others:
// docs/design-dual-protocol.md), and the same Ganesha serves throughout.
func TestPOSIXACLShapes(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	nfsPool(t, c)
	before := inspect(t, s.dataDir).mounts
	mutate(t, c, "POST", loc+"/volumes?volumeId=acls", map[string]any{"shareName": "acls", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3"}, "unixPermissions": "0777",
		"exportPolicy": map[string]any{"rules": []any{rule(s.addrN(150), "READ_WRITE", true, false, "false")}}})
	var dir string
	for _, k := range inspect(t, s.dataDir).mounts {
		if !slices.Contains(before, k) {
			dir = filepath.Join(s.dataDir, "mounts", k)
		}
	}
	if dir == "" {
		t.Fatal("no mount for the volume")
	}
	u := func(perm uint16) aclEntry { return aclEntry{aclUserObj, perm, aclNoID} }
	g := func(perm uint16) aclEntry { return aclEntry{aclGroupObj, perm, aclNoID} }
	m := func(perm uint16) aclEntry { return aclEntry{aclMask, perm, aclNoID} }
	o := func(perm uint16) aclEntry { return aclEntry{aclOther, perm, aclNoID} }
	shapes := [][]aclEntry{
		{u(6), {aclUser, 6, 1000}, g(6), m(6), o(7)}, // u::rw-,u:1000:rw-,g::rw-,m::rw-,o::rwx
		{u(4), g(4), m(4), o(6)},                     // u::r--,g::r--,m::r--,o::rw-
		{u(7), {aclUser, 7, 1000}, g(0), m(7), o(0)},
		{u(0), {aclUser, 4, 1000}, {aclUser, 2, 1001}, g(1), {aclGroup, 6, 2000}, m(5), o(7)},
		{u(6), g(4), o(4)},
	}
	// Who reads each shape (all readers are in group 2000, the owner 4242).
	reads := map[uint32][]bool{
		1000: {true, true, true, true, true},   // u:1000 where named (masked r-x on 3)
		1001: {true, true, false, false, true}, // other on 0, 1, 4; u:1001:-w- on 3
		3000: {true, true, false, true, true},  // g:2000:rw- masked r-x on 3
	}
	for i, shape := range shapes {
		f := filepath.Join(dir, fmt.Sprintf("f%d", i))
		// Owned by another uid than the readers', so that the ACL decides.
		if err := os.WriteFile(f, []byte("data\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(f, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(f, "system.posix_acl_access", posixACL(shape...), 0); err != nil {
			t.Fatalf("ACL %d on %s: %v", i, f, err)
		}
	}
	pids := s.ganeshaPIDs()
	ep := endpoint(t, c, "acls")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, uid := range []uint32{1000, 1001, 3000} {
		var cl *nfs3.Client
		if err := s.host(150).Within(func() (err error) {
			cl, err = nfs3.Mount(ctx, ep.String(), "/acls", nfs3.Options{Auth: nfs3.Auth{UID: uid, GID: 2000, Machine: "acl-shapes"}})
			return err
		}); err != nil {
			t.Fatalf("mount as %d: %v", uid, err)
		}
		for i := range shapes {
			name := fmt.Sprintf("f%d", i)
			fh, _, err := cl.Lookup(ctx, cl.Root, name)
			if err == nil {
				_, _, err = cl.Read(ctx, fh, make([]byte, 16), 0)
			}
			st, isStatus := nfs3.StatusOf(err)
			switch {
			case err != nil && !isStatus:
				t.Errorf("uid %d reads %s (ACL %d): %v, want an answer", uid, name, i, err)
			case reads[uid][i] && err != nil:
				t.Errorf("uid %d reads %s (ACL %d): %v, want it allowed", uid, name, i, err)
			case !reads[uid][i] && st != nfs3.ErrAcces:
				t.Errorf("uid %d reads %s (ACL %d): %v, want NFS3ERR_ACCES", uid, name, i, err)
			}
		}
		cl.Close()
	}
	if after := s.ganeshaPIDs(); !slices.Equal(after, pids) {
		t.Errorf("Ganesha %v before the reads, %v after: it died serving them", pids, after)
	}
}
