#!/usr/bin/env bash
# The namespace-cluster form of bench/plan_vs_measured.sh (`bench/plan_vs_measured.sh --cluster`):
# the planner against real links. On the namespace cluster (scripts/cluster.sh: 2 hosts in
# network namespaces x 4 ranks, real TCP over a shaped link between them, shared memory
# inside a host), for each shaped rate and model: `strata calibrate` measures the links,
# matmuls, kernels and Adam; `strata plan --calibration` predicts each strategy's step time;
# `strata train` measures it. Prints per row the prediction, the measured median, the error
# and both rank orders, and a verdict against the goal (every prediction within 15%, the
# same ranking). Exits non-zero when the goal is missed. Root; makes and removes its own
# cluster (name "splan"). Run it on a quiet machine, nice'd: it takes minutes.
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
# between runs 8 and 9; 8 for mini; 4 for small; 5 otherwise), SLOTS (ranks a host, default 4), MAX_MIB (calibrate's largest buffer,
# default 4; it also caps the all-reduce calibrate times compute beside: before session 14 that
# was this size, and beside 16 MiB the factor swung from 1.0 to 2.0 between calibrations;
# `small`'s larger ops extrapolate a curve that is straight there: docs/plan-vs-measured.md, run 6),
# CPUS (each host capped at that many CPUs, scripts/cluster.sh --cpus; default none, the hosts
# share the cores), KEEP_WORK=1 keeps the runs' folder. Besides the verdict it prints, per row,
# each tier's communication busy time, the exposed wait and compute, predicted against measured (the
# summary's comm.per_step.<tier>.busy_s and busy_min_s, the step reports' exposed_comm_s, the
# summary's compute_s and compute_max_s): where the time the planner misses goes, and how much
# of it is ranks waiting for the slowest;
# and each calibration's compute slowdown beside each tier's all-reduce; and the rank order by
# pairs: all pairs of strategies ordered the same, and those of the pairs the measurement itself
# orders (their per-step times' quartiles apart: a pair inside the noise cannot be ranked).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
strata=$(readlink -f "$build/strata")
name=splan
read -r -a rates <<< "${RATES:-1gbit 300mbit}"
read -r -a models <<< "${MODELS:-tiny mini small}"
steps=${STEPS:-}
strategies=(ddp zero2 zero3 hsdp zeropp topo)
batch=8 seq=64 accum=2
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
    "$strata" plan --model "$model" --topology "$topology" --nodes 2 --micro-batch $batch --seq $seq --accum $accum \
      --precision fp32 --device-memory-gb 3 --calibration "$run/calibration.toml" \
      --strategy "$(IFS=,; echo "${strategies[*]}")" --json > "$run/plan.json"
    for strategy in "${strategies[@]}"; do
      OMP_NUM_THREADS=1 "${mpi[@]}" "$strata" train --topology "$topology" --model "$model" --batch $batch --seq $seq \
        --grad-accum $accum --steps "$model_steps" --lr 1e-3 --seed 7 --train-data "$work/data/train.bin" \
        --strategy "$strategy" --out "$run/$strategy" > /dev/null
    done
  done
done

/usr/bin/python3 - "$work" "${rates[*]}" "${models[*]}" "${strategies[*]}" << 'PY'
import json, os, statistics, sys, tomllib
work, rates, models, names = sys.argv[1], *(a.split() for a in sys.argv[2:])
ok = True
lines = ["| rate | model | strategy | predicted s | measured s | error | rank predicted | rank measured |",
         "|---|---|---|---|---|---|---|---|"]
