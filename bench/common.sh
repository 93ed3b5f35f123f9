# Sourced by the bench scripts that train under mpirun. After
#   parse_bench_args "$@"
# with arguments STRATA_BIN SOURCE_DIR [--markdown FILE] [-- MPIEXEC FLAGS...], it has set
# strata, src, markdown (may be empty) and mpi (the launcher; by default mpirun with the
# flags this one-machine setup needs: oversubscription, yielding idle ranks, shared memory).
parse_bench_args() {
  strata=$1 src=$2
  shift 2
  markdown=""
  if [[ ${1:-} == --markdown ]]; then markdown=$2; shift 2; fi
  [[ ${1:-} == -- ]] && shift
  mpi=("$@")
  if [[ ${#mpi[@]} -eq 0 ]]; then
    mpi=(mpirun --oversubscribe --mca mpi_yield_when_idle 1 --mca btl self,vader)
    [[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
  fi
  return 0
}

# A scratch folder `work`, removed at exit, holding byte tokens of the repository's docs in
# work/data (train.bin, val.bin): the small corpus the A/B scripts train on.
scratch_with_docs_data() {
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$strata" data prepare --input "$src/docs" --out "$work/data" --val-fraction 0.2 --chunk-bytes 1024 > /dev/null
}

# mean_tokens_per_s METRICS: a run's tokens/s, the mean over steps 2.. of its metrics.jsonl (step
# 1 also places the initial weights).
mean_tokens_per_s() {
  /usr/bin/python3 -c 'import json,sys; t=[json.loads(l)["tokens_per_s"] for l in open(sys.argv[1])][1:]; print(sum(t)/len(t))' "$1"
}

# scaled_tier_flags TOPOLOGY SCALE: sets `tiers` to the planner's --tier flags for the tiers
# link emulation runs at SCALE: each bandwidth divided by it, each latency multiplied by it.
scaled_tier_flags() {
  tiers=()
  local name bw lat
  while read -r name bw lat; do
    tiers+=(--tier "$name.bandwidth_GBps=$bw" --tier "$name.latency_us=$lat")
  done < <(/usr/bin/python3 - "$1" "$2" <<'PY'
import sys, tomllib
scale = float(sys.argv[2])
for t in tomllib.load(open(sys.argv[1], "rb"))["tiers"]:
    print(t["name"], t["bandwidth_GBps"] / scale, t["latency_us"] * scale)
PY
)
}

# split_degrees NAME: sets tp and pp from a strategy named as the planner names a split,
# SPEC[+tpN][+ppN] (1 where absent), and train_split to the `strata train` flags that run it at
# the same tokens a step as SPEC alone: the N ranks of a TP group read the same batches, so a
# group runs N x --batch; a replica's N stages do, so it runs N x --grad-accum micro-batches
# (the pipeline fills and drains over them). Needs batch and accum set; the plan takes
# --batch-per-device to price the same (docs/planner.md).
split_degrees() {
  local name=$1
  if [[ ! $name =~ ^([^+]+)(\+tp([0-9]+))?(\+pp([0-9]+))?$ ]]; then
    echo "bench: strategy '$name': want SPEC, SPEC+tpN, SPEC+ppN or SPEC+tpN+ppN" >&2
    return 2
  fi
  tp=${BASH_REMATCH[3]:-1} pp=${BASH_REMATCH[5]:-1}
  train_split=(--strategy "${BASH_REMATCH[1]}" --batch $((batch * tp)) --grad-accum $((accum * pp)))
  [[ $tp -gt 1 ]] && train_split+=(--tp "$tp")
  [[ $pp -gt 1 ]] && train_split+=(--pp "$pp")
  return 0
}
