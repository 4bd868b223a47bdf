package nfsraw

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// KernelHandle is a kernel file handle: its type and bytes, as name_to_handle_at
// gives them for a path on the server's host.
type KernelHandle struct {
	Type  int32
	Bytes []byte
}

// KernelHandleOf returns the kernel handle of path.
func KernelHandleOf(path string) (KernelHandle, error) {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, path, 0)
	if err != nil {
		return KernelHandle{}, fmt.Errorf("name_to_handle_at %s: %w", path, err)
	}
	return KernelHandle{h.Type(), h.Bytes()}, nil
}

// StatfsFSID returns the fsid Ganesha gives the filesystem mounted on path when it
// takes it from statfs (fsid type 4, FSIDTwoUint32): f_fsid's two words.
func StatfsFSID(path string) ([]byte, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, err
	}
	b := binary.LittleEndian.AppendUint32(nil, uint32(st.Fsid.Val[0]))
	return binary.LittleEndian.AppendUint32(b, uint32(st.Fsid.Val[1])), nil
}

// Forge returns h with its kernel handle replaced by k and, if fsid is not nil,
// its fsid replaced: a handle that claims h's export but names another object.
func Forge(h Handle, k KernelHandle, fsid []byte) []byte {
	f := h.Clone()
	f.KernelType, f.Kernel = k.Type, k.Bytes
	f.Flags = f.Flags&^0xC0 | HandleType8
	if fsid != nil {
		f.FSID = fsid
	}
	return f.Encode()
}

// Tree describes the directory trees under dirs — names, modes, sizes and file
// contents — so that a test can tell whether an attack changed anything there.
func Tree(dirs ...string) string {
	var b strings.Builder
	for _, d := range dirs {
		filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				fmt.Fprintf(&b, "%s: %v\n", p, err)
				return nil
			}
			fmt.Fprintf(&b, "%s %v %d", p, fi.Mode(), fi.Size())
			if fi.Mode().IsRegular() {
				c, _ := os.ReadFile(p)
				fmt.Fprintf(&b, " %q", c)
			}
			b.WriteByte('\n')
			return nil
		})
	}
	return b.String()
}
