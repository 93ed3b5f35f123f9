#!/usr/bin/env bash
# What of scripts/gpu-check.sh runs without a GPU (label unit): its syntax and its Python's,
# its refusal on a machine without a GPU (before building or writing anything; also with the
# bundle forced) and of an unknown mode, PyTorch's GPU bench refusing a CPU-only torch, and the
# closing table from known results.
#   gpu_check_test.sh SOURCE_DIR
set -uo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

bash -n "$src/scripts/gpu-check.sh" || fail "scripts/gpu-check.sh does not parse"
for py in bench/torch_gpt2_gpu.py bench/gpu_check_table.py; do
  python3 -c "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)" \
    "$src/$py" "$tmp/compiled.pyc" || fail "$py does not compile"
done

# The table: strata at 300k tokens/s with 1e9 FLOPs a token is 300 TFLOP/s, 30.3% of 989;
# its zero3 run's summary at 250k is 250 TFLOP/s, strata 1.20x it;
# PyTorch eager at 150k is 150 TFLOP/s, strata 2.00x it; the compiled run is missing; the
# Llama step at 100k tokens/s with its own 2e9 FLOPs a token is 200 TFLOP/s, 20.2%.
mkdir "$tmp/results"
echo '{"model": "gpt2-124m", "batch": 8, "seq": 1024, "precision": "bf16", "tokens_per_s": 300000,
       "flops_per_token": 1e9}' > "$tmp/results/strata_step.json"
echo '{"strategy": "zero3", "world_size": 1, "tokens_per_s": 250000}' > "$tmp/results/strata_zero3.json"
echo '{"tokens_per_s": 150000}' > "$tmp/results/torch_eager.json"
echo '{"model": "tinyllama-1.1b", "batch": 4, "seq": 1024, "precision": "bf16", "tokens_per_s": 100000,
       "flops_per_token": 2e9}' > "$tmp/results/strata_llama_step.json"
table=$(python3 "$src/bench/gpu_check_table.py" "$tmp/results" --peak-tflops 989) || fail "the table did not print"
echo "$table"
grep -Eq '^strata +300000 +300\.0 +30\.3% +1\.00x$' <<< "$table" || fail "strata's row"
grep -Eq '^strata zero3 +250000 +250\.0 +25\.3% +1\.20x$' <<< "$table" || fail "strata zero3's row"
grep -Eq '^pytorch eager +150000 +150\.0 +15\.2% +2\.00x$' <<< "$table" || fail "pytorch eager's row"
grep -Eq '^pytorch compile +- +- +- +-$' <<< "$table" || fail "a missing result is not a row of dashes"
grep -Eq '^strata llama +100000 +200\.0 +20\.2% +-$' <<< "$table" || fail "strata llama's row"
rm "$tmp/results/strata_llama_step.json"
grep -Eq '^strata llama +- +- +- +-$' <<< "$(python3 "$src/bench/gpu_check_table.py" "$tmp/results")" ||
  fail "a missing Llama step is not a row of dashes"

if command -v nvidia-smi > /dev/null && nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then
  echo "a GPU is here: the refusals below need a machine without one"
  exit 77
fi
out=$(cd "$tmp" && OUT="$tmp/out" bash "$src/scripts/gpu-check.sh" 2>&1)
rc=$?
[ $rc -eq 2 ] || fail "gpu-check.sh without a GPU: exit $rc, want 2: $out"
grep -q "nothing to check here (it needs one NVIDIA GPU)" <<< "$out" || fail "refusal says why: $out"
[ ! -e "$tmp/out" ] || fail "gpu-check.sh wrote its results folder before refusing"
# Forcing the bundle alone does not lift the refusal: only its no-GPU mode (STRATA_GPU_CHECK=deps,
# scripts.gpu_bundle_prefix_build) runs without a GPU; an unknown mode is refused, naming it.
out=$(cd "$tmp" && OUT="$tmp/out" STRATA_GPU_BUNDLE=force bash "$src/scripts/gpu-check.sh" 2>&1)
rc=$?
[ $rc -eq 2 ] || fail "gpu-check.sh with the bundle forced, without a GPU: exit $rc, want 2: $out"
[ ! -e "$tmp/out" ] || fail "gpu-check.sh with the bundle forced wrote its results folder before refusing"
out=$(cd "$tmp" && OUT="$tmp/out" STRATA_GPU_CHECK=dep bash "$src/scripts/gpu-check.sh" 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "STRATA_GPU_CHECK='dep' (want deps or unset)" <<< "$out" ||
  fail "gpu-check.sh with STRATA_GPU_CHECK=dep: exit $rc, want 1 naming it: $out"

# PyTorch's GPU bench on a torch without CUDA (Debian's CPU build) refuses, saying why.
if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  out=$(cd "$src/bench" && OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 torch_gpt2_gpu.py --model tiny 2>&1)
  rc=$?
  [ $rc -ne 0 ] || fail "torch_gpt2_gpu.py ran without a GPU: $out"
  grep -q "no GPU for PyTorch here" <<< "$out" || fail "torch_gpt2_gpu.py's refusal: $out"
fi
echo "PASS"
