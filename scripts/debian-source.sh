# Sourced by the scripts that build from a Debian source package
# (scripts/ganesha/build.sh, scripts/fio/build.sh). It defines need_packages
# and fetch_source, which call the caller's log and die; fetch_source reads
# the caller's SRC_PACKAGE, SRC_VERSION, ORIG (the orig tarball's file name),
# ORIG_SHA256, CACHE and work (a scratch directory).

# need_packages HINT PACKAGE...: dies naming those not installed, and HINT.
need_packages() {
  local hint=$1 p missing=()
  shift
  for p; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) || die "missing build dependencies: ${missing[*]} ($hint)"
}

# fetch_source puts Debian's orig tarball in $CACHE, checked against ORIG_SHA256.
# apt resolves the source package through a private deb-src twin of the
# machine's own Debian sources (so the machine's apt setup is untouched and no
# archive host is named here), and apt-helper downloads the .dsc and the orig
# tarball, checking the hashes from the signed Sources index. Only those two
# files: the .debian.tar.xz is not needed (and is not always served).
fetch_source() {
  mkdir -p "$CACHE"
  if [[ -f $CACHE/$ORIG ]] && echo "$ORIG_SHA256  $CACHE/$ORIG" | sha256sum -c --quiet 2>/dev/null; then
    return
  fi
  local apt="$work/apt" codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [[ -n $codename ]] || die "cannot tell the Debian codename from /etc/os-release"
  mkdir -p "$apt/parts" "$apt/lists/partial" "$apt/cache/archives/partial"
  # One-line sources: deb [opts] URI SUITE COMPONENTS...
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    awk -v codename="$codename" '$1 == "deb" {
        i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) != codename) next
        main = 0; for (j = i + 2; j <= NF; j++) if ($j == "main") main = 1
        if (main) { $1 = "deb-src"; print } }' "$f"
  done >"$apt/sources.list"
  # deb822 sources: stanzas of Types: deb with the release suite and main.
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk -v codename="$codename" 'BEGIN { RS = ""; ORS = "" } {
        t = s = c = 0; out = ""; n = split($0, L, "\n")
        for (i = 1; i <= n; i++) {
          l = L[i]; if (l ~ /^#/) continue
          if (l ~ /^Types:/ && (" " l " ") ~ / deb /) { t = 1; l = "Types: deb-src" }
          if (l ~ /^Suites:/ && (" " l " ") ~ (" " codename " ")) s = 1
          if (l ~ /^Components:/ && (" " l " ") ~ / main /) c = 1
          out = out l "\n" }
        if (t && s && c) print out "\n" }' "$f"
  done >"$apt/parts/basin-src.sources"
  [[ -s $apt/sources.list || -s $apt/parts/basin-src.sources ]] || die "no Debian $codename main source in /etc/apt"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/parts"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "APT::Get::Only-Source=true" -o "APT::Sandbox::User=root")
  log "resolving $SRC_PACKAGE $SRC_VERSION from Debian's archive"
  apt-get "${opts[@]}" -qq update || die "apt-get update (deb-src) failed"
  local uris
  uris=$(apt-get "${opts[@]}" -qq source --print-uris "$SRC_PACKAGE=$SRC_VERSION" 2>/dev/null) ||
    die "apt-get source --print-uris $SRC_PACKAGE=$SRC_VERSION failed"
  local uri file size hash
  while read -r uri file size hash; do
    uri=${uri//\'/}
    case $file in
      *.dsc | "$ORIG") ;;
      *) continue ;;
    esac
    log "downloading $file"
    /usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file "$uri" "$work/$file" "$hash" >/dev/null ||
      die "download of $file failed"
  done < <(grep "^'" <<<"$uris")
  [[ -f $work/$ORIG ]] || die "apt did not list $ORIG for $SRC_PACKAGE $SRC_VERSION"
  echo "$ORIG_SHA256  $work/$ORIG" | sha256sum -c --quiet || die "$ORIG does not match the pinned sha256"
  grep -q "^ $ORIG_SHA256 [0-9]* $ORIG\$" "$work"/*.dsc || die "the .dsc does not list $ORIG with the pinned sha256"
  cp "$work/$ORIG" "$work"/*.dsc "$CACHE/"
}
