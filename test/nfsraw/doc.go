// Package nfsraw is a test-only NFSv4 client and a Ganesha VFS handle codec,
// for attack tests against NFS-Ganesha (test/ganeshatest) and end-to-end tests
// of what a kernel client does (test/e2e).
//
// The client sends COMPOUNDs over one TCP connection with AUTH_SYS (uid, gid
// and groups chosen by the caller), or with RPCSEC_GSS and Kerberos (Auth.Sec,
// Krb5: krb5, krb5i or krb5p as a ticket's principal): PUTROOTFH, PUTFH, LOOKUP, LOOKUPP, GETFH,
// SAVEFH, RESTOREFH, GETATTR (type, size, fsid, fileid, mode, owner, group;
// GetSpace: space_avail, space_free, space_total), READDIR, READ and WRITE and
// SETATTR (mode, size) with a stateid (the anonymous one unless given), CREATE
// (directory or symlink), REMOVE, LINK and RENAME; and state (state.go): OPEN
// with share access and deny (CLAIM_NULL, CLAIM_FH, and CLAIM_PREVIOUS to
// reclaim), OPEN_CONFIRM, CLOSE, LOCK (a new lock owner or an existing one,
// reclaim or not), LOCKT and LOCKU, and RECLAIM_COMPLETE. Dial speaks NFSv4.0;
// Dial41 speaks NFSv4.1 as a kernel client does (EXCHANGE_ID, CREATE_SESSION,
// RECLAIM_COMPLETE, then a SEQUENCE before every COMPOUND; session.go), and
// Dial41With and Reestablish let a client with a fixed owner and verifier come
// back to a restarted server and reclaim. Compound returns the nfsstat4 of the
// first failing op; handles and names go out as given. The XDR and ONC RPC
// wire format comes from internal/oncrpc.
//
// # Ganesha VFS handle layout (nfs-ganesha 4.3, FSAL_VFS, Linux, x86-64)
//
// Found in src/include/nfs_fh.h, src/support/nfs_filehandle_mgmt.c and
// src/FSAL/FSAL_VFS/os/linux/handle_syscalls.c, and checked against handles a
// running server hands out for btrfs subvolumes:
//
//	offset size  field
//	0      1     fhversion     0x43 (GANESHA_FH_VERSION)
//	1      1     fhflags1      0x00 here (0x40, FH_FSAL_BIG_ENDIAN, on big-endian hosts)
//	2      2     export id     big-endian (htons), the export's Export_Id
//	4      1     fs_len        length of the VFS handle that follows
//	5      fs_len VFS handle:
//	  +0   1     flags         low 5 bits: fsid type (0 none, 1 one u64,
//	                           2 major u64, 3 two u64 = a blkid UUID,
//	                           4 two u32 = statfs f_fsid, 5 device major/minor);
//	                           0x20 dummy (fsid only, nothing else follows);
//	                           top 2 bits: width of the kernel handle type
//	                           (0x40 one byte, 0x80 two, 0xC0 four)
//	  +1   0/8/16 fsid         host byte order (little-endian); for type 4
//	                           two u32: f_fsid.val[0], f_fsid.val[1]
//	  +..  1/2/4 handle type   struct file_handle.handle_type, little-endian
//	  +..  rest  kernel handle struct file_handle.f_handle
//	v3 only: zero padding to a multiple of 4 bytes (nfs3_sizeof_handle); the
//	server checks the v3 length equals that padded size. v4 handles are
//	5+fs_len bytes, unpadded.
//
// On btrfs, Ganesha takes the fsid of a mounted subvolume from statfs (type
// 4): blkid cannot name the anonymous device a subvolume mount has, and btrfs
// folds the subvolume id into f_fsid, so each mounted subvolume has its own
// fsid. name_to_handle_at gives handle type 0x4d (FILEID_BTRFS_WITHOUT_PARENT)
// and a 20-byte struct btrfs_fid, little-endian: objectid u64 (the inode
// number), root_objectid u64 (the subvolume id: 5 is the top level, the first
// subvolume made is 256), generation u32. Types 0x4e and 0x4f add the parent's
// objectid u64 and generation u32 (and its root objectid u64). The v3 handle
// Ganesha 4.3 gave for a file (inode 257, generation 7) in subvolume 256,
// export 1:
//
//	43 00 0001 1e | 44 8623cc12 d3dea48b | 4d | 0101000000000000 0001000000000000 07000000 | 00
//
// (flags 0x44 = one-byte type | fsid type 4; 30 VFS bytes; one pad byte to 36;
// the v4 handle is the same 35 bytes without the pad).
package nfsraw
