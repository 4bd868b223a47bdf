#!/usr/bin/env bash
# Builds Basin's patched NFS-Ganesha: Debian bookworm's nfs-ganesha 4.3 source
# with the patches in patches/ (see each file's header and patches/series), the
# VFS and CEPH FSALs only, installed into a private prefix. Debian's installed
# nfs-ganesha is never touched.
#
#   scripts/ganesha/build.sh [--prefix DIR] [--destdir DIR] [--force]
#
# Installs PREFIX/bin/ganesha.nfsd, PREFIX/lib/libganesha_nfsd.so* (found
# through the binary's RUNPATH), PREFIX/lib/ganesha/libfsalvfs.so and
# libfsalceph.so (the compiled-in FSAL_MODULE_LOC, so no Plugins_Dir is needed), and writes
# PREFIX/BASIN-PATCHES with the patch-set id, which Basin checks at start.
# Idempotent: PREFIX/.basin-stamp holds a hash of this script and the patch
# set; when it matches, the script does nothing.
#
# With --destdir, the build is for PREFIX (its RUNPATH and FSAL directory name
# PREFIX) but is installed into DESTDIR/PREFIX, a staging root: scripts/deb.sh
# packages it as basin-ganesha (prefix /usr/lib/basin/ganesha), and nothing of
# the machine's PREFIX is touched.
#
# Needs root (the prefix is under /usr/local), network access to the Debian
# archive the machine's apt sources name, and the build dependencies that
# scripts/setup.sh installs (GANESHA_BUILD_DEPS below).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

PATCHSET=basin-ganesha-4.3-11
PREFIX=${BASIN_GANESHA_PREFIX:-/usr/local/lib/basin/ganesha}
CACHE=${BASIN_GANESHA_CACHE:-/var/cache/basin/ganesha}
SRC_PACKAGE=nfs-ganesha
SRC_VERSION=4.3-2
ORIG=nfs-ganesha_4.3.orig.tar.gz
# From the Checksums-Sha256 of Debian's nfs-ganesha_4.3-2.dsc.
ORIG_SHA256=d4efd020edf4dfe65abfd0f0f66eb4390613360f99dce4354467ab297e0e1c0f
# Debian packages the build needs (scripts/setup.sh installs them).
GANESHA_BUILD_DEPS="gcc make patch cmake bison flex pkgconf libntirpc-dev liburcu-dev libdbus-1-dev libblkid-dev uuid-dev libcap-dev libacl1-dev libnfsidmap-dev libcephfs-dev libkrb5-dev librados-dev libwbclient-dev"

force=
DESTDIR=
while (($#)); do
  case $1 in
    --prefix) PREFIX=$2; shift 2 ;;
    --destdir) DESTDIR=$(realpath -m "$2"); shift 2 ;;
    --force) force=1; shift ;;
    --print-deps) echo "$GANESHA_BUILD_DEPS"; exit 0 ;;
    *) echo "usage: $0 [--prefix DIR] [--destdir DIR] [--force] [--print-deps]" >&2; exit 2 ;;
  esac
