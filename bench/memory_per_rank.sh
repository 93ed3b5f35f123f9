#!/usr/bin/env bash
# Peak memory per rank by strategy, against the planner: trains MODEL for a few steps under
# each strategy, with activations kept and recomputed, each rank under GNU time (its peak
# resident set, VmHWM), and prints per run the planner's memory a rank (`strata plan
# --precision fp32`, the same micro-batch), what the engine allocated (summary.json
# memory_bytes: weights, secondary, grads, optimizer, gathered, activations) and the largest
# and smallest peak RSS over the ranks. RSS adds what no state accounts for: the binary, MPI,
# OpenMP, the executor's scratch. With LIMIT_MB every rank runs under `ulimit -v` of that many
# MiB (address space): runs that do not fit fail, and the table says so. A second table gives
# each state (weights, secondary, grads, optimizer, gathered, communication, activations),
# engine against planner.
# Usage: bench/memory_per_rank.sh STRATA_BIN SOURCE_DIR [--markdown FILE] [-- MPIEXEC FLAGS...]
# Environment: RANKS (default 8: the 2-node test topology; else one node of RANKS ranks), MODEL (default
# gpt2-124m), MODEL_ARGS (model flags: --n-layer, --n-embd, --n-head, --vocab-size), STRATEGIES
# (default "ddp zero2 zero3 topo"), RECOMPUTE (default "none full"), BATCH (1), SEQ (64),
# STEPS (3), LIMIT_MB (none), KEEP_WORK=1 keeps the runs' folder.
set -euo pipefail
source "$(dirname "$0")/common.sh"
parse_bench_args "$@"
model=${MODEL:-gpt2-124m}
read -r -a model_args <<< "${MODEL_ARGS:-}"
read -r -a strategies <<< "${STRATEGIES:-ddp zero2 zero3 topo}"
read -r -a recomputes <<< "${RECOMPUTE:-none full}"
batch=${BATCH:-1} seq=${SEQ:-64} steps=${STEPS:-3} limit=${LIMIT_MB:-}
ranks=${RANKS:-8}
work=$(mktemp -d)
[[ -n ${KEEP_WORK:-} ]] && echo "work folder: $work" || trap 'rm -rf "$work"' EXIT
# 8 ranks: the 2-node test topology. Other counts: one node of that many ranks, where ddp's memory a rank is
# the same as at 8 (nothing of it is sharded), for machines that cannot hold 8 ddp replicas.
if [[ $ranks == 8 ]]; then
  topology=$src/configs/topology/2node-2gpu-2die.toml topology_name=2node-2gpu-2die plan_nodes=(--nodes 2)
else
  # One node of all the ranks inside a cluster tier: the planner sizes the cluster by --nodes.
  topology=$work/flat.toml topology_name="one node" plan_nodes=(--nodes 1)
  printf '[[tiers]]\nname = "node"\nsize = %d\nbandwidth_GBps = 25\nlatency_us = 5\n\n[[tiers]]\nname = "cluster"\nbandwidth_GBps = 25\nlatency_us = 5\n' "$ranks" > "$topology"
fi
"$strata" data prepare --input "$src/docs" --out "$work/data" --val-fraction 0.2 --chunk-bytes 1024 > /dev/null

# The planner's flags for the model: the same fields the trainer takes, as --shape FIELD=VALUE.
plan_shape=()
for ((i = 0; i < ${#model_args[@]}; i += 2)); do
  case ${model_args[i]} in
    --n-layer) plan_shape+=(--shape "layers=${model_args[i + 1]}") ;;
    --n-embd) plan_shape+=(--shape "hidden=${model_args[i + 1]}" --shape "ffn=$((4 * model_args[i + 1]))") ;;
    --n-head) plan_shape+=(--shape "heads=${model_args[i + 1]}" --shape "kv_heads=${model_args[i + 1]}") ;;
    --vocab-size) plan_shape+=(--shape "vocab=${model_args[i + 1]}") ;;
    *) echo "MODEL_ARGS: ${model_args[i]}: the planner has no such field here" >&2; exit 2 ;;
  esac
