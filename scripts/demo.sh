#!/usr/bin/env bash
# From a fresh clone to a trained model: installs the Debian packages, builds strata, turns the
# fortunes corpus (English text installed by the set-up) into byte tokens, trains GPT `small`
# on it (scripts/demo.toml; `strata train` ends by printing the validation loss next to the
# corpus's unigram entropy), exports the weights as safetensors, runs the strategy comparison
# (scripts/compare_strategies.sh) and ends by printing a sample of the trained model. Re-running
# replaces runs/demo and runs/compare.
#
# The training run is sized by a speed probe, not by a fixed step count: 12 timed steps of the
# same model and batch, then as many steps as fit DEMO_TRAIN_SECONDS (default 150) on this
# machine, at least 150 and at most 1000, so the demo takes about the same time on any CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
budget=${DEMO_TRAIN_SECONDS:-150}

./scripts/setup.sh
# The demo computes on the CPU: the CUDA kernels (a minute or two of nvcc on 2 cores) are built
# only where a GPU driver is present. scripts/test.sh turns them back on in the same folder.
cuda=OFF
command -v nvidia-smi > /dev/null && nvidia-smi > /dev/null 2>&1 && cuda=ON
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=$cuda
ninja -C build strata

./build/strata data prepare --input /usr/share/games/fortunes --out data/fortunes

# Speed probe: the demo's model and batch for 12 steps, no validation, nothing kept.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
./build/strata train --config scripts/demo.toml --steps 12 --warmup 2 --val-data "" --out "$probe/run" \
  --log-every 100 > /dev/null
read -r steps rate < <(/usr/bin/python3 -c '
import json, sys
summary = json.load(open(sys.argv[1]))
steps = int(float(sys.argv[2]) * summary["tokens_per_s"] / summary["tokens_per_step"]) // 10 * 10
print(min(1000, max(150, steps)), round(summary["tokens_per_s"]))' "$probe/run/summary.json" "$budget")
echo "demo: speed probe $rate tokens/s: training $steps steps (about $budget s)"

./build/strata train --config scripts/demo.toml --steps "$steps" --val-every $((steps / 4)) --overwrite
./build/strata export runs/demo --safetensors runs/demo/model.safetensors

# The same model under four strategies on 8 ranks of the 2-node test topology, emulated links.
echo
./scripts/compare_strategies.sh 6

# What the model learned: 200 bytes it writes after "A ", through the KV cache (seconds).
echo
echo "demo: a sample of runs/demo (strata sample --checkpoint runs/demo --prompt 'A ' --temperature 0.8 --top-k 40):"
./build/strata sample --checkpoint runs/demo --prompt "A " --max-new-tokens 200 --temperature 0.8 --top-k 40 --seed 1
echo

echo "demo: finished in $(( $(date +%s) - start )) s; results in runs/demo/ and runs/compare/"
