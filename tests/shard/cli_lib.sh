# Shared by the shard CLI tests (source it after `set -euo pipefail`, with the test's
# arguments STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]): sets strata, src, mpi and py,
# moves into a fresh work folder removed on exit, and prepares tokens of the docs in data/.
strata=$1 src=$2
shift 2
mpi=("$@")
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }
# field FILE KEY...: a value of a JSON file.
field() { $py -c 'import json,sys; v=json.load(open(sys.argv[1])); [v:=v[k] for k in sys.argv[2:]]; print(v)' "$@"; }
# refused TEXT COMMAND...: fails unless COMMAND fails with TEXT in its output.
refused() {
  local want=$1 out
  shift
  if out=$("$@" 2>&1); then fail "accepted: $*"; fi
  grep -qF -- "$want" <<< "$out" || fail "refusal of '$*' does not name $want: $out"
}
# One node of 4 GPUs (4gpu.toml): room for a degree of 4 in one tier on 4 ranks.
write_four_gpu_topology() {
  printf '[[tiers]]\nname = "gpu"\nsize = 4\nbandwidth_GBps = 200\nlatency_us = 2\n[[tiers]]\nname = "cluster"\nbandwidth_GBps = 25\nlatency_us = 5\n' > 4gpu.toml
}

"$strata" data prepare --input "$src/docs" --out data --val-fraction 0.2 --chunk-bytes 1024 > /dev/null

# resumed_losses_match REFERENCE RUN...: each RUN folder's metrics hold steps 3 and 4 only
# (resumed from a step-2 checkpoint), at the REFERENCE folder's losses within 1e-5 relative
# (fp32 reduction order).
resumed_losses_match() {
  $py - "$@" <<'PY' || fail "the resumed losses"
import json, sys
def losses(run): return {j["step"]: j["loss"] for j in map(json.loads, open(f"{run}/metrics.jsonl"))}
reference = losses(sys.argv[1])
for run in sys.argv[2:]:
    got = losses(run)
    assert sorted(got) == [3, 4], (run, sorted(got))
    diff = max(abs(got[s] - reference[s]) for s in got)
    assert all(abs(got[s] - reference[s]) <= 1e-5 * abs(reference[s]) for s in got), (run, got, reference)
    print(f"{run} resumed: largest loss difference from the uninterrupted {sys.argv[1]} run {diff:.3g}")
PY
}

# export_matches_conversion CKPT: export writes whole tensors, so CKPT's safetensors equal its
# single-process conversion's byte for byte, and the conversion keeps the state digest.
export_matches_conversion() {
  "$strata" ckpt convert "$1" converted > /dev/null
  "$strata" export "$1" --safetensors written.safetensors > /dev/null
  "$strata" export converted --safetensors converted.safetensors > /dev/null
  cmp -s written.safetensors converted.safetensors || fail "the export of $1 differs from its single-process one"
  [[ "$(field converted/manifest.json state_digest)" == "$(field "$1"/manifest.json state_digest)" ]] ||
    fail "convert changed the state digest of $1"
}

# resumed_from CKPT RUN...: each RUN loaded CKPT's state (the trainer refuses a load whose
# state digest differs from the checkpoint's, and records the one it loaded).
resumed_from() {
  local ckpt=$1 run
  shift
  for run in "$@"; do
    [[ "$(field "$run"/summary.json resumed_state_digest)" == "$(field "$ckpt"/manifest.json state_digest)" ]] ||
      fail "$run: resumed from another state than $ckpt's"
  done
}