done

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
rows=()
for strategy in "${strategies[@]}"; do
  for recompute in "${recomputes[@]}"; do
    run=$work/$strategy.$recompute
    mkdir -p "$run"
    # Each rank: the address-space limit (if any), then GNU time writing its peak RSS (KiB).
    wrapper='[[ -n $1 ]] && ulimit -v $(($1 * 1024)); out=$2; shift 2
             exec /usr/bin/time -f %M -o "$out/rss.$OMPI_COMM_WORLD_RANK" "$@"'
    status=ok
    # Named only when asked for, so a binary without --recompute measures "none" too.
    train_recompute=(); [[ $recompute != none ]] && train_recompute=(--recompute "$recompute")
    if ! OMP_NUM_THREADS=1 "${mpi[@]}" -np $ranks bash -c "$wrapper" rank "$limit" "$run" \
        "$strata" train --strategy "$strategy" --topology "$topology" --model "$model" "${model_args[@]}" \
        --train-data "$work/data/train.bin" --batch "$batch" --seq "$seq" --steps "$steps" --lr 1e-4 \
        "${train_recompute[@]}" --out "$run/out" > "$run/log" 2>&1; then
      status="failed: $(grep -m1 -o 'strata: error: .*\|std::bad_alloc\|Cannot allocate memory\|out of memory' "$run/log" || tail -1 "$run/log")"
    fi
    plan_recompute=(); [[ $recompute == full ]] && plan_recompute=(--recompute)
    "$strata" plan --model "$model" "${plan_shape[@]}" --topology "$topology" "${plan_nodes[@]}" --precision fp32 \
      --peak-tflops 1 --device-memory-gb 1000 --hbm-gbps 10 \
      --micro-batch "$batch" --seq "$seq" --strategy "$strategy" "${plan_recompute[@]}" --json > "$run/plan.json"
    rows+=("$(/usr/bin/python3 - "$run" "$strategy" "$recompute" "$status" <<'PY'
import glob, json, os, sys
run, strategy, recompute, status = sys.argv[1:5]
mib = lambda b: f"{b / 2**20:,.1f}"
plan = json.load(open(run + "/plan.json"))
plan = plan["strategies"][strategy]
planned = plan["memory_bytes"]
states = ["weights", "secondary", "grads", "optimizer", "gathered", "activations"]
cells = [strategy, recompute, mib(planned["total"])]
summary = run + "/out/summary.json"
if status == "ok" and os.path.exists(summary):
    got = json.load(open(summary))["memory_bytes"]  # activations: not reported before recomputation
    cells.append(mib(sum(got.get(k, 0) for k in states)))
    cells.append((mib(got["activations"]) if "activations" in got else "-") + " / " + mib(planned["activations"]))
else:
    cells += ["-", "-"]
rss = [int(open(p).read().split()[-1]) * 1024 for p in glob.glob(run + "/rss.*") if open(p).read().strip()]
cells.append(f"{mib(max(rss))} / {mib(min(rss))}" if rss and status == "ok" else "-")
cells.append(status)
print(" | ".join(cells))
# The same run state by state, engine / planner (communication: the executor's scratch and
# the buckets, which the totals above leave out as the planner's total does).
by_state = [strategy, recompute]
for k in states[:5] + ["communication", "activations"]:
    engine = mib(got[k]) if status == "ok" and os.path.exists(summary) and k in got else "-"
    by_state.append(f"{engine} / {mib(planned.get(k, 0))}")
print(" | ".join(by_state))
PY
)")
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

state_rows=()
for i in "${!rows[@]}"; do
  state_rows+=("$(sed -n 2p <<< "${rows[i]}")")
  rows[i]=$(sed -n 1p <<< "${rows[i]}")
done
header="strategy | recompute | planner MiB a rank | engine allocated MiB | activations MiB (engine / planner) | peak RSS MiB (max / min rank) | run"
table=$(printf '%s\n' "$header" "$(sed 's/[^|]//g; s/|/--- | /g; s/ | $/ | ---/' <<< "$header")" "${rows[@]}")
echo "$model ${model_args[*]}, $ranks ranks of $topology_name, micro-batch $batch x $seq, $steps steps${limit:+, ulimit -v $limit MiB a rank}:"
column -t -s '|' <<< "$table"
state_header="strategy | recompute | weights | secondary | grads | optimizer | gathered | communication | activations"
state_table=$(printf '%s\n' "$state_header" "$(sed 's/[^|]//g; s/|/--- | /g; s/ | $/ | ---/' <<< "$state_header")" "${state_rows[@]}")
echo
echo "by state, MiB a rank, engine / planner:"
column -t -s '|' <<< "$state_table"
if [[ -n $markdown ]]; then
  { echo "$model ${model_args[*]}, $ranks ranks of $topology_name, micro-batch $batch x $seq, $steps steps${limit:+, ulimit -v $limit MiB a rank}"
    echo
    sed 's/^/| /; s/$/ |/' <<< "$table"
    echo
    echo "By state, MiB a rank, engine / planner:"
    echo
    sed 's/^/| /; s/$/ |/' <<< "$state_table"; } > "$markdown"
fi
