#!/usr/bin/env bash
# The GPU check's bundle, proven without a GPU (label bundle): scripts/gpu-bundle.sh makes the
# bundle in .gpu-bundle/ of the checkout (or finds it up to date), then scripts/gpu-check.sh,
# forced onto it in its no-GPU mode (STRATA_GPU_CHECK=deps STRATA_GPU_BUNDLE=force), unpacks it
# into a prefix, builds `strata` (no CUDA, -O1) against the prefix alone and runs it. Checked
# after: every package CMake found and every library strata loads lie in the prefix, the
# relocated Open MPI's wrapper and help files work, and a bundle lacking a package (fmt, then
# OpenBLAS) stops the configure at once naming it, though this machine has both: the
# machine's copies are really hidden.
#   gpu_bundle_test.sh SOURCE_DIR WORK_DIR
set -uo pipefail
src=$1 work=$2
fail() {
  echo "FAIL: $*"
  exit 1
}
start=$SECONDS
mkdir -p "$work"
command -v ccache > /dev/null && export CMAKE_CXX_COMPILER_LAUNCHER=ccache  # used when there, not needed

"$src/scripts/gpu-bundle.sh" || fail "scripts/gpu-bundle.sh"
bundle=$src/.gpu-bundle
manifest_bytes=$(awk '$2 == "total:" {print $5}' "$bundle/MANIFEST")
debs_bytes=$(du -cb "$bundle"/*.deb | tail -1 | cut -f1)
[ "$manifest_bytes" = "$debs_bytes" ] || fail "the manifest's total ($manifest_bytes) is not the packages' ($debs_bytes)"
[ "$debs_bytes" -le $((48 * 1024 * 1024)) ] || fail "the bundle is $debs_bytes bytes, over 48 MiB"
grep -Eq '^# glibc: GLIBC_2\.[0-9]+$' "$bundle/MANIFEST" || fail "the manifest names no glibc version"
echo "bundle: $(grep '^# total' "$bundle/MANIFEST")"

# gpu-check.sh in its no-GPU mode, on the bundle alone (the machine has every package).
check() {  # check NAME [ENV...]: gpu-check's output in $work/NAME.log, its exit status returned
  local name=$1
  shift
  rm -rf "$work/$name.out"
  (cd "$work" && env "$@" STRATA_GPU_CHECK=deps STRATA_GPU_BUNDLE=force STRATA_GPU_BUILD="$work/$name" \
    OUT="$work/$name.out" bash "$src/scripts/gpu-check.sh") > "$work/$name.log" 2>&1
}
check build STRATA_GPU_BUNDLE_DIR="$bundle"
rc=$?
cat "$work/build.log"
[ $rc = 0 ] || fail "gpu-check.sh on the bundle: exit $rc"
head -1 "$work/build.log" | grep -Eq "^gpu-check: 0 of strata's [0-9]+ Debian packages missing here$" ||
  fail "the first line is not what was found here"
head -4 "$work/build.log" | grep -q "^gpu-check: took from the bundle (STRATA_GPU_BUNDLE=force): all .* unpacked in $work/build/prefix" ||
  fail "what it took from the bundle is not said first"
for step in configure build "strata --version" "strata train" "mpirun strata zero3"; do
  grep -Eq "^$step +ok$" "$work/build.log" || fail "step '$step' did not pass"
done

prefix=$work/build/prefix
for var in MPI_C_COMPILER MPI_C_HEADER_DIR MPIEXEC_EXECUTABLE OPENBLAS_INCLUDE_DIR OPENBLAS_LIBRARY XXHASH_INCLUDE_DIR \
  XXHASH_LIBRARY fmt_DIR nlohmann_json_DIR tomlplusplus_DIR CLI11_DIR GTest_DIR benchmark_DIR PKG_CONFIG_EXECUTABLE \
  pkgcfg_lib_HWLOC_hwloc pkgcfg_lib_PCRE2_pcre2-8; do
  where=$(grep -E "^$var:" "$work/build/CMakeCache.txt" | cut -d= -f2-)
  [[ "$where" == "$prefix"/* ]] || fail "CMake found $var at '$where', not in the prefix"
done
# In a subshell: the prefix's PATH would otherwise lead CMake's search to it in the runs below.
(
  source "$prefix/env.sh"
  libs=$(ldd "$work/build/strata")
  for lib in libmpi.so.40 libopenblas.so.0 libhwloc.so.15 libfmt.so.9 libxxhash.so.0 libpcre2-8.so.0 libopen-pal.so.40; do
    grep -Eq "^\s+$lib => $prefix/" <<< "$libs" || fail "strata loads $lib from elsewhere: $(grep "$lib" <<< "$libs")"
  done
  mpicc -showme:compile | grep -q -- "-I$prefix/usr/lib/x86_64-linux-gnu/openmpi/include" ||
    fail "mpicc does not name the prefix's headers: $(mpicc -showme:compile)"
  missing=$(mpirun --allow-run-as-root -np 1 /nonexistent/program 2>&1)
  grep -q "could not access" <<< "$missing" && ! grep -q "help file" <<< "$missing" ||
    fail "mpirun's help text (its help files, relocated): $missing"
) || exit 1

# A bundle lacking a package: the configure stops naming it, and nothing is built.
for package in libfmt-dev:fmt libopenblas-openmp-dev:OpenBLAS; do
  mkdir -p "$work/lacking"
  rm -f "$work/lacking"/*
  ln -s "$bundle"/*.deb "$work/lacking/"
  rm "$work/lacking/${package%%:*}"_*.deb
  grep -v "^${package%%:*} " "$bundle/MANIFEST" > "$work/lacking/MANIFEST"
  check "without-${package%%:*}" STRATA_GPU_BUNDLE_DIR="$work/lacking"
  rc=$?
  log=$work/without-${package%%:*}.log
  cat "$log"
  [ $rc = 1 ] || fail "a bundle without ${package%%:*}: exit $rc, want 1"
  grep -q "configure failed" "$log" && grep -A5 "what is missing" "$log" | grep -q "${package#*:}" ||
    fail "a bundle without ${package%%:*}: the configure's failure does not name ${package#*:}"
  ! grep -q "=== build" "$log" || fail "a bundle without ${package%%:*}: it went on to build"
done
echo "PASS ($((SECONDS - start)) s)"
