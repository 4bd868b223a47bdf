#!/usr/bin/env bash
# Installs what Basin and its tests need on a fresh Debian 12 machine (run as root).
# Idempotent: it skips what is already there.
#   scripts/setup.sh          system packages for running Basin, and Basin's
#                             patched NFS-Ganesha (scripts/ganesha/build.sh)
#   scripts/setup.sh --test   plus the Python venv, the Node client (npm ci in
#                             test/clients/node) and the Go client module's
#                             dependencies for the end-to-end tests, fio with
#                             its NFS engine (scripts/fio/build.sh), and what
#                             the package test (test/pkg) needs
#   scripts/setup.sh --deb    only what `make deb` needs: dpkg-dev and Ganesha's
#                             build dependencies (scripts/deb.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case $mode in
"" | --test | --deb) ;;
*) echo "usage: $0 [--test | --deb]" >&2; exit 2 ;;
esac

need_pkgs=()
# make deb: dpkg-deb, dpkg-shlibdeps, strip (dpkg-dev), the version from git.
# The package test builds packages, and checks the unit with systemd-analyze
# (the systemd package; installing it starts nothing where systemd is not PID 1).
if [[ $mode == --deb || $mode == --test ]]; then
  command -v dpkg-shlibdeps >/dev/null || need_pkgs+=(dpkg-dev)
  command -v git >/dev/null || need_pkgs+=(git)
fi
[[ $mode == --test ]] && ! command -v systemd-analyze >/dev/null && need_pkgs+=(systemd)
if [[ $mode != --deb ]]; then
  command -v btrfs >/dev/null || need_pkgs+=(btrfs-progs)
  command -v losetup >/dev/null || need_pkgs+=(util-linux)
  command -v mkfs.btrfs >/dev/null || need_pkgs+=(btrfs-progs)
  command -v ip >/dev/null || need_pkgs+=(iproute2)
  command -v ganesha.nfsd >/dev/null || need_pkgs+=(nfs-ganesha nfs-ganesha-vfs)
  [[ -e /usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so || -n $(find /usr/lib -name 'libfsalvfs.so*' 2>/dev/null | head -1) ]] || need_pkgs+=(nfs-ganesha-vfs)
  command -v rpcbind >/dev/null || need_pkgs+=(rpcbind)
  command -v dbus-daemon >/dev/null || need_pkgs+=(dbus)
  command -v nsenter >/dev/null || need_pkgs+=(util-linux)
  # SMB volumes: each network's sandbox runs Samba instances of its own (smbd,
  # samba-dcerpcd and its VFS modules, winbindd and its NSS module, net and
  # smbcontrol); nothing of the host's Samba configuration is used.
  command -v net >/dev/null || need_pkgs+=(samba-common-bin)
  command -v smbd >/dev/null || need_pkgs+=(samba)
  command -v winbindd >/dev/null || need_pkgs+=(winbind)
  # nft: a sandbox's SMB endpoints reach their smbd through NAT.
  command -v nft >/dev/null || need_pkgs+=(nftables)
  for p in libnss-winbind samba-vfs-modules; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_pkgs+=("$p")
  done
  # CephFS volumes (--storage cephfs://...): the ceph CLI and its Python
  # bindings drive the cluster's volumes module; ceph-fuse mounts a volume for
  # Samba and for the node's own checks; nft guards each sandbox's link to the
  # cluster (--ceph-network). None of them starts a daemon (nftables' own
  # service stays disabled: Basin loads rules into sandboxes only).
  for p in ceph-common ceph-fuse python3-rados nftables; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_pkgs+=("$p")
  done
