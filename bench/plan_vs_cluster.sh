#!/usr/bin/env bash
# The namespace-cluster form of bench/plan_vs_measured.sh (`bench/plan_vs_measured.sh --cluster`):
# the planner against real links. On the namespace cluster (scripts/cluster.sh: 2 hosts in
# network namespaces x 4 ranks, real TCP over a shaped link between them, shared memory
# inside a host), for each shaped rate and model: `strata calibrate` measures the links,
# matmuls, kernels and Adam; `strata plan --calibration` predicts each strategy's step time;
# `strata train` measures it. Prints per row the prediction, the measured median, the error
# and both rank orders, and a verdict against the goal (every prediction within 15%, and every
# pair of strategies the measurement orders ordered the same). Exits non-zero when the goal is missed. Root; makes and removes its own
# cluster (name "splan", or $CLUSTER_NAME). Run it on a quiet machine, nice'd: it takes 37 minutes with
# MODELS="mini small" and the default three repeats (run 29).
# Two layouts (LAYOUT):
# - switched (the default): 8 one-rank hosts, 4 to a switch, as 2 nodes of 4 GPUs each with
#   its own link: every byte, inside a node or across, crosses a real shaped TCP link. Each
#   host's link runs at HOST_RATE (the node tier; default 500mbit), each switch's uplink at the
#   RATES figure (the cluster tier), shared fairly by the 4 hosts behind it, as a node's GPUs
#   share its NIC (scripts/cluster.sh --switches).
# - shared: 2 hosts x SLOTS ranks: ranks of a host share memory (the node tier, copies on the
#   CPU), the hosts' links run at the RATES figure (the cluster tier). Runs 1-9
#   (docs/plan-vs-measured.md) used this layout.
# Usage: bench/plan_vs_cluster.sh [BUILD_DIR]
# Environment: LAYOUT (switched or shared), RATES (default "1gbit 300mbit"), HOST_RATE, MODELS (default
# "tiny mini small": steps of about 0.1, 1-2 and 4-12 s), STEPS (optimizer steps a run; default 20
# for tiny, whose steps take a tenth of a second and whose median over 5 steps moved by up to 2x
# between runs 8 and 9; 8 for mini; 4 for small; 5 otherwise), REPEATS (training runs a strategy,
# default 3, interleaved: the measured median pools their steps 2.., so one run that a spell of
# slow machine fell on does not decide the row, as it did in runs 26-28 of
# docs/plan-vs-measured.md, where single rows ran 15-44% slower than in other runs), SLOTS (ranks a host, default 4), MAX_MIB (calibrate's largest buffer,
# default 4; it also caps the all-reduce calibrate times compute beside: before session 14 that
# was this size, and beside 16 MiB the factor swung from 1.0 to 2.0 between calibrations;
# `small`'s larger ops extrapolate a curve that is straight there: docs/plan-vs-measured.md, run 6),
# STRATEGIES (default "ddp zero2 zero3 hsdp zeropp topo"; SPEC+ppN, SPEC+tpN and SPEC+tpN+ppN run
# the split at the same tokens a step as SPEC alone, as bench/plan_vs_measured.sh runs them:
# common.sh split_degrees), STRATEGY_FLAGS (sharding flags given to
# both plan and train, e.g. "--weight-wire fp32"), CPUS (each host capped at that many CPUs, scripts/cluster.sh --cpus; default none, the hosts
# share the cores; pipeline rows need it, e.g. CPUS=0.25 for the 8 switched hosts: with shared
# cores a stage computes faster while the other waits, which no device rate prices, docs/planner.md), KEEP_WORK=1 keeps the runs' folder. Besides the verdict it prints, per row,
# each tier's communication busy time, the exposed wait and compute, predicted against measured (the
# summary's comm.per_step.<tier>.busy_s and busy_min_s, the step reports' exposed_comm_s, the
# summary's compute_s and compute_max_s): where the time the planner misses goes, and how much
# of it is ranks waiting for the slowest;
# and each calibration's compute slowdown beside each tier's all-reduce; ddp's compute against
# its prediction (ddp overlaps least: far from 1, the machine ran at another speed than it was
# calibrated at); and the rank order by
# pairs: all pairs of strategies ordered the same, and those of the pairs the measurement itself
# orders (their per-step times' quartiles apart: a pair inside the noise cannot be ranked, and the
# verdict counts only these).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
build=${1:-build}
strata=$(readlink -f "$build/strata")
name=${CLUSTER_NAME:-splan}
read -r -a rates <<< "${RATES:-1gbit 300mbit}"
read -r -a models <<< "${MODELS:-tiny mini small}"
steps=${STEPS:-}
repeats=${REPEATS:-3}
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "plan_vs_cluster.sh: REPEATS '$repeats': want a whole number, 1 or more" >&2; exit 2; }
read -r -a strategies <<< "${STRATEGIES:-ddp zero2 zero3 hsdp zeropp topo}"
read -r -a strategy_flags <<< "${STRATEGY_FLAGS:-}"
batch=8 seq=64 accum=2
for strategy in "${strategies[@]}"; do split_degrees "$strategy" || exit 2; done
slots=${SLOTS:-4}
layout=${LAYOUT:-switched}
host_rate=${HOST_RATE:-500mbit}
cpus=${CPUS:-}
case $layout in
  switched | shared) ;;
  *) echo "plan_vs_cluster.sh: LAYOUT '$layout': want switched or shared" >&2; exit 2 ;;