done
[[ $PREFIX == /* ]] || { echo "ganesha: --prefix must be absolute" >&2; exit 2; }
# Where the build lands: PREFIX itself, or PREFIX inside the staging root.
TARGET=$DESTDIR$PREFIX

mapfile -t patches < <(grep -v '^\s*\(#\|$\)' "$here/patches/series")
stamp=$( { sha256sum "$here/build.sh" "$here/../debian-source.sh" "$here/patches/series"; for p in "${patches[@]}"; do sha256sum "$here/patches/$p"; done; } \
  | sed 's/ .*\// /' | sha256sum | cut -c1-32)
if [[ -z $force && -x $TARGET/bin/ganesha.nfsd && "$(cat "$TARGET/.basin-stamp" 2>/dev/null)" == "$stamp" ]]; then
  echo "ganesha: $TARGET is up to date ($PATCHSET)"
  exit 0
fi

log() { echo "ganesha: $*"; }
die() { echo "ganesha: $*" >&2; exit 1; }

# need_packages and fetch_source (Debian's orig tarball into $CACHE).
. "$here/../debian-source.sh"
# shellcheck disable=SC2086
need_packages "run scripts/setup.sh" $GANESHA_BUILD_DEPS
# Debian's package is built without libbtrfsutil, and with it Ganesha handles
# btrfs subvolumes differently (it would add every subvolume as a filesystem).
if dpkg-query -W -f='${Status}' libbtrfsutil-dev 2>/dev/null | grep -q "ok installed"; then
  die "libbtrfsutil-dev is installed; Debian's nfs-ganesha is built without it, remove it to build a matching binary"
fi

work=$(mktemp -d /tmp/basin-ganesha-build.XXXXXX)
trap 'rm -rf "$work"' EXIT

fetch_source
log "unpacking and patching ($PATCHSET)"
tar -C "$work" -xzf "$CACHE/$ORIG"
src=$work/nfs-ganesha-4.3
[[ -d $src/src ]] || die "unexpected layout of $ORIG"
for p in "${patches[@]}"; do
  patch -d "$src" -p1 --batch --forward --quiet <"$here/patches/$p" >/dev/null || die "patch $p does not apply"
done

# Options: the VFS FSAL and the CEPH FSAL (CephFS volumes, patch 0010), with
# Debian's choices where they change what VFS
# exports do (NFSv3 and v4 with NFSACL, DBus, capabilities, blkid fsids,
# libnfsidmap, libc malloc, release build: the same -v output and log lines).
# RPCSEC_GSS with Kerberos, and MSPAC: a Kerberos principal becomes the uid
# and gid winbind gives its SID (from the ticket's PAC, through the AD
# instance's winbindd), the ids SMB gives the same user.
# POSIX ACLs in FSAL_VFS (Debian's build has none): NFS access is checked
# against the POSIX ACL, on NTFS-style volumes the one Samba derives from a
# file's NT ACL, not the mode bits alone (patches 0012 to 0014).
# Off: NLM and RQUOTA (Basin's config disables them), 9P, LTTng, the admin
# tools and other FSALs.
# Debian's hardening flags (relro, now, stack protector, fortify) as dh uses,
# and Debian's compiled-in paths (/etc/ganesha/ganesha.conf, /var/run/ganesha,
# /var/lib/nfs/ganesha), so only the binary's location differs.
log "configuring"
mkdir -p "$work/build"
start=$(date +%s)
(cd "$work/build" && cmake "$src/src" -Wno-dev \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_INSTALL_PREFIX="$PREFIX" \
  -DCMAKE_INSTALL_RPATH="$PREFIX/lib" \
  -DSYSCONFDIR=/etc -DSYSSTATEDIR=/var -DRUNTIMEDIR=/var/run/ganesha \
  -DCMAKE_C_FLAGS="-fstack-protector-strong -Wformat -Werror=format-security -D_FORTIFY_SOURCE=2" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,-z,relro -Wl,-z,now" \
  -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-z,relro -Wl,-z,now" \
  -DCMAKE_MODULE_LINKER_FLAGS="-Wl,-z,relro -Wl,-z,now" \
  -DALLOCATOR=libc \
  -DUSE_SYSTEM_NTIRPC=ON \
  -DUSE_FSAL_VFS=ON -DUSE_FSAL_XFS=OFF \
  -DUSE_FSAL_PROXY_V4=OFF -DUSE_FSAL_PROXY_V3=OFF -DUSE_FSAL_LUSTRE=OFF -DUSE_FSAL_LIZARDFS=OFF \
  -DUSE_FSAL_KVSFS=OFF -DUSE_FSAL_CEPH=ON -DUSE_FSAL_GPFS=OFF -DUSE_FSAL_GLUSTER=OFF \
  -DUSE_FSAL_NULL=OFF -DUSE_FSAL_RGW=OFF -DUSE_FSAL_MEM=OFF \
  -DUSE_GSS=ON -D_MSPAC_SUPPORT=ON -DUSE_9P=OFF -DUSE_NLM=OFF -DUSE_RQUOTA=OFF -DUSE_NFSACL3=ON \
  -DUSE_DBUS=ON -DUSE_CAPS=ON -DUSE_NFSIDMAP=ON \
  -DENABLE_VFS_POSIX_ACL=ON -DENABLE_VFS_POSIX_ACL_REQUIRED=ON \
  -DUSE_GUI_ADMIN_TOOLS=OFF -DUSE_ADMIN_TOOLS=OFF -DUSE_RADOS_RECOV=ON -DRADOS_URLS=OFF -DUSE_LTTNG=OFF \
  >"$work/cmake.log" 2>&1) || { tail -30 "$work/cmake.log" >&2; die "cmake failed"; }
grep -q "USE_BTRFSUTIL = ON" "$work/cmake.log" && die "cmake found libbtrfsutil; Debian's build has none"
# Without libcephfs cmake only warns and leaves the CEPH FSAL out.
grep -q "USE_FSAL_CEPH = ON" "$work/cmake.log" || die "cmake left FSAL_CEPH out (is libcephfs-dev installed?)"
# RPCSEC_GSS: CREATE_SESSION with GSS callback credentials decodes only with it
# (pynfs CSESS16), and Kerberos volumes need it. Clustered NFSv4 recovery on
# RADOS (the rados_ng and rados_cluster backends, ganesha-rados-grace).
grep -q "USE_GSS = ON" "$work/cmake.log" || die "cmake left GSS out (is libkrb5-dev installed?)"
grep -q "_MSPAC_SUPPORT = ON" "$work/cmake.log" || die "cmake left MSPAC out (is libwbclient-dev installed?)"
grep -q "USE_RADOS_RECOV = ON" "$work/cmake.log" || die "cmake left RADOS recovery out (is librados-dev installed?)"
grep -q "ENABLE_VFS_POSIX_ACL = ON" "$work/cmake.log" || die "cmake left VFS POSIX ACLs out (is libacl1-dev installed?)"
grep -q "USE_BLKID = ON" "$work/cmake.log" ||
  log "note: built without blkid (Debian's has it)"

log "building (nproc $(nproc))"
make -C "$work/build" -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -30 "$work/make.log" >&2; die "make failed"; }
log "built in $(($(date +%s) - start)) s"

# Install into a fresh directory and swap it in, so a failed install never
# leaves a half-written prefix behind.
staging=$TARGET.new
rm -rf "$staging"
make -C "$work/build" install DESTDIR="$work/destdir" >"$work/install.log" 2>&1 || { tail -30 "$work/install.log" >&2; die "make install failed"; }
mkdir -p "$(dirname "$TARGET")"
mv "$work/destdir$PREFIX" "$staging"
# Only what runs: the daemon, its library and the two FSALs; no config samples,
# man pages, systemd units or headers.
find "$staging" -mindepth 1 -maxdepth 1 ! -name bin ! -name lib -exec rm -rf {} +
find "$staging/bin" -mindepth 1 ! -name ganesha.nfsd ! -name ganesha-rados-grace -exec rm -rf {} +
[[ -x $staging/bin/ganesha.nfsd && -x $staging/bin/ganesha-rados-grace && -e $staging/lib/ganesha/libfsalvfs.so && -e $staging/lib/ganesha/libfsalceph.so ]] ||
  die "install lacks ganesha.nfsd, ganesha-rados-grace, libfsalvfs.so or libfsalceph.so"
echo "$PATCHSET" >"$staging/BASIN-PATCHES"
echo "$stamp" >"$staging/.basin-stamp"
rm -rf "$TARGET.old"
[[ -e $TARGET ]] && mv "$TARGET" "$TARGET.old"
mv "$staging" "$TARGET"
rm -rf "$TARGET.old"
# The binary must load its own library (RUNPATH), not Debian's /usr/lib/ganesha one.
runpath=$(readelf -d "$TARGET/bin/ganesha.nfsd" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]$/\1/p')
[[ $runpath == "$PREFIX/lib" ]] || die "ganesha.nfsd's RUNPATH is '$runpath', not $PREFIX/lib"
if [[ -z $DESTDIR ]]; then
  lib=$(ldd "$PREFIX/bin/ganesha.nfsd" | awk '/libganesha_nfsd/ {print $3}')
  [[ $lib == "$PREFIX/lib/"* ]] || die "ganesha.nfsd loads $lib, not $PREFIX/lib/libganesha_nfsd.so"
fi
log "installed $PATCHSET for $PREFIX into $TARGET ($(du -sh "$TARGET" | cut -f1))"