fi
# Build dependencies of Basin's patched Ganesha (scripts/ganesha/build.sh).
for p in $(scripts/ganesha/build.sh --print-deps); do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_pkgs+=("$p")
done
if [[ $mode == --test ]]; then
  python3 -c 'import ensurepip, venv' 2>/dev/null || need_pkgs+=(python3-venv)
  command -v nfs-ls >/dev/null || need_pkgs+=(libnfs-utils)
  [[ -e /usr/include/nfsc/libnfs.h ]] || need_pkgs+=(libnfs-dev)
  command -v gcc >/dev/null || need_pkgs+=(gcc)
  command -v fio >/dev/null || need_pkgs+=(fio)
  # make generate / check-generated: protoc and the well-known types' .proto
  # files (internal/netapppb/gen.sh); its Go plugins are go.mod's tools.
  command -v protoc >/dev/null || need_pkgs+=(protobuf-compiler)
  [[ -e /usr/include/google/protobuf/timestamp.proto ]] || need_pkgs+=(libprotobuf-dev)
  # fio with its NFS engine, built from Debian's source (scripts/fio/build.sh).
  for p in $(scripts/fio/build.sh --print-deps); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_pkgs+=("$p")
  done
  # A real Prometheus scrapes Basin's /metrics in the end-to-end metrics test.
  command -v prometheus >/dev/null || need_pkgs+=(prometheus)
  # Headless Chromium drives the web console in the end-to-end console test
  # (test/e2e TestConsole, through the DevTools protocol: no chromium-driver).
  command -v chromium >/dev/null || need_pkgs+=(chromium)
  # The googleapis Node client's end-to-end test (test/clients/node).
  command -v npm >/dev/null || need_pkgs+=(npm)
  command -v smbpasswd >/dev/null || need_pkgs+=(samba-common-bin)
  # The PostgreSQL store's tests start private servers of their own
  # (internal/store/pgtest); nothing uses the cluster the package creates.
  [[ -n $(ls /usr/lib/postgresql/*/bin/postgres 2>/dev/null) ]] || need_pkgs+=(postgresql-15)
  # The Samba AD DC test fixture (test/addc) and AD-joined SMB tests: the DC's
  # provisioning data and modules, winbind (samba execs it), client tools
  # (smbclient, ldbsearch) and smbtorture.
  for p in samba-ad-provision samba-dsdb-modules smbclient ldb-tools samba-testsuite; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_pkgs+=("$p")
  done
  # A throwaway MIT KDC and MIT's GSS-API as the peer of the Kerberos client's
  # interop tests (internal/krb5gss/mittest); their config is the test's own.
  for p in krb5-kdc krb5-admin-server python3-gssapi; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_pkgs+=("$p")
  done
  # The private Ceph cluster of the CephFS tests (test/ceph): one monitor,
  # manager, OSD on a sparse file and MDS, all state in a temporary directory.
  for p in ceph-mon ceph-mgr ceph-osd ceph-mds; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_pkgs+=("$p")
  done
fi
# What setup started or made that must not outlive it (see cleanup).
made_policy= warm_pid=
cleanup() {
  [[ -n $made_policy ]] && rm -f /usr/sbin/policy-rc.d
  [[ -n $warm_pid ]] && kill -- "-$warm_pid" 2>/dev/null
  return 0
}
trap cleanup EXIT
if ((${#need_pkgs[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: need root to install ${need_pkgs[*]}" >&2
    exit 1
  fi
  # A fresh machine: while apt, the Ganesha and fio builds and the client
  # installs below run, compile Basin and its tests at low priority, as make
  # test compiles them next (make build and lint, whose go vet covers the Go
  # client module, and the test binaries, linked and not run: about 7 minutes
  # of 2 cores from a cold Go cache). This only fills the build cache: its
  # failures are the real build's to report; setup waits for it at the end,
  # so no test runs beside it.
  if [[ $mode == --test ]] && command -v go >/dev/null; then
    warm_log=$(mktemp /tmp/basin-setup-gowarm.XXXXXX)
    setsid nice -n 19 bash -c 'make --no-print-directory build lint && go test -count=1 -exec /bin/true ./...' >"$warm_log" 2>&1 &
    warm_pid=$!
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Packages such as samba would start system daemons; the tests start their own.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
  fi
  # libnss-winbind's postinst adds winbind to the host's /etc/nsswitch.conf. The
  # host needs none of it (a Samba sandbox binds its own file over it):
  # put the host's back.
  nss_saved=$(mktemp)
  [[ -f /etc/nsswitch.conf ]] && cp -p /etc/nsswitch.conf "$nss_saved"
  # krb5-kdc brings krb5-config, which writes a host /etc/krb5.conf (for
  # MIT's realm) when there is none: the host needs none, and it would apply
  # to every Kerberos tool that is not given KRB5_CONFIG.
  had_krb5_conf=; [[ -e /etc/krb5.conf ]] && had_krb5_conf=1
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
  if [[ -s $nss_saved ]] && ! cmp -s "$nss_saved" /etc/nsswitch.conf; then cp -p "$nss_saved" /etc/nsswitch.conf; fi
  rm -f "$nss_saved"
  [[ -z $had_krb5_conf ]] && rm -f /etc/krb5.conf
  if [[ -n $made_policy ]]; then rm -f /usr/sbin/policy-rc.d; made_policy=; fi
  # Nor should the host's own Samba services start at the next boot: Basin's run
  # in its sandboxes.
  if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
    systemctl disable smbd nmbd winbind samba-ad-dc krb5-kdc krb5-admin-server >/dev/null 2>&1 || true
  fi
fi
command -v go >/dev/null || { echo "setup: Go 1.26 or newer is required (https://go.dev/dl/)" >&2; exit 1; }
# make deb builds Ganesha for the package's prefix itself (scripts/deb.sh).
[[ $mode == --deb ]] && exit 0
# Basin's NFS-Ganesha: Debian's 4.3 with Basin's security patches, in a private
# prefix (/usr/local/lib/basin/ganesha); a no-op when already built.
if [[ $(id -u) -eq 0 ]]; then
  scripts/ganesha/build.sh
else
  echo "setup: not root, skipping scripts/ganesha/build.sh" >&2
fi
modprobe btrfs 2>/dev/null || true
grep -qw btrfs /proc/filesystems || { echo "setup: this kernel has no btrfs support" >&2; exit 1; }

if [[ $mode == --test ]]; then
  # fio with the NFS engine, in /usr/local/lib/basin/fio (Debian's /usr/bin/fio
  # has none); the end-to-end tests run it on client hosts. A no-op when built.
  if [[ $(id -u) -eq 0 ]]; then
    scripts/fio/build.sh
  else
    echo "setup: not root, skipping scripts/fio/build.sh" >&2
  fi
  req=test/e2e/python/requirements.txt
  stamp=.venv/.installed-$(sha256sum "$req" | cut -c1-16)
  if [[ ! -f $stamp ]]; then
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check -r "$req"
    touch "$stamp"
  fi
  # googleapis for Node, exactly as package-lock.json pins it.
  lock=test/clients/node/package-lock.json
  stamp=test/clients/node/node_modules/.installed-$(sha256sum "$lock" | cut -c1-16)
  if [[ ! -f $stamp ]]; then
    npm ci --prefix test/clients/node --no-audit --no-fund --loglevel=error
    touch "$stamp"
  fi
  # protoc-gen-go and protoc-gen-go-grpc, as go.mod's tool directives pin them.
  go build -o /dev/null tool
  # google.golang.org/api for the Go client's module (test/clients/go).
  (cd test/clients/go && go mod download)
fi
if [[ -n $warm_pid ]]; then
  echo "setup: waiting for the Go build cache's warm-up"
  if wait "$warm_pid"; then
    rm -f "$warm_log"
  else
    echo "setup: the warm-up failed (its output: $warm_log); make test's own build will say why" >&2
  fi
  warm_pid=
fi
