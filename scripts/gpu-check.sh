#!/usr/bin/env bash
# The one prepared check for a machine with one NVIDIA GPU (an H200 with PyTorch 2.x, CMake,
# ninja and nvcc, and no network: issue 15). In at most 8 minutes, each step under its own
# timeout and all of them under one deadline:
#   1. configure and build strata with CUDA (Release, sm_90 only: the H200's; CI builds 80;90)
#   2. ctest -L gpu: every CUDA kernel against the CPU / float64, the cuBLASLt products, the
#      single-GPU trainer against the CPU trainer's loss curve (fp32 and bf16), the NCCL
#      collectives, a sharded zero3 run over NCCL against the cpu's (fp32)
#   3. a gpt2-124m training step in bf16, batch 8 x seq 1024 (strata bench step --device cuda):
#      tokens/s, TFLOP/s and MFU against H200's dense bf16 peak of 989 TFLOP/s
#   4. the same model and shape sharded: `strata train --strategy zero3 --device cuda` under
#      mpirun -np 1, its tier levels NCCL communicators and the work between them on the GPU
#      (tokens/s from its summary, which counts the first step's start-up too)
#   5. PyTorch's own run of the same model and shape on the same GPU (bench/torch_gpt2_gpu.py),
#      eager, then torch.compile
#   6. the quantization kernels' GB/s against a device-to-device copy (cuda_kernels_bench)
#   7. a tinyllama-1.1b training step in bf16, batch 4 x seq 1024 (Llama: grouped-query
#      attention, SwiGLU), strata alone: last, in what is left of the budget
# and prints a short table last. FLOPs per token are strata's count for the model
# (GPTConfig::flops_per_token: 6 x matmul parameters + causal attention), the same for both.
# With $OUT set, the full log and every JSON result go there.
#   scripts/gpu-check.sh            (from anywhere; builds in build-gpu/ of this checkout)
# Exit status: 0 all ran and passed, 1 something failed (the table says what), 2 no GPU here.
set -uo pipefail
cd "$(dirname "$0")/.."
readonly START=$SECONDS BUDGET=${GPU_CHECK_BUDGET:-470} BUILD=build-gpu
readonly PEAK_TFLOPS=989 MODEL=gpt2-124m BATCH=8 SEQ=1024 LLAMA=tinyllama-1.1b LLAMA_BATCH=4

no_gpu() {
  echo "gpu-check: $1: nothing to check here (it needs one NVIDIA GPU)" >&2
  exit 2
}
command -v nvidia-smi > /dev/null || no_gpu "no nvidia-smi"
gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ') || true
[ "${gpus:-0}" -ge 1 ] || no_gpu "nvidia-smi lists no GPU"

RESULTS=${OUT:-$(mktemp -d)}
mkdir -p "$RESULTS"
LOG=$RESULTS/gpu-check.log
exec > >(tee "$LOG") 2>&1
echo "gpu-check: $(date -u +%FT%TZ), $(nvidia-smi -L | head -1), results in $RESULTS"

# Seconds a step may take: its own limit, or what is left of the budget (less a margin for
# the table), whichever is smaller; 0 when nothing is left.
limit() {
  local left=$((BUDGET - (SECONDS - START) - 10))
  [ "$left" -lt "$1" ] && echo $((left > 0 ? left : 0)) || echo "$1"
}
declare -A status
run_step() {  # run_step NAME LIMIT COMMAND...: status[NAME] = ok | failed (rc) | timed out | skipped
  local name=$1 secs
  secs=$(limit "$2")
  shift 2
  if [ "$secs" -le 0 ]; then
    status[$name]="skipped (no time left)"
    return 1
  fi
  echo "=== $name (at most ${secs}s): $*" >&2
  timeout --kill-after=5 "$secs" "$@"
  local rc=$?
  case $rc in
    0) status[$name]=ok ;;
    124 | 137) status[$name]="timed out after ${secs}s" ;;
    *) status[$name]="failed (exit $rc)" ;;
  esac
  return $rc
}

