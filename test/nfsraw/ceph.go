package nfsraw

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// CephNoSnap is CEPH_NOSNAP, the snapid of the live (head) tree.
const CephNoSnap = 0xfffffffffffffffe

// A FSAL_CEPH handle on the wire: a byte of version (0x43), one of flags, the
// export id (big-endian u16), the length of what follows (24), then the inode
// number, the snapid and the filesystem id, each little-endian u64.
const (
	cephInoOff  = 5
	cephSnapOff = 13
	cephLen     = 29
)

// IsCeph reports whether h is a FSAL_CEPH handle.
func IsCeph(h []byte) bool { return len(h) >= cephLen && h[0] == 0x43 && h[4] == 24 }

// ForgeCeph is FSAL_CEPH handle h naming another inode and snapid.
func ForgeCeph(h []byte, ino, snap uint64) ([]byte, error) {
	if !IsCeph(h) {
		return nil, fmt.Errorf("not a FSAL_CEPH handle: %x", h)
	}
	f := bytes.Clone(h)
	binary.LittleEndian.PutUint64(f[cephInoOff:], ino)
	binary.LittleEndian.PutUint64(f[cephSnapOff:], snap)
	return f, nil
}

// CephIno and CephSnap are the inode number and snapid in a FSAL_CEPH handle.
func CephIno(h []byte) uint64  { return binary.LittleEndian.Uint64(h[cephInoOff:]) }
func CephSnap(h []byte) uint64 { return binary.LittleEndian.Uint64(h[cephSnapOff:]) }