esac
work=$(mktemp -d)
trap 'scripts/cluster.sh down --name $name > /dev/null 2>&1 || true; [[ -n ${KEEP_WORK:-} ]] || rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
[[ -n ${KEEP_WORK:-} ]] && echo "work folder: $work"
echo "layout: $layout$([[ $layout == switched ]] && echo ", each host's link $host_rate")${cpus:+, $cpus CPUs a host}"

# Node tier: SLOTS ranks (4 by default), over shared memory or their hosts' links; cluster tier:
# the 2 nodes, over the shaped link (uplink). The figures are placeholders:
# the calibration replaces every one the planner would use.
topology=$work/cluster.toml
cat > "$topology" << TOML
[[tiers]]
name = "node"
size = $slots
bandwidth_GBps = 5
latency_us = 10
source = "placeholder: bench/plan_vs_cluster.sh prices with a calibration"
[[tiers]]
name = "cluster"
bandwidth_GBps = 0.1
latency_us = 100
source = "placeholder: bench/plan_vs_cluster.sh prices with a calibration"
TOML
"$strata" data prepare --input /usr/share/games/fortunes --out "$work/data" > /dev/null

for rate in "${rates[@]}"; do
  if [[ $layout == switched ]]; then
    scripts/cluster.sh up --name $name --hosts $((2 * slots)) --slots 1 --rate "$host_rate" \
      --switches 2 --uplink-rate "$rate" ${cpus:+--cpus "$cpus"} --replace > /dev/null
  else
    scripts/cluster.sh up --name $name --hosts 2 --slots "$slots" --rate "$rate" ${cpus:+--cpus "$cpus"} --replace > /dev/null
  fi
  mpi=(/run/strata-cluster/$name/mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np $((2 * slots)))
  for model in "${models[@]}"; do
    run=$work/$rate-$model
    case $model in tiny) model_steps=${steps:-20} ;; mini) model_steps=${steps:-8} ;; small) model_steps=${steps:-4} ;; *) model_steps=${steps:-5} ;; esac
    mkdir -p "$run"
    OMP_NUM_THREADS=1 "${mpi[@]}" "$strata" calibrate --topology "$topology" --out "$run/calibration.toml" \
      --model "$model" --micro-batch $batch --seq $seq --max-mib "${MAX_MIB:-4}" > "$run/calibrate.txt"
    # --batch-per-device: a TP group of N runs N x the micro-batch, a pipeline of N stages N x the
    # micro-batches, as the runs below do (no change for a strategy without TP or PP).
    "$strata" plan --model "$model" --topology "$topology" --nodes 2 --micro-batch $batch --batch-per-device --seq $seq \
      --accum $accum --precision fp32 --device-memory-gb 3 --calibration "$run/calibration.toml" \
      --strategy "$(IFS=,; echo "${strategies[*]}")" ${strategy_flags[@]+"${strategy_flags[@]}"} --json > "$run/plan.json"
    # Each repeat starts the strategies at another place in their order, so that a spell of
    # slow machine falls on different strategies in different repeats.
    for ((repeat = 1; repeat <= repeats; repeat++)); do
      first=$(((repeat - 1) * ${#strategies[@]} / repeats))
      for ((i = 0; i < ${#strategies[@]}; i++)); do
        strategy=${strategies[(first + i) % ${#strategies[@]}]}
        out=$run/$strategy
        ((repeats == 1)) || out=$run/$strategy/repeat-$repeat
        split_degrees "$strategy"
        OMP_NUM_THREADS=1 "${mpi[@]}" "$strata" train --topology "$topology" --model "$model" --seq $seq \
          --steps "$model_steps" --lr 1e-3 --seed 7 --train-data "$work/data/train.bin" \
          "${train_split[@]}" ${strategy_flags[@]+"${strategy_flags[@]}"} --out "$out" > /dev/null
      done
    done
  done
done

# The report (bench/plan_vs_cluster_report.py, which also reads a kept work folder again, or
# prices it again with --replan): exits non-zero when the goal is missed.
/usr/bin/python3 bench/plan_vs_cluster_report.py "$work"
