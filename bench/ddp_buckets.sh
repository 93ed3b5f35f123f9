#!/usr/bin/env bash
# ddp's exposed communication a step with its gradient all-reduce after backward (bucket
# size 0) and in buckets during the last backward (25 MiB, DDP's default, and a small one),
# on 8 ranks of the 2-node test topology with link emulation on (every message held back to
# SCALE x its tier's alpha-beta time, so the links weigh what they would beside a real
# device's compute). The runs alternate (off,
# 25 MiB, small, off, ...) for ROUNDS rounds, so the machine's load falls on each alike; the
# table gives each run's exposed communication and compute a step (summary.json, steps after
# the first), then per bucket size the median and its ratio to the median without buckets,
# and what `strata plan --precision fp32` predicts for the same micro-batch and scaled tiers.
# Usage: bench/ddp_buckets.sh STRATA_BIN SOURCE_DIR [-- MPIEXEC FLAGS...]
# Environment: MODEL (small), SMALL_BUCKET (bytes, default 4 MiB), SCALE (2000), ROUNDS (2), STEPS (4),
# BATCH (1), SEQ (128), KEEP_WORK=1 keeps the runs' folder.
set -euo pipefail
source "$(dirname "$0")/common.sh"
parse_bench_args "$@"
model=${MODEL:-small}
small=${SMALL_BUCKET:-4194304}
scale=${SCALE:-2000} rounds=${ROUNDS:-2} steps=${STEPS:-4} batch=${BATCH:-1} seq=${SEQ:-128}
topology=$src/configs/topology/2node-2gpu-2die.toml
scratch_with_docs_data
[[ ${KEEP_WORK:-0} == 1 ]] && trap - EXIT && echo "runs in $work"
sizes=(0 26214400 "$small")

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  for bytes in "${sizes[@]}"; do
    OMP_NUM_THREADS=1 "${mpi[@]}" -np 8 "$strata" train --strategy ddp --topology "$topology" --emulate-links \
      --emulate-scale "$scale" --model "$model" --batch "$batch" --seq "$seq" --steps "$steps" --lr 1e-3 --warmup 1 --log-every 1000 \
      --train-data "$work/data/train.bin" --bucket-bytes "$bytes" --out "$work/run-$round-$bytes" > /dev/null
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$work" "$rounds" "${sizes[@]}" <<'PY'
import json, statistics, sys
work, rounds, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
exposed = {b: [] for b in sizes}
print(f"{'bucket bytes':>12} {'round':>5} {'exposed comm s/step':>20} {'compute s/step':>15} {'messages/step (gpu)':>20}")
for r in range(1, rounds + 1):
    for b in sizes:
        s = json.load(open(f"{work}/run-{r}-{b}/summary.json"))
        exposed[b].append(s["exposed_comm_s"])
        msgs = s["comm"]["per_step"]["gpu"]["messages"]
        print(f"{b:>12} {r:>5} {s['exposed_comm_s']:>20.3f} {s['compute_s']:>15.3f} {msgs:>20.0f}")
off = statistics.median(exposed[sizes[0]])
for b in sizes:
    m = statistics.median(exposed[b])
    print(f"bucket bytes {b}: median exposed communication {m:.3f} s a step, {m / off:.2f}x of no buckets")
PY

# The planner at this host's compute rate: the runs' median compute a step without buckets
# gives the rate (a plan at 1 TFLOPS prices the same micro-batch's FLOPs).
# The tiers the emulation ran: bandwidth divided by SCALE, latency multiplied by it.
scaled_tier_flags "$topology" "$scale"
plan_cmd=(plan --model "$model" --topology "$topology" --nodes 2 --strategy ddp --precision fp32 --micro-batch "$batch"
          --seq "$seq" --compute-efficiency 1 --device-memory-gb 3 --hbm-gbps 2.5 "${tiers[@]}" --json)
at_one=$("$strata" "${plan_cmd[@]}" --peak-tflops 1 | /usr/bin/python3 -c \
         "import json, sys; e, = json.load(sys.stdin)['strategies'].values(); print(e['compute_s'])")
peak=$(/usr/bin/python3 - "$work" "$rounds" "$at_one" <<'PY'
import json, statistics, sys
work, rounds, at_one = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
print(at_one / statistics.median(json.load(open(f"{work}/run-{r}-0/summary.json"))["compute_s"]
                                 for r in range(1, rounds + 1)))
PY
)
echo "strata plan at $peak TFLOPS a rank (the runs' compute): predicted exposed communication a step"
for bytes in "${sizes[@]}"; do
  "$strata" "${plan_cmd[@]}" --peak-tflops "$peak" --bucket-bytes "$bytes" | /usr/bin/python3 -c "
import json, sys
e, = json.load(sys.stdin)['strategies'].values()  # 'ddp*' where --bucket-bytes is given
micro, step = e['exposed_micro_batch_comm_s'], e['step_phase_comm_s']
print(f'  bucket bytes $bytes: {micro:.3f} s in the micro-batch + {step:.3f} s in the step phase = {micro + step:.3f} s')"
done
