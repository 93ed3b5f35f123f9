#!/usr/bin/env bash
# From a fresh clone to a trained model: installs the Debian packages, builds strata, turns the
# fortunes corpus (English text installed by the set-up) into byte tokens, trains a small GPT
# on it (scripts/demo.toml; `strata train` ends by printing the validation loss next to the
# corpus's unigram entropy), exports the weights as safetensors, runs the strategy comparison
# (scripts/compare_strategies.sh) and ends by printing what the trained model writes, greedy and
# sampled. Re-running replaces runs/demo and runs/compare.
#
# The model is sized for the budget as nanoGPT's character-level CPU example is: narrow and
# shallow (4 layers x 128 wide, 0.8M parameters) so that it sees millions of bytes in a few
# minutes; a model ten times larger sees a tenth of them and writes no words yet. The training
# run is sized by a speed probe, not by a fixed step count: 12 timed steps of the same model and
# batch, then as many steps as fit DEMO_TRAIN_SECONDS (default 300) on this machine, at least
# 200 and at most 4000, so the demo takes about the same time on any CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
budget=${DEMO_TRAIN_SECONDS:-300}
laps=()
lap_start=$start
lap() {  # lap NAME: the time since the previous lap, said at the end
  local now
  now=$(date +%s)
  laps+=("$1 $((now - lap_start)) s")
  lap_start=$now
}

./scripts/setup.sh
lap set-up
# The demo computes on the CPU: the CUDA kernels (a minute or two of nvcc on 2 cores) are built
# only where a GPU driver is present. scripts/test.sh turns them back on in the same folder.
cuda=OFF
command -v nvidia-smi > /dev/null && nvidia-smi > /dev/null 2>&1 && cuda=ON
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=$cuda
ninja -C build strata  # the command only: the test programs are test.sh's
lap build

./build/strata data prepare --input /usr/share/games/fortunes --out data/fortunes
lap data

# Speed probe: the demo's model and batch for 12 steps, no validation, nothing kept.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
./build/strata train --config scripts/demo.toml --steps 12 --warmup 2 --val-data "" --out "$probe/run" \
  --log-every 100 > /dev/null
read -r steps rate < <(/usr/bin/python3 -c '
import json, sys
summary = json.load(open(sys.argv[1]))
steps = int(float(sys.argv[2]) * summary["tokens_per_s"] / summary["tokens_per_step"]) // 10 * 10
print(min(4000, max(200, steps)), round(summary["tokens_per_s"]))' "$probe/run/summary.json" "$budget")
echo "demo: speed probe $rate tokens/s: training $steps steps (about $budget s)"

./build/strata train --config scripts/demo.toml --steps "$steps" --val-every $((steps / 4)) --overwrite
./build/strata export runs/demo --safetensors runs/demo/model.safetensors
lap training

# The same model under four strategies on 8 ranks of 2 nodes joined by an emulated 100 Mbit/s link.
echo
./scripts/compare_strategies.sh 6
lap comparison

# What the model learned: 120 bytes (the trained sequence length less the prompt) it writes after "A " through the KV cache (seconds), the
# likeliest byte each time (greedy) and drawn from its distribution.
echo
for how in "greedy:--temperature 0" "sampled:--temperature 0.8 --top-k 40 --seed 1"; do
  echo "demo: ${how%%:*} (strata sample --checkpoint runs/demo --prompt 'A ' ${how#*:}):"
  # shellcheck disable=SC2086  # the options split into words
  ./build/strata sample --checkpoint runs/demo --prompt "A " --max-new-tokens 120 ${how#*:}
  echo
done
lap samples

parts=$(IFS=,; echo "${laps[*]}")
echo "demo: finished in $(( $(date +%s) - start )) s (${parts//,/, }); results in runs/demo/ and runs/compare/"
