#!/usr/bin/env bash
# Checkpoints under tensor parallelism, through the strata binary under mpirun: a --tp 2 zero3
# run on 8 ranks stops at step 2 with a checkpoint in whole-model coordinates; it resumes at
# TP 1 and at TP 4 on 4 ranks, loading the saved state (the state digest) and training on to
# the uninterrupted TP 2 run's losses within fp32 reduction-order tolerance; its safetensors
# export equals that of its single-process conversion, byte for byte; `ckpt inspect` and
# `ckpt convert` read it.
# Usage: tp_checkpoint_cli_test.sh STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
source "$2/tests/shard/cli_lib.sh"
# Room for --tp 4 on 4 ranks (and 4 heads: the tiny model with --n-head 4).
write_four_gpu_topology
common=(--strategy zero3 --model tiny --n-head 4 --train-data data/train.bin --seq 32 --lr 1e-3 --steps 4)
tiers=(--topology "$src/configs/topology/2node-2gpu-2die.toml")

# The global batch stays 8 sequences: 4 replicas of 2 at TP 2 on 8 ranks and at TP 1 on 4
# ranks, 1 replica of 8 at TP 4 on 4 ranks.
"${mpi[@]}" -np 8 "$strata" train "${common[@]}" "${tiers[@]}" --tp 2 --batch 2 --out full > /dev/null
"${mpi[@]}" -np 8 "$strata" train "${common[@]}" "${tiers[@]}" --tp 2 --batch 2 --stop-after 2 --out half > /dev/null
ckpt=half/ckpt/step_00000002
[[ "$(field $ckpt/manifest.json engine tensor_parallel)" == 2 ]] || fail "the manifest does not record --tp 2"
"$strata" ckpt inspect $ckpt --verify > inspect.txt || fail "the TP 2 checkpoint does not verify: $(cat inspect.txt)"
grep -q "^verified" inspect.txt || fail "inspect --verify: $(cat inspect.txt)"
grep -q "written by zero3 with tensor parallelism 2 on 8 ranks" inspect.txt || fail "inspect: $(cat inspect.txt)"

"${mpi[@]}" -np 4 "$strata" train "${common[@]}" "${tiers[@]}" --batch 2 --resume $ckpt --out tp1 > /dev/null
"${mpi[@]}" -np 4 "$strata" train "${common[@]}" --topology 4gpu.toml --tp 4 --batch 8 --resume $ckpt --out tp4 > /dev/null
resumed_from $ckpt tp1 tp4
resumed_losses_match full tp1 tp4
export_matches_conversion $ckpt
echo "TP checkpoints: all checks passed"
