#!/usr/bin/env bash
# Builds fio with its NFS engine (ioengine=nfs, a user-space NFS client through
# libnfs), which Debian's fio package leaves out: Debian bookworm's fio 3.33
# source, configured with libnfs and without the engines Basin's tests do not
# use, into a private prefix. Debian's /usr/bin/fio is never touched.
#
#   scripts/fio/build.sh [--prefix DIR] [--force] [--print-deps]
#
# Installs PREFIX/bin/fio only (no man pages, tools or scripts); libnfs comes
# from Debian's libnfs13. The end-to-end tests run it where no kernel NFS
# client is (test/e2e TestFioAnalyzeCeiling), and a user can do the same
# (docs/metrics.md, "In the terminal"). Idempotent: PREFIX/.basin-stamp
# holds a hash of this script; when it matches, the script does nothing.
#
# Needs root (the prefix is under /usr/local), network access to the Debian
# archive the machine's apt sources name, and FIO_BUILD_DEPS below
# (scripts/setup.sh --test installs them).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

PREFIX=${BASIN_FIO_PREFIX:-/usr/local/lib/basin/fio}
CACHE=${BASIN_FIO_CACHE:-/var/cache/basin/fio}
SRC_PACKAGE=fio
SRC_VERSION=3.33-3
ORIG=fio_3.33.orig.tar.gz
# From the Checksums-Sha256 of Debian's fio_3.33-3.dsc.
ORIG_SHA256=d2410e13e0f379d061d077cc5ae325835bb7c6186aa7bafc1df954cbc9b014fc
FIO_BUILD_DEPS="gcc make pkgconf libnfs-dev"

force=
while (($#)); do
  case $1 in
    --prefix) PREFIX=$2; shift 2 ;;
    --force) force=1; shift ;;
    --print-deps) echo "$FIO_BUILD_DEPS"; exit 0 ;;
    *) echo "usage: $0 [--prefix DIR] [--force] [--print-deps]" >&2; exit 2 ;;
  esac
done
[[ $PREFIX == /* ]] || { echo "fio: --prefix must be absolute" >&2; exit 2; }

stamp=$(sha256sum "$here/build.sh" "$here/../debian-source.sh" | sed 's/ .*\// /' | sha256sum | cut -c1-32)
if [[ -z $force && -x $PREFIX/bin/fio && "$(cat "$PREFIX/.basin-stamp" 2>/dev/null)" == "$stamp" ]]; then
  echo "fio: $PREFIX is up to date"
  exit 0
fi

log() { echo "fio: $*"; }
die() { echo "fio: $*" >&2; exit 1; }

# need_packages and fetch_source (Debian's orig tarball into $CACHE).
. "$here/../debian-source.sh"
# shellcheck disable=SC2086
need_packages "run scripts/setup.sh --test" $FIO_BUILD_DEPS

work=$(mktemp -d /tmp/basin-fio-build.XXXXXX)
trap 'rm -rf "$work"' EXIT

fetch_source
tar -C "$work" -xzf "$CACHE/$ORIG"
src=$work/fio-3.33
[[ -x $src/configure ]] || die "unexpected layout of $ORIG"

# The NFS engine is what this build is for: configure must find libnfs. Off:
# the engines and libraries the tests do not use (and would lengthen the build
# or pull in what the machine happens to have), and -march=native (the binary
# runs on any x86-64). Debian's hardening flags, as its package is built.
log "configuring"
start=$(date +%s)
(cd "$src" && ./configure --prefix="$PREFIX" --enable-libnfs --disable-native \
  --disable-numa --disable-rdma --disable-rados --disable-rbd --disable-http --disable-gfapi \
  --disable-pmem --disable-libzbc --disable-xnvme --disable-dfs --disable-tcmalloc \
  --extra-cflags="-fstack-protector-strong -Wformat -Werror=format-security -D_FORTIFY_SOURCE=2" \
  >"$work/configure.log" 2>&1) || { tail -30 "$work/configure.log" >&2; die "configure failed"; }
grep -q "^NFS engine *yes" "$work/configure.log" || die "configure left the NFS engine out (is libnfs-dev installed?)"
log "building fio (nproc $(nproc))"
make -C "$src" -j"$(nproc)" fio LDFLAGS="-Wl,-z,relro -Wl,-z,now" >"$work/make.log" 2>&1 ||
  { tail -30 "$work/make.log" >&2; die "make failed"; }
log "built in $(($(date +%s) - start)) s"
"$src/fio" --enghelp=nfs 2>&1 | grep -q nfs_url || die "the built fio has no nfs engine"

# Into a fresh directory, swapped in, so a failed install leaves no half-written prefix.
staging=$PREFIX.new
rm -rf "$staging"
install -D -m 0755 "$src/fio" "$staging/bin/fio"
echo "$stamp" >"$staging/.basin-stamp"
rm -rf "$PREFIX.old"
[[ -e $PREFIX ]] && mv "$PREFIX" "$PREFIX.old"
mv "$staging" "$PREFIX"
rm -rf "$PREFIX.old"
log "installed $("$PREFIX/bin/fio" --version) with the nfs engine into $PREFIX"
