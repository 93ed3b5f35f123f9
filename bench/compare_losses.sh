#!/usr/bin/env bash
# Losses of two strata binaries, bit for bit, for every preset: the same 8-rank run of
# `strata train` on the test topology with each, then the loss lines of metrics.jsonl
# compared exactly. A change to the runtime's machinery (not its numerics) must pass.
# Usage: compare_losses.sh BASE_STRATA NEW_STRATA SOURCE_DIR [-- MPIEXEC FLAGS...]
set -euo pipefail
base=$1 new=$2
source "$(dirname "$0")/common.sh"
parse_bench_args "$new" "$3" "${@:4}"
scratch_with_docs_data
common=(--topology "$src/configs/topology/2node-2gpu-2die.toml" --model tiny --train-data "$work/data/train.bin"
        --batch 2 --seq 32 --lr 1e-3 --steps 5)
status=0
for strategy in ddp zero1 zero2 zero3 hsdp zeropp topo; do
  for which in base new; do
    bin=$base; [[ $which == new ]] && bin=$new
    "${mpi[@]}" -np 8 "$bin" train --strategy "$strategy" "${common[@]}" --out "$work/$which.$strategy" > /dev/null
  done
  if /usr/bin/python3 - "$work/base.$strategy/metrics.jsonl" "$work/new.$strategy/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
assert len(a) == 5 and a == b, (a, b)
print(" ".join(repr(x) for x in a))
PY
  then echo "$strategy: identical"; else echo "$strategy: DIFFERENT"; status=1; fi
done
exit $status
