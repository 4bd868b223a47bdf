#!/usr/bin/env bash
# Builds Basin's Debian packages from the tree (`make deb`), into $DIST (dist/):
#
#   basin_VERSION_ARCH.deb          /usr/bin/basin, the basin.service unit,
#                                   /etc/basin/basin.conf (a conffile), the docs
#   basin-ganesha_VERSION_ARCH.deb  Basin's NFS-Ganesha (scripts/ganesha/build.sh)
#                                   in /usr/lib/basin/ganesha
#
# VERSION (environment or make variable) defaults to 0.<commit count>+g<hash>
# from git. basin depends on basin-ganesha of the same version, and on what it
# runs (btrfs-progs, iproute2, rpcbind, dbus, Samba…); both packages' shared
# library dependencies are computed from the built binaries by dpkg-shlibdeps.
# Ganesha's build is kept in build/ganesha-root and reused while it is current.
# DEB_XZ_LEVEL (0-9, default 6 as dpkg-deb's) is the packages' xz level: the
# package test builds at 1, where 6 spends ~24 s of two cores on basin alone.
#
# Needs, as root: Go, git, dpkg-dev and Ganesha's build dependencies
# (scripts/setup.sh --deb installs them), and Debian's archive for Ganesha's
# source the first time.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
DIST=${DIST:-dist}
XZ_LEVEL=${DEB_XZ_LEVEL:-6}
GANESHA_PREFIX=/usr/lib/basin/ganesha
MAINTAINER="Basin maintainers <maintainers@basin.invalid>"

die() { echo "deb: $*" >&2; exit 1; }
log() { echo "deb: $*"; }

for tool in dpkg-deb dpkg-shlibdeps git "$GO"; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/setup.sh --deb installs what make deb needs)"
done
git rev-parse --git-dir >/dev/null 2>&1 || die "not a git tree: give VERSION=…"
commit=$(git rev-parse HEAD)
if [[ -z ${VERSION:-} ]]; then
  VERSION=0.$(git rev-list --count HEAD)+g$(git rev-parse --short=12 HEAD)
fi
dpkg --validate-version "$VERSION" 2>/dev/null || die "VERSION $VERSION is not a Debian version"
[[ $XZ_LEVEL =~ ^[0-9]$ ]] || die "DEB_XZ_LEVEL $XZ_LEVEL is not an xz level (0-9)"
arch=$(dpkg --print-architecture)
# Reproducible: file times and the changelog's date are the commit's.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")

work=build/deb
rm -rf "$work"
pkgs=$work/debian # dpkg-shlibdeps finds package trees as debian/<package>
b=$pkgs/basin g=$pkgs/basin-ganesha
mkdir -p "$b/DEBIAN" "$g/DEBIAN" "$DIST"

# --- basin ---------------------------------------------------------------------
log "building basin $VERSION"
# Position-independent and stripped, as Debian builds binaries (panics still
# name functions and lines).
GOFLAGS=-buildvcs=false "$GO" build -trimpath -buildmode=pie -ldflags "-s -w -X main.version=$VERSION" -o "$b/usr/bin/basin" ./cmd/basin
install -D -m 0644 packaging/deb/basin.service "$b/lib/systemd/system/basin.service"
install -D -m 0644 packaging/deb/basin.conf "$b/etc/basin/basin.conf"
doc=$b/usr/share/doc/basin
install -D -m 0644 README.md "$doc/README.md"
mkdir -p "$doc/docs"
cp -r docs/. "$doc/docs/"
# The years of the project's history, from git.
first=$(git log --reverse --format=%ad --date=format:%Y | sed -n '1p') last=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)
years=$first
[[ $first == "$last" ]] || years=$first-$last
sed "s/@YEARS@/$years/" packaging/deb/basin.copyright >"$doc/copyright"
chmod 0644 "$doc/copyright"
# The Go modules compiled into the binary, and Go's own library: their licenses.
while read -r mod dir; do
  [[ -n $dir ]] || continue
  for f in "$dir"/LICENSE* "$dir"/LICENCE* "$dir"/COPYING* "$dir"/NOTICE* "$dir"/PATENTS*; do
    [[ -f $f ]] && install -D -m 0644 "$f" "$doc/licenses/$mod/$(basename "$f")"
  done
done < <(GOFLAGS=-buildvcs=false "$GO" list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Dir}}{{end}}{{end}}' ./cmd/basin | sort -u)
install -D -m 0644 "$("$GO" env GOROOT)/LICENSE" "$doc/licenses/go/LICENSE"
for p in postinst prerm postrm; do
  install -m 0755 "packaging/deb/basin.$p" "$b/DEBIAN/$p"
done
echo /etc/basin/basin.conf >"$b/DEBIAN/conffiles"

# --- basin-ganesha ---------------------------------------------------------------
scripts/ganesha/build.sh --prefix "$GANESHA_PREFIX" --destdir build/ganesha-root
mkdir -p "$g$(dirname "$GANESHA_PREFIX")"
cp -a "build/ganesha-root$GANESHA_PREFIX" "$g$GANESHA_PREFIX"
rm -f "$g$GANESHA_PREFIX/.basin-stamp"
patchset=$(cat "$g$GANESHA_PREFIX/BASIN-PATCHES")
# Stripped as dh_strip does (the build keeps debugging information).
strip --remove-section=.comment --remove-section=.note "$g$GANESHA_PREFIX/bin/ganesha.nfsd"
find "$g$GANESHA_PREFIX/lib" -type f -name '*.so*' -exec strip --remove-section=.comment --remove-section=.note --strip-unneeded {} +
gdoc=$g/usr/share/doc/basin-ganesha
install -D -m 0644 packaging/deb/basin-ganesha.copyright "$gdoc/copyright"
# The one part of Ganesha under another license than LGPL-3+, as its source has it.
orig=${BASIN_GANESHA_CACHE:-/var/cache/basin/ganesha}/nfs-ganesha_4.3.orig.tar.gz
tar -xzOf "$orig" nfs-ganesha-4.3/src/cidr/LICENSE >"$gdoc/LICENSE.cidr"
chmod 0644 "$gdoc/LICENSE.cidr"

