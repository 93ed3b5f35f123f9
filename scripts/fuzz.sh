#!/usr/bin/env bash
# Fuzzes strata's readers of untrusted input with libFuzzer (docs/fuzzing.md):
#   scripts/fuzz.sh [SECONDS] [TARGET...]     SECONDS per target (default 60); targets: config,
#                                             topology, checkpoint, tokens, bpe (default all)
# Builds the targets in build-fuzz/ with clang (ASan + UBSan), makes their seed corpora from real
# inputs with the Release build's build/strata (build that first), runs the targets side by side,
# one per core, and exits non-zero naming the saved input of any crash, leak, timeout, sanitizer
# report or exception other than strata::Error.
#   build-fuzz/corpus/TARGET/    inputs the fuzzer found interesting, kept from run to run
#   build-fuzz/findings/TARGET/  crash-*, leak-*, timeout-*, oom-*: inputs that failed
#   build-fuzz/logs/TARGET.log   libFuzzer's output
#   build-fuzz/fuzz-summary.txt  one line per target: status, executions, coverage
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(config topology checkpoint tokens bpe)
if ! [[ $seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2
  exit 2
fi
strata=build/strata
if [ ! -x "$strata" ]; then
  echo "fuzz: $strata is missing; the seeds come from the Release build:" \
       "cmake -S . -B build -G Ninja && ninja -C build strata" >&2
  exit 2
fi

out=build-fuzz
mkdir -p "$out/logs"
rm -f "$out/fuzz-summary.txt"
# Debug: assertions on; tests/fuzz/CMakeLists.txt sets the optimisation and the sanitizers.
cmake -S . -B "$out" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=Debug -DSTRATA_FUZZ=ON -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_BENCH=OFF \
      -DSTRATA_CUDA=OFF > "$out/logs/configure.log" 2>&1 || { cat "$out/logs/configure.log"; exit 1; }
ninja -C "$out" $(printf 'fuzz_%s ' "${targets[@]}")

python3 tests/fuzz/make_seeds.py "$strata" "$out"

# The parsers write and read a file per input: keep those on tmpfs, in a folder of this run.
scratch=$(mktemp -d "$([ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/strata-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export STRATA_FUZZ_TMPDIR=$scratch
export STRATA_FUZZ_CHECKPOINT=$PWD/$out/checkpoint

fuzz_one() {
  local t=$1 status=0
  mkdir -p "$out/corpus/$t" "$out/findings/$t"
  # -timeout: an input that takes 10 s is a hang, not a slow parse. The first corpus folder
  # receives new inputs; the seeds are only read.
  "$out/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
      -dict="$out/dict/$t.dict" -artifact_prefix="$out/findings/$t/" \
      "$out/corpus/$t" "$out/seeds/$t" > "$out/logs/$t.log" 2>&1 || status=$?
  echo "$status" > "$out/logs/$t.status"
}

jobs=${STRATA_FUZZ_JOBS:-$(nproc)}
echo "fuzz: ${targets[*]}, ${seconds} s each, $jobs at a time"
running=0
for t in "${targets[@]}"; do
  rm -f "$out/logs/$t.status"
  if ((running >= jobs)); then
    wait -n
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait

failed=0
: > "$out/fuzz-summary.txt"
for t in "${targets[@]}"; do
  log=$out/logs/$t.log
  # "#123456 DONE cov: 1013 ft: 2599 corp: 969/10926b lim: 53 exec/s: 13848 rss: 408Mb"
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | tail -1)
  stats=$(sed -nE 's/.*(cov: [0-9]+ ft: [0-9]+ corp: [^ ]+).*(exec\/s: [0-9]+).*/\1 \2/p' <<< "$done_line")
  status=$(cat "$out/logs/$t.status" 2>/dev/null || echo "?")
  if [ "$status" = 0 ] && [ -n "$done_line" ]; then
    printf 'fuzz_%-10s ok      %s runs, %s\n' "$t" "${runs:-?}" "$stats" | tee -a "$out/fuzz-summary.txt"
  else
    failed=1
    input=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$log" | tail -1)
    printf 'fuzz_%-10s FAILED  exit %s; input: %s; log: %s\n' "$t" "$status" "${input:-none saved}" \
      "$log" | tee -a "$out/fuzz-summary.txt"
    grep -m3 -E 'ERROR: |runtime error|Assertion|terminate called' "$log" | sed 's/^/    /' || true
  fi
done
if ((failed)); then
  echo "fuzz: reproduce with $out/tests/fuzz/fuzz_TARGET INPUT (docs/fuzzing.md)"
  exit 1
fi
