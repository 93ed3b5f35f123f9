#!/usr/bin/env bash
# From a fresh clone to a trained model: installs the Debian packages, builds strata, turns the
# fortunes corpus (English text installed by the set-up) into byte tokens, trains GPT `small`
# on it (scripts/demo.toml; `strata train` ends by printing the validation loss next to the
# corpus's unigram entropy), exports the weights as safetensors, and ends with the strategy
# comparison (scripts/compare_strategies.sh). Re-running replaces runs/demo and runs/compare.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
ninja -C build strata

./build/strata data prepare --input /usr/share/games/fortunes --out data/fortunes
./build/strata train --config scripts/demo.toml --overwrite
./build/strata export runs/demo --safetensors runs/demo/model.safetensors

# The same model under four strategies on 8 ranks of the 2-node test topology, emulated links.
echo
./scripts/compare_strategies.sh 6

echo "demo: finished in $(( $(date +%s) - start )) s; results in runs/demo/ and runs/compare/"
