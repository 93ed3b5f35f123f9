#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run):
#   1. set-up (Debian packages),
#   2. Release build in build/ (the CUDA kernels too, where nvcc is found) and the `unit`, `mpi`,
#      `cluster`, `gpu` and `bundle` tests (`slow` ones are left out; `cluster` ones need root and are
#      skipped without it, saying why, unless STRATA_REQUIRE_CLUSTER=1, which CI sets: there
#      they fail; `gpu` ones skip without a GPU, saying why; `bundle` makes the GPU check's
#      bundle from Debian's archive and builds strata against it alone, in a few minutes),
#   3. AddressSanitizer + UndefinedBehaviorSanitizer build of the unit tests in build-asan/,
#      without CUDA (nvcc time is spent once, in the Release build),
#   4. libFuzzer run of every fuzz target, 40 s each, in build-fuzz/ (scripts/fuzz.sh; its seeds
#      come from build/strata): five targets, two at a time on 2 cores, take the 2 minutes that
#      four targets of 60 s took.
# Ends with a summary of all three; exits non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON  # ON: the demo may have left it off
ninja -C build
release_log=build/ctest-release.log
release_status=0
(cd build && ctest -L 'unit|mpi|cluster|gpu|bundle' -LE slow --output-on-failure) 2>&1 | tee "$release_log" || release_status=$?

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_SANITIZE=ON -DSTRATA_BUILD_BENCH=OFF \
      -DSTRATA_CUDA=OFF
ninja -C build-asan
asan_log=build-asan/ctest-asan.log
asan_status=0
(cd build-asan && ctest -L unit -LE slow --output-on-failure) 2>&1 | tee "$asan_log" || asan_status=$?

fuzz_status=0
fuzz_start=$(date +%s)
./scripts/fuzz.sh 40 || fuzz_status=$?
fuzz_seconds=$(( $(date +%s) - fuzz_start ))

echo
echo "=== test summary ==="
echo "release (unit + mpi + cluster + gpu + bundle): $(grep -E 'tests passed|tests failed' "$release_log" | tail -1)"
grep -A1000 -E '^The following tests FAILED' "$release_log" || true
grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: cluster\..*Skipped' "$release_log" | sed 's/^/  skipped: /' || true
gpu_skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: gpu\..*Skipped' "$release_log" || true)
((gpu_skipped == 0)) || echo "  skipped: ${gpu_skipped} gpu tests (no CUDA device here)"
echo "asan+ubsan (unit):    $(grep -E 'tests passed|tests failed' "$asan_log" | tail -1)"
grep -A1000 -E '^The following tests FAILED' "$asan_log" || true
echo "fuzz (40 s a target): $( ((fuzz_status)) && echo FAILED || echo "no findings"), ${fuzz_seconds} s with build and seeds"
sed 's/^/  /' build-fuzz/fuzz-summary.txt 2>/dev/null || true
if ((release_status || asan_status || fuzz_status)); then
  echo "FAILED"
  exit 1
fi
echo "all passed"