# --- changelogs, control files -----------------------------------------------
# A version without a Debian revision is a native package's: changelog.gz.
changelog_name=changelog.gz
[[ $VERSION == *-* ]] && changelog_name=changelog.Debian.gz
changelog() { # package, lines of what changed
  local pkg=$1
  shift
  { printf '%s (%s) unstable; urgency=medium\n\n' "$pkg" "$VERSION"
    printf '  * %s\n' "$1"
    shift
    (($#)) && printf '    %s\n' "$@"
    printf '\n -- %s  %s\n' "$MAINTAINER" "$date"
  } | gzip -9n >"$pkgs/$pkg/usr/share/doc/$pkg/$changelog_name"
}
changelog basin "Built from Basin's commit $commit."
changelog basin-ganesha "Debian's nfs-ganesha 4.3-2 with Basin's patch set $patchset," \
  "built from Basin's commit $commit."

# dpkg-shlibdeps: the shared libraries the binaries link, as Debian package
# dependencies. libganesha_nfsd is basin-ganesha's own (found through the
# binary's RUNPATH inside the package tree).
printf 'Source: basin\n\nPackage: basin\nArchitecture: any\n\nPackage: basin-ganesha\nArchitecture: any\n' >"$work/debian/control"
shlibs() { # package, files…
  local pkg=$1
  shift
  (cd "$work" && dpkg-shlibdeps -O -x"$pkg" "${@#"$work/"}") | sed -n 's/^shlibs:Depends=//p'
}
basin_shlibs=$(shlibs basin "$b/usr/bin/basin")
mapfile -t elves < <(find "$g$GANESHA_PREFIX" -type f \( -name ganesha.nfsd -o -name '*.so*' \))
ganesha_shlibs=$(shlibs basin-ganesha "${elves[@]}")
[[ -n $ganesha_shlibs ]] || die "dpkg-shlibdeps found no dependencies for Ganesha"

# What basin runs: btrfs-progs (btrfs, mkfs.btrfs), mount (mount, umount,
# losetup), iproute2 (ip), rpcbind,
# dbus (dbus-daemon), Samba's smbd, samba-dcerpcd and smbstatus (samba),
# winbindd (winbind), its NSS module (libnss-winbind), VFS modules
# (samba-vfs-modules), net, smbcontrol and testparm (samba-common-bin),
# tdbdump (tdb-tools), nft (nftables: the SMB endpoints' NAT), and the
# patched Ganesha of this very build. Not
# util-linux (nsenter, unshare, setpriv): it is essential, always there.
depends="${basin_shlibs:+$basin_shlibs, }basin-ganesha (= $VERSION), btrfs-progs, mount, iproute2, rpcbind, dbus, samba, winbind, libnss-winbind, samba-vfs-modules, samba-common-bin, tdb-tools, nftables"
control() { # package, depends, recommends, description
  local dir=$pkgs/$1
  printf 'Package: %s\nSource: basin\nVersion: %s\nArchitecture: %s\nMaintainer: %s\nInstalled-Size: %s\nDepends: %s\n%sSection: net\nPriority: optional\nDescription: %s\n' \
    "$1" "$VERSION" "$arch" "$MAINTAINER" "$(du -sk --exclude=DEBIAN "$dir" | cut -f1)" "$2" "${3:+Recommends: $3
}" "$4" >"$dir/DEBIAN/control"
  (cd "$dir" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) >"$dir/DEBIAN/md5sums"
}
control basin "$depends" "e2fsprogs" "self-hosted cloud volumes service (NFS and SMB)
 Basin hands out NFS and SMB volumes from storage pools with service levels,
 snapshots, clones and Active Directory, and speaks the NetApp Volumes v1 REST
 API. This package has basin (the service and its CLI), the basin.service unit
 and /etc/basin/basin.conf."
control basin-ganesha "$ganesha_shlibs" "" "Basin's hardened NFS-Ganesha
 Debian's NFS-Ganesha 4.3 with Basin's security patches
 ($patchset), the VFS FSAL only, in a private prefix
 (/usr/lib/basin/ganesha). Basin runs it in its sandboxes; nothing else
 should."

for p in basin basin-ganesha; do
  dpkg-deb --root-owner-group -Zxz -z"$XZ_LEVEL" --build "$pkgs/$p" "$DIST/${p}_${VERSION}_${arch}.deb" >/dev/null
  log "$DIST/${p}_${VERSION}_${arch}.deb ($(du -h "$DIST/${p}_${VERSION}_${arch}.deb" | cut -f1)): Depends: $(dpkg-deb -f "$DIST/${p}_${VERSION}_${arch}.deb" Depends)"
done
# For make install: the two files just built.
realpath "$DIST/basin_${VERSION}_${arch}.deb" "$DIST/basin-ganesha_${VERSION}_${arch}.deb" >"$work/debs"
