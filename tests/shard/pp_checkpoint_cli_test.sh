#!/usr/bin/env bash
# Checkpoints across pipeline and tensor-parallel layouts, through the strata binary under
# mpirun (tiny with 4 blocks, a global batch of 8 sequences, 2 micro-batches a step): a --pp 2
# run with zero1 stages on 8 ranks (replicas over two tiers) stops at step 2 with a checkpoint
# in whole-model coordinates; it resumes at PP 1 x TP 1 with zero3 on 4 ranks, at TP 2 on 4
# ranks, at --pp 4 on 4 ranks and in one process, loading the saved state (the state digest)
# and training on to the uninterrupted single-process losses; a --tp 2 zero3 checkpoint on 4
# ranks resumes at --pp 2 with zero1 stages. The pipeline checkpoint's safetensors export
# equals its single-process conversion's; `ckpt inspect` names the stages; `strata plan
# --compare-summary` prices both pipeline runs' pipeline tier as they measured it; a resume
# that cannot load it is refused naming the field.
# Usage: pp_checkpoint_cli_test.sh STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
source "$2/tests/shard/cli_lib.sh"
# Room for --pp 4 over the GPU tier on 4 ranks.
write_four_gpu_topology
common=(--model tiny --n-layer 4 --train-data data/train.bin --seq 32 --lr 1e-3 --steps 4 --grad-accum 2)
tiers=(--topology "$src/configs/topology/2node-2gpu-2die.toml")

"$strata" train "${common[@]}" --batch 8 --out one > /dev/null
# 8 ranks: the 2 stages across "cluster", 4 zero1 replicas a stage over "node" and "gpu".
"${mpi[@]}" -np 8 "$strata" train "${common[@]}" "${tiers[@]}" --strategy zero1 --pp 2 --batch 2 --stop-after 2 \
  --out pp2 > /dev/null
ckpt=pp2/ckpt/step_00000002
"$strata" ckpt inspect $ckpt --verify > inspect.txt || fail "the PP 2 checkpoint does not verify: $(cat inspect.txt)"
grep -q "written by zero1 with 2 pipeline stages on 8 ranks" inspect.txt || fail "inspect: $(cat inspect.txt)"

"${mpi[@]}" -np 4 "$strata" train "${common[@]}" "${tiers[@]}" --strategy zero3 --batch 2 --resume $ckpt --out flat \
  > /dev/null
"${mpi[@]}" -np 4 "$strata" train "${common[@]}" "${tiers[@]}" --strategy zero3 --tp 2 --batch 4 --resume $ckpt \
  --out tp2 > /dev/null
"${mpi[@]}" -np 4 "$strata" train "${common[@]}" --topology 4gpu.toml --strategy ddp --pp 4 --pp-tier gpu --batch 8 \
  --resume $ckpt --out pp4 > /dev/null
"$strata" train "${common[@]}" --batch 8 --resume $ckpt --out single > /dev/null
# The other way: a TP 2 checkpoint into pipeline stages.
"${mpi[@]}" -np 4 "$strata" train "${common[@]}" "${tiers[@]}" --strategy zero3 --tp 2 --batch 4 --stop-after 2 \
  --out tp_half > /dev/null
"${mpi[@]}" -np 4 "$strata" train "${common[@]}" "${tiers[@]}" --strategy zero1 --pp 2 --pp-tier node --batch 4 \
  --resume tp_half --out tp_to_pp > /dev/null

resumed_from $ckpt flat tp2 pp4 single
resumed_from tp_half/ckpt/step_00000002 tp_to_pp
resumed_losses_match one flat tp2 pp4 single tp_to_pp
export_matches_conversion $ckpt

# The planner prices what the pipeline runs sent across their pipeline tier (the stage
# messages and the tied embeddings' sum), from the stages' own 1F1B programs.
plan=(plan --model tiny --shape layers=4 --topology "$src/configs/topology/2node-2gpu-2die.toml" --seq 32 --accum 2
      --precision fp32 --peak-tflops 1 --device-memory-gb 8 --hbm-gbps 50 --strategy zero1+pp2)
"$strata" "${plan[@]}" --nodes 2 --micro-batch 2 --compare-summary pp2/summary.json > compared.txt ||
  fail "the plan of the 8-rank pipeline: $(cat compared.txt)"
"$strata" "${plan[@]}" --nodes 1 --micro-batch 4 --pp-tier node --compare-summary tp_to_pp/summary.json \
  >> compared.txt || fail "the plan of the 4-rank pipeline: $(cat compared.txt)"
[[ $(grep -c "^all equal" compared.txt) == 2 && $(grep -c "cluster .* equal$" compared.txt) == 6 &&
   $(grep -c "node .* equal$" compared.txt) == 6 ]] || fail "compare-summary: $(cat compared.txt)"

# Under --pp the global batch is batch x replicas (4 on 8 ranks), not x ranks.
refused "train.global_batch = 8 in the checkpoint (batch x data-parallel replicas), 4 in this run (batch 1 x 4 replicas); a resumed run must keep it: give --batch 2" \
  "${mpi[@]}" -np 8 "$strata" train "${common[@]}" "${tiers[@]}" --strategy zero1 --pp 2 --batch 1 --resume $ckpt \
  --out bad
refused "train.grad_accum = 2 in the checkpoint, 4 in this run" \
  "$strata" train "${common[@]}" --batch 8 --grad-accum 4 --resume $ckpt --out bad
refused "n_layer" "$strata" train "${common[@]}" --n-layer 2 --batch 8 --resume $ckpt --out bad
echo "pp_checkpoint_cli_test: ok"
