#!/usr/bin/env bash
# Downloads (apt-get download: nothing is installed) the Debian packages strata's build and tests
# need beyond a compiler, CMake and ninja (scripts/packages.sh, strata_library_packages) with
# their run-time dependency closure, for a GPU machine that has none of them and no network:
# scripts/gpu-check.sh unpacks them into a prefix there (docs/gpu.md, The bundle).
#   scripts/gpu-bundle.sh [DIR]      (default .gpu-bundle/ of this checkout, ignored by git)
# Not bundled, since the GPU machine has them or nothing there uses them:
#   - what compiles strata there: the closure of Debian's g++ package (glibc, libstdc++, libgcc,
#     libgomp, binutils, zlib...). nvcc needs a host compiler, and older copies of its run-time
#     libraries on LD_LIBRARY_PATH would shadow the ones that compiler's programs need;
#   - these dependencies and whatever only they need (LEAVES below).
# DIR/MANIFEST lists each package (name, version, bytes), the total, the highest GLIBC_ and
# GLIBCXX_ symbol versions the bundled programs and libraries need (objdump -T), and the
# libraries they expect from the machine. Over 48 MiB, or a package that cannot be had: refused
# with the reason (exit 1), before anything in DIR is replaced. An up-to-date DIR is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/packages.sh
readonly DIR=${1:-.gpu-bundle} LIMIT=$((48 * 1024 * 1024))
readonly LEAVES=(
  gfortran-12       # Open MPI's Fortran wrapper (mpifort): strata has no Fortran
  openssh-client    # mpirun starts ranks on other hosts through it; the GPU check runs on one
  automake          # libtool's build machinery (libltdl-dev depends on it)
  adduser           # libibverbs1's install script makes a group with it; nothing is installed here
  libjs-jquery libjs-jquery-ui  # Open MPI's HTML documentation
  libhwloc-plugins  # hwloc's optional X11, OpenCL, PCI and XML plugins (loaded if found; strata reads cores)
)

refuse() {
  echo "gpu-bundle: refused: $*" >&2
  exit 1
}
command -v apt-get > /dev/null || refuse "needs apt-get (a Debian machine, as scripts/setup.sh)"
command -v dpkg-deb > /dev/null || refuse "needs dpkg-deb (a Debian machine, as scripts/setup.sh)"
command -v objdump > /dev/null || refuse "needs objdump (binutils) to read the glibc versions"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle.tmp.XXXXXX")
trap 'rm -rf "$work"' EXIT

# apt's choice of packages (alternatives, virtual packages) on a system that has only what
# $1 (a dpkg status file) lists: "name version" lines of what apt-get would install.
simulate() {
  local status=$1
  shift
  apt-get -s -q -o Dir::State::status="$status" --no-install-recommends install "$@" > "$work/sim.log" 2>&1 ||
    return 1
  awk '/^Inst /{v=$3; if (v ~ /^\[/) v=$4; gsub(/[()]/, "", v); print $2, v}' "$work/sim.log"
}

# Once, when apt's lists are missing or stale (a package or version it cannot find): update.
updated=0
update_once() {
  [ $updated = 0 ] || return 1
  updated=1
  echo "gpu-bundle: apt-get update (apt's lists lack a package or are stale)" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq || refuse "apt-get update failed (no network to Debian's archive?)"
}

# The closure: every package apt would install for strata_library_packages on a machine with
# g++ alone, less the leaves and what only they need (a walk from the roots over the chosen set).
resolve() {
  : > "$work/empty"
  simulate "$work/empty" g++ > "$work/compiler" || return 1
  # A status file claiming the compiler's closure installed, with apt's own records of it.
  mapfile -t names < <(cut -d' ' -f1 "$work/compiler")
  apt-cache show --no-all-versions "${names[@]}" |
    awk '/^Package:/{print; print "Status: install ok installed"; next} {print}' > "$work/status"
  simulate "$work/status" "${strata_library_packages[@]}" > "$work/chosen" || return 1
  mapfile -t names < <(cut -d' ' -f1 "$work/chosen")
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances \
    "${names[@]}" 2> /dev/null |
    awk -v roots="${strata_library_packages[*]}" -v leaves="${LEAVES[*]}" -v chosen="$work/chosen" '
      BEGIN {
        while ((getline line < chosen) > 0) { split(line, f, " "); version[f[1]] = f[2] }
        n = split(leaves, l, " "); for (i = 1; i <= n; i++) leaf[l[i]] = 1
      }
      /^[^ ]/ { pkg = $1; next }
      { dep = $NF; gsub(/[<>]/, "", dep); if (dep in version) edges[pkg] = edges[pkg] " " dep }
      END {
        n = split(roots, queue, " "); head = 1
        for (i = 1; i <= n; i++) seen[queue[i]] = 1
        while (head <= n) {
          p = queue[head++]
          if (!(p in version)) continue  # a root the compiler closure already holds
          print p, version[p]
          m = split(edges[p], d, " ")
          for (j = 1; j <= m; j++) if (!(d[j] in seen) && !(d[j] in leaf)) { seen[d[j]] = 1; queue[++n] = d[j] }
        }
      }' | sort > "$work/bundle"
}
if ! resolve; then
  update_once || refuse "a package cannot be had: $(grep -E '^E:|has no installation candidate|Unable to locate' "$work/sim.log" | head -3)"
  resolve || refuse "a package cannot be had: $(grep -E '^E:|has no installation candidate|Unable to locate' "$work/sim.log" | head -3)"
