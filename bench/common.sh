# Sourced by the bench scripts that train under mpirun. After
#   parse_bench_args "$@"
# with arguments STRATA_BIN SOURCE_DIR [--markdown FILE] [-- MPIEXEC FLAGS...], it has set
# strata, src, markdown (may be empty) and mpi (the launcher; by default mpirun with the
# flags this one-machine setup needs: oversubscription, yielding idle ranks, shared memory).
parse_bench_args() {
  strata=$1 src=$2
  shift 2
  markdown=""
  if [[ ${1:-} == --markdown ]]; then markdown=$2; shift 2; fi
  [[ ${1:-} == -- ]] && shift
  mpi=("$@")
  if [[ ${#mpi[@]} -eq 0 ]]; then
    mpi=(mpirun --oversubscribe --mca mpi_yield_when_idle 1 --mca btl self,vader)
    [[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
  fi
  return 0
}

# A scratch folder `work`, removed at exit, holding byte tokens of the repository's docs in
# work/data (train.bin, val.bin): the small corpus the A/B scripts train on.
scratch_with_docs_data() {
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$strata" data prepare --input "$src/docs" --out "$work/data" --val-fraction 0.2 --chunk-bytes 1024 > /dev/null
}
