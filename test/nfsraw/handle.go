package nfsraw

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Ganesha's wrapper and VFS handle constants (see the package doc).
const (
	GaneshaFHVersion = 0x43
	fhWrapperLen     = 5

	HandleType8     = 0x40
	HandleType16    = 0x80
	HandleType32    = 0xC0
	handleTypeMask  = 0xC0
	HandleDummy     = 0x20
	handleFSIDMask  = 0x1F
	FSIDNoType      = 0
	FSIDOneUint64   = 1
	FSIDMajor64     = 2
	FSIDTwoUint64   = 3
	FSIDTwoUint32   = 4
	FSIDDevice      = 5
	nfs3MaxHandle   = 64
	nfs4MaxHandle   = 128
	btrfsNoParent   = 0x4d // FILEID_BTRFS_WITHOUT_PARENT
	btrfsWithParent = 0x4e // FILEID_BTRFS_WITH_PARENT
	btrfsParentRoot = 0x4f // FILEID_BTRFS_WITH_PARENT_ROOT
	BtrfsTopLevelID = 5    // BTRFS_FS_TREE_OBJECTID: the top-level subvolume
)

// Handle is a Ganesha NFS file handle around a VFS FSAL handle, split into its
// parts. Parse fills it from wire bytes; Encode makes wire bytes from it, so a
// test can change any part and send the result.
type Handle struct {
	// V3 says the handle is (to be) an NFSv3 one: its length is padded to a
	// multiple of 4. NFSv4 handles are not padded.
	V3 bool
	// The Ganesha wrapper.
	FHVersion byte   // GaneshaFHVersion
	FHFlags   byte   // 0 on little-endian hosts
	ExportID  uint16 // the export's Export_Id, big-endian on the wire
	// The VFS handle.
	Flags      byte   // fsid type | handle-type width | dummy bit
	FSID       []byte // 0, 8 or 16 bytes per the fsid type
	KernelType int32  // struct file_handle.handle_type
	Kernel     []byte // struct file_handle.f_handle
	// Pad is what followed the VFS handle in a v3 handle (padding).
	Pad []byte
}

// FSIDType is the fsid type held in Flags.
func (h Handle) FSIDType() int { return int(h.Flags & handleFSIDMask) }

// Dummy says the handle is a "dummy" one: an fsid and no kernel handle.
func (h Handle) Dummy() bool { return h.Flags&HandleDummy != 0 }

func fsidLen(t int) (int, error) {
	switch t {
	case FSIDNoType:
		return 0, nil
	case FSIDOneUint64, FSIDMajor64, FSIDTwoUint32, FSIDDevice:
		return 8, nil
	case FSIDTwoUint64:
		return 16, nil
	}
	return 0, fmt.Errorf("fsid type %d unknown", t)
}