# 1. Build. nvcc from PATH or the toolkit's usual place; the bench folder needs Google
# Benchmark, so without it only the kernel table is missing.
export PATH=$PATH:/usr/local/cuda/bin
bench=ON
if ! run_step configure 90 cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DSTRATA_BUILD_BENCH=ON; then
  bench=OFF
  run_step configure 90 cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DSTRATA_BUILD_BENCH=OFF
fi
targets=()
if [ "${status[configure]}" = ok ]; then
  all=$(ninja -C $BUILD -t targets all 2> /dev/null | cut -d: -f1)
  for t in strata test_cuda_device test_device_kernels test_comm_nccl cuda_kernels_bench; do
    grep -qx "$t" <<< "$all" && targets+=("$t")
  done
  grep -qx strata_cuda <<< "$all" || echo "gpu-check: the configure found no CUDA (strata_cuda missing): see the log"
  run_step build 270 ninja -C $BUILD -j "$(nproc)" "${targets[@]}"
else
  status[build]="skipped (configure failed)"
fi
built() { [ "${status[build]:-}" = ok ]; }

# 2. The gpu tests.
if built; then
  run_step "ctest -L gpu" 150 ctest --test-dir $BUILD -L gpu --output-on-failure --timeout 120 \
    --output-junit "$RESULTS/gpu-tests.xml"
fi

# 3. strata's step.
if built; then
  run_step "strata bf16" 90 $BUILD/strata bench step --model $MODEL --batch $BATCH --seq $SEQ --steps 10 --warmup 3 \
    --device cuda --precision bf16 --json > "$RESULTS/strata_step.json"
fi

# 4. strata's step sharded, on byte tokens of the docs. The run's end-of-run checkpoint (through
# host copies) goes to a scratch folder, removed after: only the summary is kept.
if built; then
  mpi=(mpirun)
  [ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
  scratch=$(mktemp -d)
  if $BUILD/strata data prepare --input docs --out "$scratch/data" > /dev/null; then
    run_step "strata zero3" 60 "${mpi[@]}" -np 1 $BUILD/strata train --model $MODEL --strategy zero3 --device cuda \
      --precision bf16 --batch $BATCH --seq $SEQ --steps 10 --train-data "$scratch/data/train.bin" \
      --out "$scratch/run" && cp "$scratch/run/summary.json" "$RESULTS/strata_zero3.json"
  else
    status["strata zero3"]="failed (strata data prepare)"
  fi
  rm -rf "$scratch"
fi

# 5. PyTorch's, eager then compiled.
for mode in eager compile; do
  [ $mode = eager ] && secs=90 || secs=200
  run_step "pytorch $mode" $secs python3 bench/torch_gpt2_gpu.py --model $MODEL --batch $BATCH --seq $SEQ \
    --steps 10 --warmup 3 --mode $mode > "$RESULTS/torch_$mode.json"
done

# 6. The quantization kernels against a device copy (the cudak helper's table).
if built && [ -x $BUILD/bench/cuda_kernels_bench ]; then
  run_step "kernel bench" 60 $BUILD/bench/cuda_kernels_bench > "$RESULTS/cuda_kernels_bench.txt"
  cat "$RESULTS/cuda_kernels_bench.txt"
else
  status["kernel bench"]="skipped (cuda_kernels_bench not built${bench:+; bench folder $bench})"
fi

# 7. Llama's step: no PyTorch counterpart, so only if time is left after the rest.
if built; then
  run_step "strata llama" 60 $BUILD/strata bench step --model $LLAMA --batch $LLAMA_BATCH --seq $SEQ --steps 5 \
    --warmup 2 --device cuda --precision bf16 --json > "$RESULTS/strata_llama_step.json"
fi

# The table, last.
python3 bench/gpu_check_table.py "$RESULTS" --peak-tflops $PEAK_TFLOPS
echo
printf '%-16s %s\n' step status
failed=0
for name in configure build "ctest -L gpu" "strata bf16" "strata zero3" "pytorch eager" "pytorch compile" \
  "kernel bench" "strata llama"; do
  printf '%-16s %s\n' "$name" "${status[$name]:-not run}"
  case "${status[$name]:-not run}" in ok | skipped*) ;; *) failed=1 ;; esac
done
echo "gpu-check: $((SECONDS - START)) s; log $LOG"
exit $failed
