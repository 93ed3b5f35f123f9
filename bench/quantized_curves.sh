#!/usr/bin/env bash
# Trains `tiny` for 300 steps on 8 ranks of the 2-node test topology under the quantized
# presets (zeropp: int8 weights + int4 gradients + hpZ; topo: int8 weights, int4 gradients in
# the node) and their unquantized twins (same spec, fp32 wires), and checks that each ends
# within 2% of its twin's loss. With --markdown FILE it writes the loss curves as a table.
# Usage: bench/quantized_curves.sh STRATA_BIN SOURCE_DIR [--markdown FILE] [-- MPIEXEC FLAGS...]
set -euo pipefail
source "$(dirname "$0")/common.sh"
parse_bench_args "$@"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$strata" data prepare --input /usr/share/games/fortunes --out "$work/data" > /dev/null
common=(--topology "$src/configs/topology/2node-2gpu-2die.toml" --model tiny --train-data "$work/data/train.bin"
        --batch 4 --seq 64 --steps 300 --lr 2e-3 --warmup 20 --seed 7)
run() {  # name, strategy, extra flags...
  local name=$1 strategy=$2; shift 2
  OMP_NUM_THREADS=1 "${mpi[@]}" -np 8 "$strata" train --strategy "$strategy" "${common[@]}" "$@" --out "$work/$name" > /dev/null
}
run zeropp zeropp
run zeropp-fp32 zeropp --weight-wire fp32 --grad-wire fp32
run topo topo
run topo-fp32 topo --weight-wire fp32 --grad-wire fp32

/usr/bin/python3 - "$work" "$markdown" <<'PY'
import json, sys, os
work, markdown = sys.argv[1], sys.argv[2]
names = ["zeropp", "zeropp-fp32", "topo", "topo-fp32"]
curves = {n: [json.loads(l)["loss"] for l in open(os.path.join(work, n, "metrics.jsonl"))] for n in names}
ok = True
lines = []
for q, twin in (("zeropp", "zeropp-fp32"), ("topo", "topo-fp32")):
    # The mean of the last 20 steps: one step's loss is as noisy as its batch.
    a = sum(curves[q][-20:]) / 20
    b = sum(curves[twin][-20:]) / 20
    rel = abs(a - b) / b
    ok &= rel < 0.02
    lines.append(f"{q}: final loss {a:.4f} vs {b:.4f} unquantized ({100 * rel:.2f}% apart)")
print("\n".join(lines))
if markdown:
    with open(markdown, "w") as f:
        f.write("# Quantized presets against their unquantized twins\n\n")
        f.write("`tiny` on 8 ranks of the 2-node test topology (2 nodes x 2 GPUs x 2 dies), batch 4 x seq 64 a rank,\n")
        f.write("fortunes corpus, 300 steps, lr 2e-3; the twins use the same spec with fp32 wires.\n")
        f.write("Loss is the global mean of each step's batch; final = mean of the last 20 steps.\n")
        f.write("Written by `bench/quantized_curves.sh build/strata . --markdown docs/quantized-training.md`.\n\n")
        f.write("| step | " + " | ".join(names) + " |\n|---|" + "---|" * len(names) + "\n")
        for s in list(range(0, 300, 25)) + [299]:
            f.write(f"| {s + 1} | " + " | ".join(f"{curves[n][s]:.4f}" for n in names) + " |\n")
        f.write("\n" + "\n".join("- " + l for l in lines) + "\n")
sys.exit(0 if ok else 1)
PY