fi

# apt's sizes, before downloading anything.
mapfile -t names < <(cut -d' ' -f1 "$work/bundle")
bytes=$(apt-cache show --no-all-versions "${names[@]}" | awk '/^Size:/{t += $2} END{print t}')
if [ "$bytes" -gt $LIMIT ]; then
  refuse "${#names[@]} packages of $((bytes / 1048576)) MiB, over the limit of $((LIMIT / 1048576)) MiB; the largest: $(
    apt-cache show --no-all-versions "${names[@]}" |
      awk '/^Package:/{p=$2} /^Size:/{print $2, p}' | sort -rn | head -5 | awk '{printf "%s (%.1f MiB) ", $2, $1/1048576}')"
fi

# Up to date: the same packages at the same versions, every file there.
if [ -f "$DIR/MANIFEST" ] && diff -q <(awk '!/^#/ && NF {print $1, $2}' "$DIR/MANIFEST" | sort) "$work/bundle" > /dev/null &&
  awk '!/^#/ && NF {print $4}' "$DIR/MANIFEST" | (cd "$DIR" && xargs -r ls > /dev/null 2>&1); then
  echo "gpu-bundle: $DIR is up to date ($(grep '^# total' "$DIR/MANIFEST" | cut -c3-))"
  exit 0
fi

mkdir "$work/debs"
mapfile -t wanted < <(awk '{print $1 "=" $2}' "$work/bundle")
download() { (cd "$work/debs" && apt-get download -q "${wanted[@]}" > "$work/download.log" 2>&1); }
if ! download; then
  update_once || refuse "download failed: $(grep -E '^E:' "$work/download.log" | head -3)"
  download || refuse "download failed: $(grep -E '^E:' "$work/download.log" | head -3)"
fi
bytes=$(du -cb "$work"/debs/*.deb | tail -1 | cut -f1)
[ "$bytes" -le $LIMIT ] || refuse "the downloaded packages are $((bytes / 1048576)) MiB, over the limit of $((LIMIT / 1048576)) MiB"

# What the bundled ELF files need from the machine: glibc and libstdc++ symbol versions, and
# the libraries (sonames) no bundled package holds.
mkdir "$work/tree"
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/tree"; done
find "$work/tree" -type f -print0 | xargs -0 file -N --mime-type | awk -F': ' '$2 ~ /x-(sharedlib|executable|pie-executable)/ {print $1}' > "$work/elf"
xargs -r objdump -T < "$work/elf" 2> /dev/null | grep -Eo '\b(GLIBC|GLIBCXX)_[0-9.]+\b' | sort -u > "$work/versions"
highest() { grep "^$1_" "$work/versions" | sort -V | tail -1; }
glibc=$(highest GLIBC)
glibcxx=$(highest GLIBCXX)
xargs -r objdump -p < "$work/elf" 2> /dev/null > "$work/dynamic"
awk '$1 == "NEEDED" {print $2}' "$work/dynamic" | sort -u > "$work/needed"
awk '$1 == "SONAME" {print $2}' "$work/dynamic" | sort -u > "$work/provided"
machine_libs=$(comm -23 "$work/needed" "$work/provided" | tr '\n' ' ')

{
  echo "# strata's GPU bundle (scripts/gpu-bundle.sh, $(date -u +%F)): Debian $(cat /etc/debian_version 2> /dev/null || echo '?'), amd64"
  echo "# total: $(wc -l < "$work/bundle") packages, $bytes bytes ($(awk -v b="$bytes" 'BEGIN{printf "%.1f", b/1048576}') MiB)"
  echo "# glibc: $glibc"
  echo "# glibcxx: ${glibcxx:-none}"
  echo "# from the machine: $machine_libs"
  echo "# name version bytes file"
  while read -r name version; do
    deb=$(cd "$work/debs" && ls "${name}_"*.deb)
    echo "$name $version $(stat -c %s "$work/debs/$deb") $deb"
  done < "$work/bundle"
} > "$work/debs/MANIFEST"

# Replace DIR whole: a failure above leaves the old one as it was.
rm -rf "$DIR.old"
[ -e "$DIR" ] && mv "$DIR" "$DIR.old"
mv "$work/debs" "$DIR"
rm -rf "$DIR.old"
echo "gpu-bundle: $DIR: $(grep '^# total' "$DIR/MANIFEST" | cut -c3-); needs $glibc, ${glibcxx:-no libstdc++}"
