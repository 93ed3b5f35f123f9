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
# (ModelConfig::flops_per_token: 6 x matmul parameters + causal attention), the same for both.
# With $OUT set, the full log and every JSON result go there.
# First, before anything else, it says where strata's Debian packages come from: the machine's
# own when it has every one of scripts/packages.sh's strata_library_packages, else all of them
# from the bundle (scripts/gpu-bundle.sh) unpacked into $BUILD/prefix, with the machine's copies
# hidden from CMake and pkg-config (one set, never a mix of two distributions' builds); and the
# NCCL it builds with (Debian's, else the CUDA toolkit's, else PyTorch's wheel's).
#   scripts/gpu-check.sh            (from anywhere; builds in build-gpu/ of this checkout)
#   STRATA_GPU_BUNDLE=auto|force|off   when to use the bundle: when a package is missing (auto,
#                                   the default), always, never
#   STRATA_GPU_BUNDLE_DIR=DIR       the bundle (default .gpu-bundle)
#   STRATA_GPU_BUILD=DIR            the build folder (default build-gpu)
#   STRATA_GPU_CHECK=deps           needs no GPU: the dependencies only, then a build of `strata`
#                                   without CUDA (-O1), `strata --version`, and one training step
#                                   alone and one of zero3 under mpirun -np 2 (the bundle's test)
# Exit status: 0 all ran and passed, 1 something failed (the table says what) or the
# dependencies are not there (it says which, and stops), 2 no GPU here.
set -uo pipefail
cd "$(dirname "$0")/.."
readonly MODE=${STRATA_GPU_CHECK:-full} USE_BUNDLE=${STRATA_GPU_BUNDLE:-auto} BUNDLE=${STRATA_GPU_BUNDLE_DIR:-.gpu-bundle}
readonly PEAK_TFLOPS=989 MODEL=gpt2-124m BATCH=8 SEQ=1024 LLAMA=tinyllama-1.1b LLAMA_BATCH=4
readonly BUILD=${STRATA_GPU_BUILD:-build-gpu}
# Without a GPU nothing is rationed, but a build on a CI machine's 2 cores takes minutes.
[ "$MODE" = deps ] && budget=1200 build_limit=900 || budget=470 build_limit=270
readonly START=$SECONDS BUDGET=${GPU_CHECK_BUDGET:-$budget} BUILD_LIMIT=$build_limit
case "$MODE:$USE_BUNDLE" in
  full:auto | full:force | full:off | deps:auto | deps:force | deps:off) ;;
  *)
    echo "gpu-check: STRATA_GPU_CHECK='$MODE' (want deps or unset), STRATA_GPU_BUNDLE='$USE_BUNDLE' (want auto, force or off)" >&2
    exit 1
    ;;
esac

no_gpu() {
  echo "gpu-check: $1: nothing to check here (it needs one NVIDIA GPU)" >&2
  exit 2
}
if [ "$MODE" = full ]; then
  command -v nvidia-smi > /dev/null || no_gpu "no nvidia-smi"
  gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ') || true
  [ "${gpus:-0}" -ge 1 ] || no_gpu "nvidia-smi lists no GPU"
fi

RESULTS=${OUT:-$(mktemp -d)}
mkdir -p "$RESULTS" "$BUILD"
LOG=$RESULTS/gpu-check.log
exec > >(tee "$LOG") 2>&1
stop() {
  echo "gpu-check: stopped: $*"
  exit 1
}

# 0. The dependencies: what is here, what comes from the bundle.
source scripts/packages.sh
missing=()
for p in "${strata_library_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || missing+=("$p")
done
echo "gpu-check: ${#missing[@]} of strata's ${#strata_library_packages[@]} Debian packages missing here${missing[*]:+: ${missing[*]}}"
cmake_args=()
PREFIX=$(cd "$BUILD" && pwd)/prefix

# The highest version of the symbols NAME_x.y... that FILE defines or needs.
highest_symbol_version() { grep -ao "$1_[0-9][0-9.]*" "$2" | sort -uV | tail -1; }