errors, same_order, split, split_tiers, overlap = [], [], [], [], []
by_model = {m: ([], []) for m in models}  # model -> (|errors|, rank order the same a group)
# Rank order by pairs: a pair is resolved when its two runs' per-step times (steps 2..) do not
# overlap between their quartiles, i.e. the measurement itself orders it; only those can be
# ordered right or wrong.
resolved, resolved_same, pairs_same, pairs = 0, 0, 0, 0
def quartiles(xs):
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]
for rate in rates:
    for model in models:
        run = os.path.join(work, f"{rate}-{model}")
        doc = json.load(open(os.path.join(run, "plan.json")))
        plan, tiers = doc["strategies"], [t["name"] for t in doc["topology"]["tiers"]]
        with open(os.path.join(run, "calibration.toml"), "rb") as f:
            cal = tomllib.load(f)
        overlap.append(f"{rate} {model}: " + ", ".join(f"{t['name']} x{t.get('overlap_slowdown', 1):.3g}"
                                                      for t in cal["tiers"]))
        rows, samples = {}, {}
        for n in names:
            summary = json.load(open(os.path.join(run, n, "summary.json")))
            metrics = [json.loads(l) for l in open(os.path.join(run, n, "metrics.jsonl"))]
            # Step 1 pays allocation and connection set-up: left out.
            samples[n] = [summary["tokens_per_step"] / m["tokens_per_s"] for m in metrics[1:]]
            measured = statistics.median(samples[n])
            rows[n] = (plan[n]["step_time_s"], measured)
            # Where the time goes: each tier's busy time on the communication thread (rank
            # mean, steps 2..; in brackets the least rank's, whose wait for late partners is
            # least), the exposed wait, and compute (rank 0's; in brackets each step's slowest
            # rank's, whom the others wait for), against the planner's. A step's measured
            # compute is its time outside waits, so it holds what the planner prices apart: the
            # optimizer and compute's slowdown beside communication.
            per_step = summary["comm"]["per_step"]
            busy = " | ".join(f"{plan[n]['comm_time_per_step'][t]['busy_s']:.4f} / "
                              f"{per_step[t]['busy_s']:.4f} ({per_step[t]['busy_min_s']:.4f})" for t in tiers)
            exposed_p = plan[n]["exposed_micro_batch_comm_s"] + plan[n]["step_phase_comm_s"]
            compute_p = plan[n]["compute_s"] + plan[n]["overlap_slowdown_s"] + plan[n]["optimizer_s"]
            exposed_m = statistics.median(m["exposed_comm_s"] for m in metrics[1:])
            split.append(f"| {rate} | {model} | {n} | {busy} | {exposed_p:.4f} / {exposed_m:.4f} | "
                         f"{compute_p:.4f} / {summary['compute_s']:.4f} ({summary['compute_max_s']:.4f}) |")
            split_tiers = tiers
        by_pred = sorted(names, key=lambda n: rows[n][0])
        by_meas = sorted(names, key=lambda n: rows[n][1])
        same_order.append(by_pred == by_meas)
        by_model[model][1].append(by_pred == by_meas)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                agree = (rows[a][0] < rows[b][0]) == (rows[a][1] < rows[b][1])
                pairs += 1
                pairs_same += agree
                (qa1, qa3), (qb1, qb3) = quartiles(samples[a]), quartiles(samples[b])
                if qa3 < qb1 or qb3 < qa1:
                    resolved += 1
                    resolved_same += agree
        for n in names:
            p, m = rows[n]
            err = p / m - 1
            errors.append(abs(err))
            by_model[model][0].append(abs(err))
            lines.append(f"| {rate} | {model} | {n} | {p:.4f} | {m:.4f} | {100 * err:+.1f}% | "
                         f"{by_pred.index(n) + 1} | {by_meas.index(n) + 1} |")
print("\n".join(lines))
print("\npredicted / measured seconds a step: each tier's communication busy time (rank mean; the least "
      "rank's in brackets), the exposed wait, and compute with its slowdown beside communication and the "
      "optimizer (rank 0; each step's slowest rank in brackets)\n")
print("| rate | model | strategy | " + " | ".join(f"{t} busy" for t in split_tiers) + " | exposed | compute |")
print("|---|---|---|" + "---|" * (len(split_tiers) + 2))
print("\n".join(split))
print("\ncompute beside each tier's all-reduce / alone (the calibrations' overlap_slowdown):")
print("\n".join(overlap))
within = sum(e <= 0.15 for e in errors)
print(f"\n{within} of {len(errors)} predictions within 15% (mean |error| {100 * statistics.mean(errors):.1f}%, "
      f"worst {100 * max(errors):.1f}%); rank order the same in {sum(same_order)} of {len(same_order)} "
      "(rate, model) groups")
for model, (errs, orders) in by_model.items():
    print(f"  {model}: {sum(e <= 0.15 for e in errs)} of {len(errs)} within 15% (mean |error| "
          f"{100 * statistics.mean(errs):.1f}%, worst {100 * max(errs):.1f}%); rank order the same in "
          f"{sum(orders)} of {len(orders)} groups")
print(f"pairs of strategies ordered the same: {pairs_same} of {pairs}; of the {resolved} pairs the measurement "
      f"itself orders (their per-step times' quartiles apart), {resolved_same}")
sys.exit(0 if within == len(errors) and all(same_order) else 1)
PY