// FSIDTwoUint32 returns the major and minor of a FSIDTwoUint32 or FSIDDevice
// fsid (host byte order, little-endian on x86).
func (h Handle) FSIDTwoUint32() (major, minor uint32, ok bool) {
	if len(h.FSID) != 8 || (h.FSIDType() != FSIDTwoUint32 && h.FSIDType() != FSIDDevice) {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint32(h.FSID), binary.LittleEndian.Uint32(h.FSID[4:]), true
}

// ParseHandle splits a Ganesha VFS handle (v3 or v4).
func ParseHandle(b []byte, v3 bool) (Handle, error) {
	h := Handle{V3: v3}
	if len(b) < fhWrapperLen+1 {
		return h, errors.New("handle: too short")
	}
	h.FHVersion, h.FHFlags = b[0], b[1]
	h.ExportID = binary.BigEndian.Uint16(b[2:4])
	n := int(b[4])
	if n == 0 || fhWrapperLen+n > len(b) {
		return h, errors.New("handle: fs_len beyond the handle")
	}
	vfs := b[fhWrapperLen : fhWrapperLen+n]
	h.Pad = append([]byte(nil), b[fhWrapperLen+n:]...)
	h.Flags = vfs[0]
	fl, err := fsidLen(h.FSIDType())
	if err != nil {
		return h, err
	}
	if 1+fl > len(vfs) {
		return h, errors.New("handle: fsid beyond the handle")
	}
	h.FSID = append([]byte(nil), vfs[1:1+fl]...)
	rest := vfs[1+fl:]
	if h.Dummy() {
		return h, nil
	}
	var tl int
	switch h.Flags & handleTypeMask {
	case HandleType8:
		tl = 1
	case HandleType16:
		tl = 2
	case HandleType32:
		tl = 4
	default:
		return h, errors.New("handle: no handle-type width")
	}
	if tl > len(rest) {
		return h, errors.New("handle: type beyond the handle")
	}
	switch tl {
	case 1:
		h.KernelType = int32(rest[0])
	case 2:
		h.KernelType = int32(int16(binary.LittleEndian.Uint16(rest)))
	case 4:
		h.KernelType = int32(binary.LittleEndian.Uint32(rest))
	}
	h.Kernel = append([]byte(nil), rest[tl:]...)
	return h, nil
}

// Encode makes wire bytes from h: the VFS part from Flags, FSID, KernelType
// (in the width Flags says) and Kernel, wrapped and, for V3, padded.
func (h Handle) Encode() []byte {
	vfs := []byte{h.Flags}
	vfs = append(vfs, h.FSID...)
	if !h.Dummy() {
		switch h.Flags & handleTypeMask {
		case HandleType8:
			vfs = append(vfs, byte(h.KernelType))
		case HandleType16:
			vfs = binary.LittleEndian.AppendUint16(vfs, uint16(h.KernelType))
		case HandleType32:
			vfs = binary.LittleEndian.AppendUint32(vfs, uint32(h.KernelType))
		}
		vfs = append(vfs, h.Kernel...)
	}
	b := []byte{h.FHVersion, h.FHFlags, byte(h.ExportID >> 8), byte(h.ExportID), byte(len(vfs))}
	b = append(b, vfs...)
	if h.V3 {
		for len(b)%4 != 0 && len(b) < nfs3MaxHandle {
			b = append(b, 0)
		}
	}
	return b
}

// Btrfs is a btrfs kernel file handle (struct btrfs_fid, little-endian):
// objectid, root_objectid (the subvolume) and generation, and for the
// with-parent types the parent's objectid and generation (and root).
type Btrfs struct {
	ObjectID, RootObjectID uint64
	Generation             uint32
	ParentObjectID         uint64
	ParentGeneration       uint32
	ParentRootObjectID     uint64
}

// Btrfs decodes h.Kernel as a btrfs handle, if KernelType is one.
func (h Handle) Btrfs() (Btrfs, bool) {
	k := h.Kernel
	var b Btrfs
	need := map[int32]int{btrfsNoParent: 20, btrfsWithParent: 32, btrfsParentRoot: 40}[h.KernelType]
	if need == 0 || len(k) < need {
		return b, false
	}
	b.ObjectID = binary.LittleEndian.Uint64(k)
	b.RootObjectID = binary.LittleEndian.Uint64(k[8:])
	b.Generation = binary.LittleEndian.Uint32(k[16:])
	if need >= 32 {
		b.ParentObjectID = binary.LittleEndian.Uint64(k[20:])
		b.ParentGeneration = binary.LittleEndian.Uint32(k[28:])
	}
	if need >= 40 {
		b.ParentRootObjectID = binary.LittleEndian.Uint64(k[32:])
	}
	return b, true
}

// SetBtrfs replaces h.Kernel with b, keeping h's btrfs handle type (its
// length).
func (h *Handle) SetBtrfs(b Btrfs) {
	k := binary.LittleEndian.AppendUint64(nil, b.ObjectID)
	k = binary.LittleEndian.AppendUint64(k, b.RootObjectID)
	k = binary.LittleEndian.AppendUint32(k, b.Generation)
	if h.KernelType == btrfsWithParent || h.KernelType == btrfsParentRoot {
		k = binary.LittleEndian.AppendUint64(k, b.ParentObjectID)
		k = binary.LittleEndian.AppendUint32(k, b.ParentGeneration)
	}
	if h.KernelType == btrfsParentRoot {
		k = binary.LittleEndian.AppendUint64(k, b.ParentRootObjectID)
	}
	h.Kernel = k
}

// Clone returns a deep copy of h.
func (h Handle) Clone() Handle {
	c := h
	c.FSID = append([]byte(nil), h.FSID...)
	c.Kernel = append([]byte(nil), h.Kernel...)
	c.Pad = append([]byte(nil), h.Pad...)
	return c
}
