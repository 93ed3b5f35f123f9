#!/usr/bin/env bash
# From a fresh clone to a trained model: installs the Debian packages, builds strata, turns the
# fortunes corpus (English text installed by the set-up) into byte tokens, trains GPT `small`
# on it (scripts/demo.toml; `strata train` ends by printing the validation loss next to the
# corpus's unigram entropy), and exports the weights as safetensors. Re-running replaces runs/demo.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
ninja -C build strata

./build/strata data prepare --input /usr/share/games/fortunes --out data/fortunes
./build/strata train --config scripts/demo.toml --overwrite
./build/strata export runs/demo --safetensors runs/demo/model.safetensors

echo "demo: finished in $(( $(date +%s) - start )) s; results in runs/demo/"