# The bundle's ELF files were built against Debian 12's glibc and libstdc++: older ones here
# cannot load them, so that is said (and stops) before anything is unpacked.
check_bundle_fits() {
  local manifest=$1 need have cxx need_cxx have_cxx
  need=$(awk '$2 == "glibc:" {print $3}' "$manifest")
  have=$(getconf GNU_LIBC_VERSION 2> /dev/null | awk '{print $2}')
  [ "$(printf '%s\n' "${need#GLIBC_}" "${have:-0}" | sort -V | head -1)" = "${need#GLIBC_}" ] ||
    stop "the bundle's libraries need glibc ${need#GLIBC_} ($need, Debian 12's); this machine has ${have:-no glibc}: they cannot load here"
  cxx=$("${CXX:-c++}" -print-file-name=libstdc++.so.6 2> /dev/null) && [ -f "$cxx" ] ||
    stop "no C++ compiler (${CXX:-c++}) with a libstdc++ here"
  need_cxx=$(awk '$2 == "glibcxx:" {print $3}' "$manifest")
  have_cxx=$(highest_symbol_version GLIBCXX "$cxx")
  [ "$(printf '%s\n' "${need_cxx#GLIBCXX_}" "${have_cxx#GLIBCXX_}" | sort -V | head -1)" = "${need_cxx#GLIBCXX_}" ] ||
    stop "the bundle's libraries need libstdc++ $need_cxx; the compiler's here ($cxx) has $have_cxx"
  echo "gpu-check: glibc here $have, libstdc++ $have_cxx; the bundle needs $need, $need_cxx: they load here"
  local lib cached absent=()
  cached=$(ldconfig -p 2> /dev/null | awk '{print $1}')
  for lib in $(awk -F': ' '$1 == "# from the machine" {print $2}' "$manifest"); do
    grep -qxF "$lib" <<< "$cached" || absent+=("$lib")
  done
  ((${#absent[@]} == 0)) ||
    echo "gpu-check: warning: not in this machine's library cache, which the bundle expects from it: ${absent[*]}"
}

# dpkg -x each package into $PREFIX (again only when the bundle changed), then what the
# packages' install scripts would have done and strata uses: the alternatives' links.
unpack_bundle() {
  local manifest=$1 deb
  cmp -s "$manifest" "$PREFIX/.manifest" && return 0
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX"
  for deb in $(awk '!/^#/ && NF {print $4}' "$manifest"); do
    dpkg-deb -x "$BUNDLE/$deb" "$PREFIX" || stop "unpacking $BUNDLE/$deb failed"
  done
  ln -s mpicc.openmpi "$PREFIX/usr/bin/mpicc"
  ln -s mpic++.openmpi "$PREFIX/usr/bin/mpicxx"
  ln -s mpirun.openmpi "$PREFIX/usr/bin/mpirun"
  ln -s mpiexec.openmpi "$PREFIX/usr/bin/mpiexec"
  local psm=("$PREFIX"/usr/lib/libpsm1/libpsm_infinipath.so.1.*)  # libfabric's, for Open MPI's ofi plugins
  [ -e "${psm[0]}" ] && ln -s "../libpsm1/${psm[0]##*/}" "$PREFIX/usr/lib/x86_64-linux-gnu/libpsm_infinipath.so.1"
  cp "$manifest" "$PREFIX/.manifest"
}

# Everything that reads the packages reads them from $PREFIX alone: CMake (the machine's /usr
# ignored), pkg-config (its .pc files' /usr under the prefix), the loader, and Open MPI, whose
# folders OPAL_PREFIX moves except its configuration folder and PMIx's, given one by one.
# $PREFIX/env.sh holds the same, to run by hand what the check builds.
use_prefix() {
  local usr=$PREFIX/usr lib=$PREFIX/usr/lib/x86_64-linux-gnu
  cat > "$PREFIX/env.sh" << EOF
export PATH=$usr/bin:\$PATH
export CMAKE_PREFIX_PATH=$usr
export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$PREFIX
unset PKG_CONFIG_PATH
export LD_LIBRARY_PATH=$lib:$PREFIX/lib/x86_64-linux-gnu:$lib/openblas-openmp\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export OPAL_PREFIX=$usr OPAL_SYSCONFDIR=$PREFIX/etc/openmpi
export PMIX_PREFIX=$lib/pmix2 PMIX_PKGLIBDIR=$lib/pmix2/lib/pmix PMIX_PKGDATADIR=$lib/pmix2/share/pmix
export HWLOC_PLUGINS_PATH=$lib/hwloc
EOF
  source "$PREFIX/env.sh"
  cmake_args+=("-DCMAKE_IGNORE_PREFIX_PATH=/usr;/" "-DCMAKE_MAKE_PROGRAM=$(command -v ninja)")
  command -v python3 > /dev/null && cmake_args+=("-DPython3_EXECUTABLE=$(command -v python3)")
}

if [ "$USE_BUNDLE" = force ] || { [ "$USE_BUNDLE" = auto ] && ((${#missing[@]})); }; then
  [ -f "$BUNDLE/MANIFEST" ] ||
    stop "no bundle in $BUNDLE/ (make it with scripts/gpu-bundle.sh where Debian's archive is reachable, and carry it)"
  command -v dpkg-deb > /dev/null || stop "no dpkg-deb here to unpack the bundle"
  check_bundle_fits "$BUNDLE/MANIFEST"
  unpack_bundle "$BUNDLE/MANIFEST"
  use_prefix
  echo "gpu-check: took from the bundle (STRATA_GPU_BUNDLE=$USE_BUNDLE): all $(awk -F': ' '$1 == "# total" {print $2}' "$BUNDLE/MANIFEST") of $BUNDLE, unpacked in $PREFIX; the machine's copies hidden"
else
  ((${#missing[@]} == 0)) || stop "STRATA_GPU_BUNDLE=off and ${#missing[@]} packages missing: ${missing[*]}"
  echo "gpu-check: took nothing from the bundle: the machine's own packages"
fi

# NCCL: Debian's, else the CUDA toolkit's, else that of PyTorch's wheels (nvidia-nccl-*, whose
# library is named libnccl.so.2 only, so CMake is given it rather than left to find it).
nccl=""
for pair in /usr/include:/usr/lib/x86_64-linux-gnu/libnccl.so /usr/local/cuda/include:/usr/local/cuda/lib64/libnccl.so; do
  [ -f "${pair%%:*}/nccl.h" ] && [ -e "${pair#*:}" ] && nccl=$pair && break
done
if [ -z "$nccl" ] && command -v python3 > /dev/null; then
  wheel=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2> /dev/null) &&
    [ -f "$wheel/include/nccl.h" ] && [ -e "$wheel/lib/libnccl.so.2" ] && nccl=$wheel/include:$wheel/lib/libnccl.so.2
fi
if [ -n "$nccl" ]; then
  echo "gpu-check: NCCL: ${nccl#*:}"
  [ "$MODE" = deps ] || cmake_args+=("-DNCCL_INCLUDE_DIR=${nccl%%:*}" "-DNCCL_LIBRARY=${nccl#*:}")
  LD_LIBRARY_PATH=$(dirname "${nccl#*:}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH
else
  echo "gpu-check: NCCL: none here (Debian's, the CUDA toolkit's or PyTorch's): no sharded run on the GPU"
fi
[ "$MODE" = full ] && echo "gpu-check: $(date -u +%FT%TZ), $(nvidia-smi -L | head -1), results in $RESULTS"

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

# 1. Build. nvcc from PATH or the toolkit's usual place. A configure that fails names the
# missing piece and ends the check at once: nothing after it could run.
export PATH=$PATH:/usr/local/cuda/bin
mpi=(mpirun)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
if [ "$MODE" = deps ]; then
  configure_args=(-DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS=-O1 -DSTRATA_CUDA=OFF)
  wanted=(strata)
else
  configure_args=(-DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
  wanted=(strata test_cuda_device test_device_kernels test_comm_nccl cuda_kernels_bench)
fi

# What a failed configure lacked: CMake's "not found" lines, else the start of its first error.
missing_piece() {
  local found
  found=$(grep -E "Could (NOT|not) find|[Nn]ot found" "$1" | head -5)
  [ -n "$found" ] || found=$(awk '/^CMake Error/ {on = 1} on && n++ < 8' "$1")
  sed 's/^ */  /' <<< "$found"
}
# The status of each step named, and the exit status: 0 when each passed or was skipped.
summary() {
  echo
  printf '%-22s %s\n' step status
  local name failed=0
  for name in "$@"; do
    printf '%-22s %s\n' "$name" "${status[$name]:-not run}"
    case "${status[$name]:-not run}" in ok | skipped*) ;; *) failed=1 ;; esac
  done
  echo "gpu-check: $((SECONDS - START)) s; log $LOG"
  exit $failed
}

run_step configure 90 cmake -S . -B "$BUILD" -G Ninja -DSTRATA_BUILD_BENCH=ON "${configure_args[@]}" "${cmake_args[@]}" \
  > "$BUILD/configure.log" 2>&1
if [ "${status[configure]}" != ok ]; then
  cat "$BUILD/configure.log"
  echo "gpu-check: configure ${status[configure]}; what is missing:"
  missing_piece "$BUILD/configure.log"
  summary configure
fi
all=$(ninja -C "$BUILD" -t targets all 2> /dev/null | cut -d: -f1)
targets=()
for t in "${wanted[@]}"; do
  grep -qx "$t" <<< "$all" && targets+=("$t")
done
[ "$MODE" = deps ] || grep -qx strata_cuda <<< "$all" ||
  echo "gpu-check: the configure found no CUDA (strata_cuda missing): see $BUILD/configure.log"
run_step build "$BUILD_LIMIT" ninja -C "$BUILD" -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" "${targets[@]}"
built() { [ "${status[build]:-}" = ok ]; }

# Without a GPU (STRATA_GPU_CHECK=deps): what was built runs against the packages it was built
# with: its version, one training step alone and one of zero3 under mpirun, on byte tokens of
# the docs.
if [ "$MODE" = deps ]; then
  if built; then
    run_step "strata --version" 10 "$BUILD/strata" --version
    scratch=$(mktemp -d)
    if "$BUILD/strata" data prepare --input docs --out "$scratch/data" > /dev/null; then
      run_step "strata train" 60 "$BUILD/strata" train --model tiny --train-data "$scratch/data/train.bin" \
        --batch 2 --seq 32 --steps 1 --out "$scratch/one"
      run_step "mpirun strata zero3" 60 "${mpi[@]}" --oversubscribe -np 2 "$BUILD/strata" train --model tiny \
        --strategy zero3 --train-data "$scratch/data/train.bin" --batch 2 --seq 32 --steps 1 --out "$scratch/zero3"
    else
      status["strata train"]="failed (strata data prepare)"
    fi
    rm -rf "$scratch"
  fi
  summary configure build "strata --version" "strata train" "mpirun strata zero3"
fi

# 2. The gpu tests.
if built; then
  run_step "ctest -L gpu" 150 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 120 \
    --output-junit "$RESULTS/gpu-tests.xml"
fi

# 3. strata's step.
if built; then
  run_step "strata bf16" 90 "$BUILD/strata" bench step --model $MODEL --batch $BATCH --seq $SEQ --steps 10 --warmup 3 \
    --device cuda --precision bf16 --json > "$RESULTS/strata_step.json"
fi

# 4. strata's step sharded, on byte tokens of the docs. The run's end-of-run checkpoint (through
# host copies) goes to a scratch folder, removed after: only the summary is kept.
if built; then
  scratch=$(mktemp -d)
  if "$BUILD/strata" data prepare --input docs --out "$scratch/data" > /dev/null; then
    run_step "strata zero3" 60 "${mpi[@]}" -np 1 "$BUILD/strata" train --model $MODEL --strategy zero3 --device cuda \
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
if built && [ -x "$BUILD/bench/cuda_kernels_bench" ]; then
  run_step "kernel bench" 60 "$BUILD/bench/cuda_kernels_bench" > "$RESULTS/cuda_kernels_bench.txt"
  cat "$RESULTS/cuda_kernels_bench.txt"
else
  status["kernel bench"]="skipped (cuda_kernels_bench not built)"
fi

# 7. Llama's step: no PyTorch counterpart, so only if time is left after the rest.
if built; then
  run_step "strata llama" 60 "$BUILD/strata" bench step --model $LLAMA --batch $LLAMA_BATCH --seq $SEQ --steps 5 \
    --warmup 2 --device cuda --precision bf16 --json > "$RESULTS/strata_llama_step.json"
fi

# The table, last.
python3 bench/gpu_check_table.py "$RESULTS" --peak-tflops $PEAK_TFLOPS
summary configure build "ctest -L gpu" "strata bf16" "strata zero3" "pytorch eager" "pytorch compile" \
  "kernel bench" "strata llama"
