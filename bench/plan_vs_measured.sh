#!/usr/bin/env bash
# Two forms. The emulator form (below, the default): strata's own link emulator, which holds
# each message to the same alpha-beta time the planner prices, so it checks the planner's
# account of bytes and overlap, not its link model. The namespace-cluster form
# (`bench/plan_vs_measured.sh --cluster [BUILD_DIR]`, bench/plan_vs_cluster.sh): real TCP over
# shaped links, with the planner calibrated on them by `strata calibrate`.
#
# Emulator form: checks the planner's step-time ratios between strategies against measured ones: trains a
# small model on 8 ranks of the 2-node test topology with link emulation on (every message
# held back to SCALE x its tier's alpha-beta time), takes each strategy's median step time,
# prices the same run with `strata plan` (tiers scaled by the same SCALE, this host's compute
# rate as the device's peak), and compares each strategy's step time over ddp's, measured
# against predicted. Exits non-zero when any ratio is more than 25% off.
# Usage: bench/plan_vs_measured.sh STRATA_BIN SOURCE_DIR [--markdown FILE] [-- MPIEXEC FLAGS...]
# Environment: SCALE (emulation scale, default 10000), STEPS (optimizer steps a run, default 6),
# STRATEGIES (the rows, default below; ddp among them, the ratios' base: e.g. "ddp zero3
# ddp+pp2 zero3+pp2" for the pipeline rows and their flat twins), KEEP_WORK=1 keeps the runs' folder.
set -euo pipefail
if [[ ${1:-} == --cluster ]]; then
  shift
  exec bash "$(dirname "$0")/plan_vs_cluster.sh" "$@"
fi
source "$(dirname "$0")/common.sh"
parse_bench_args "$@"
scale=${SCALE:-10000}
steps=${STEPS:-6}
# STRATEGY+tpN: `strata train --strategy STRATEGY --tp N`, priced as STRATEGY+tpN; likewise
# STRATEGY+ppN with --pp N (the stages across the cluster tier), and STRATEGY+tpN+ppN both.
read -r -a strategies <<< "${STRATEGIES:-ddp zero1 zero3 hsdp zeropp topo zero3+tp2 hsdp+tp2 ddp+pp2 zero1+pp2 zero3+pp2 hsdp+pp2}"
[[ " ${strategies[*]} " == *" ddp "* ]] || { echo "plan_vs_measured.sh: STRATEGIES '${strategies[*]}': want ddp among them (the ratios' base)" >&2; exit 2; }
ranks=8
cores=$(nproc)
topology=$src/configs/topology/2node-2gpu-2die.toml
# tiny, 16 x 64 tokens a micro-batch, 2 micro-batches a step: tens of ms of compute a step
# for a rank that shares the cores with 7 others, under a second or more of scaled link time.
model=(--model tiny)
batch=16 seq=64 accum=2
work=$(mktemp -d)
[[ -n ${KEEP_WORK:-} ]] && echo "work folder: $work" || trap 'rm -rf "$work"' EXIT

load_start=$(cut -d' ' -f1 /proc/loadavg)  # other work shares the machine: said beside the result
# One rank's compute rate: a full step of the same model and micro-batch on one thread, with
# nothing else running. 8 ranks share this host's cores, so a rank computes at cores/8 of that.
"$strata" bench step "${model[@]}" --batch $batch --seq $seq --threads 1 --steps 30 --warmup 3 --json > "$work/bench.json"
peak_tflops=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['gflops'] / 1e3 * $cores / $ranks)" \
              "$work/bench.json")

"$strata" data prepare --input /usr/share/games/fortunes --out "$work/data" > /dev/null
# Each step's tokens/s from its progress line (--log-every 1), so no run needs an output folder.
train_cmd=(train --topology "$topology" "${model[@]}" --seq $seq --steps "$steps"
           --lr 1e-3 --seed 7 --train-data "$work/data/train.bin" --emulate-links --emulate-scale "$scale"
           --log-every 1)
# Under --tp N the N ranks of a TP group read the same batches: a group runs N x the batch;
# under --pp N a replica's N stages do: it runs N x the micro-batches (and the pipeline fills
# over them). So every run trains the same tokens a step (and each rank computes the same FLOPs).
for strategy in "${strategies[@]}"; do
  split_degrees "$strategy"
  OMP_NUM_THREADS=1 "${mpi[@]}" -np $ranks "$strata" "${train_cmd[@]}" "${train_split[@]}" > "$work/$strategy.log"
done

# The same tiers the emulation ran: bandwidth divided by SCALE, latency multiplied by it.
scaled_tier_flags "$topology" "$scale"
# Adam streams ~28 bytes an element; this host's ~20 GB/s of memory bandwidth is shared by 8 ranks.
# --batch-per-device: a TP group of N runs N x the micro-batch, a pipeline of N stages N x the
# micro-batches, as the runs above do.
plan_cmd=(plan "${model[@]}" --topology "$topology" --nodes 2 --micro-batch $batch --batch-per-device --seq $seq
          --accum $accum --precision fp32 --peak-tflops "$peak_tflops" --compute-efficiency 1 --device-memory-gb 3 --hbm-gbps 2.5
          "${tiers[@]}")
"$strata" "${plan_cmd[@]}" --strategy "$(IFS=,; echo "${strategies[*]}")" --json > "$work/plan.json"

load_end=$(cut -d' ' -f1 /proc/loadavg)
/usr/bin/python3 - "$work" "$src" "$markdown" "$scale" "$peak_tflops" "$cores" "$ranks" "$steps" "$batch" "$seq" \
  "$accum" "${strategies[*]}" "strata ${train_cmd[*]}" "strata ${plan_cmd[*]}" "$load_start" "$load_end" <<'PY'
import json, os, re, statistics, sys
(work, src, markdown, scale, peak, cores, ranks, steps, batch, seq, accum, names, train_cmd, plan_cmd, load_start,
 load_end) = sys.argv[1:]
names = names.split()
# The commands as a reader would type them from the repository root (WORK: the runs' folder).
train_cmd, plan_cmd = (c.replace(work, "WORK").replace(src.rstrip("/") + "/", "") for c in (train_cmd, plan_cmd))
bench = json.load(open(os.path.join(work, "bench.json")))
plan = json.load(open(os.path.join(work, "plan.json")))["strategies"]
# Every row trains the same tokens a step: batch x seq x accum on each of the ranks (a TP
# group of N runs N x the batch on N ranks).
tokens_per_step = int(batch) * int(seq) * int(accum) * int(ranks)
rows = {}
for n in names:
    per_step = {int(m.group(1)): float(m.group(2))
                for m in re.finditer(r"^step (\d+)/\d+ .*\| ([0-9.]+) tok/s", open(os.path.join(work, n + ".log")).read(),
                                     re.M)}
    if sorted(per_step) != list(range(1, int(steps) + 1)):
        sys.exit(f"{n}: progress lines for steps {sorted(per_step)}, expected 1..{steps}")
    # Step 1 pays first-touch allocation and MPI connection set-up: left out. The median of
    # the rest resists the host's scheduling noise.
    timed = [per_step[k] for k in range(2, int(steps) + 1)]
    p = plan[n]
    rows[n] = dict(
        measured=statistics.median(tokens_per_step / t for t in timed),
        predicted=p["step_time_s"], p_compute=p["compute_s"] + p["optimizer_s"],
        p_comm=p["step_time_s"] - p["compute_s"] - p["optimizer_s"])
base = rows["ddp"]
ok = True
disagree = []
lines = ["| strategy | measured step s | predicted step s | predicted compute+Adam / exposed comm "
         "| measured / ddp | predicted / ddp | predicted ratio / measured | within 25% |",
         "|---|---|---|---|---|---|---|---|"]
for n in names:
    r = rows[n]
    mr, pr = r["measured"] / base["measured"], r["predicted"] / base["predicted"]
    agree = abs(pr / mr - 1) <= 0.25
    if not agree: disagree.append(n)
    lines.append(f"| {n} | {r['measured']:.4f} | {r['predicted']:.4f} | "
                 f"{r['p_compute']:.4f} / {r['p_comm']:.4f} | {mr:.3f} | {pr:.3f} | {pr / mr:.3f} | "
                 f"{'yes' if agree else 'NO'} |")
table = "\n".join(lines)
rate = (f"one rank's compute: {bench['gflops']:.1f} GFLOP/s alone on one thread (`strata bench step`) x {cores} cores / "
        f"{ranks} ranks = {float(peak) * 1e3:.2f} GFLOP/s a rank")
verdict = ("every ratio agrees within 25%" if not disagree
           else f"ratios more than 25% off: {', '.join(disagree)}")
load = f"1-minute load average {load_start} when the runs began, {load_end} when they ended, on {cores} cores"
print(f"emulation scale {scale}; {rate}; {load}")
print(table)
print(verdict)
if markdown:
    # The namespace-cluster form's section (written by hand from its output) is kept.
    cluster_marker = "\n## On real links"
    kept = ""
    if os.path.exists(markdown):
        old = open(markdown).read()
        if cluster_marker in old: kept = old[old.index(cluster_marker):]
    with open(markdown, "w") as f:
        f.write(f"""# The planner's step-time ratios against measured ones

Written by `bench/plan_vs_measured.sh build/strata . --markdown docs/plan-vs-measured.md`
(also the ctest `plan.ratios_vs_measured`, label `slow`). Issue 5 asks that, with link
emulation on, the planner's predicted step-time ratios between strategies match the
measured ratios within 25%.

## Setup

- `tiny` on 8 ranks of `configs/topology/2node-2gpu-2die.toml` (2 nodes x 2 GPUs x 2 dies),
  micro-batch {batch} x {seq} tokens, {accum} micro-batches a step, {steps} steps a strategy, one thread a rank.
- Tensor parallelism: `S+tp2` is `strata train --strategy S --tp 2` (TP over the GPU tier's
  2 dies, S over the 4 data-parallel ranks left), priced as `--strategy S+tp2`. The two ranks
  of a TP group read the same batches, so the run takes `--batch {2 * int(batch)}` (a group runs
  {2 * int(batch)} sequences, each rank half the model's FLOPs for them) and the plan
  `--batch-per-device` (a TP group of 2 runs 2 x the micro-batch): every row trains the same
  tokens a step. The TP collectives run over `comm::Collectives` of the same context as the
  sharding's, so link emulation holds each of their messages to the GPU tier's time like any
  other; the planner prices them from the schedule's own TP ops (docs/planner.md).
- Pipeline parallelism: `S+pp2` is `strata train --strategy S --pp 2` (2 stages of one block
  across the cluster tier, S over the 4 replicas of each stage inside the nodes), priced as
  `--strategy S+pp2`. A replica's 2 stages read the same batches, so the run takes
  `--grad-accum {2 * int(accum)}` (the pipeline fills and drains over {2 * int(accum)} micro-batches) and the plan
  `--batch-per-device` (a pipeline of 2 runs 2 x the micro-batches). The stage messages and
  the tied embeddings' sum run over the same context, held to the cluster tier's time; the
  planner prices them from the stages' own 1F1B programs (docs/planner.md).
- Link emulation at scale {scale}: every message is held back to {scale} x its tier's alpha-beta
  time (the tiers act as {float(scale):g} times slower: bandwidth / {scale}, latency x {scale}).
  At this scale the emulated link time dominates this host's own copying (at scale 100 the
  copies of `small`'s 7 MB units through shared memory on 2 cores took several times the
  emulated time).
- The planner is given the same tiers with bandwidth divided and latency multiplied by the scale
  (`--tier NAME.FIELD=VALUE`), `--precision fp32` (what the runtime runs), the same
  micro-batch, sequence and accumulation.
- Device: {rate}; passed as `--peak-tflops` with `--compute-efficiency 1`. The 8 ranks share
  {cores} cores, so a rank computing while all others compute gets {cores}/{ranks} of a core. The
  single-thread figure includes AdamW in its step time (a small share for `tiny`).
  `--hbm-gbps 2.5` (this host's ~20 GB/s shared by 8 ranks) prices Adam; `--device-memory-gb 3`
  only sets the fit verdict.
- Machine load: {load} (the 8 ranks themselves account for up to 8 of it).
- Measured step time: the median over steps 2..{steps} of each step's time (tokens a step,
  {tokens_per_step}, / that step's tokens/s in its progress line, `--log-every 1`); step 1 pays
  allocation and connection set-up.
  Predicted compute+Adam / exposed comm: the planner's split of its step time (exposed comm =
  micro-batch communication not hidden by compute plus the optimizer-step phase's).

## Result

{table}

{verdict[0].upper() + verdict[1:]}. Ratios are each strategy's step time over ddp's, measured in this run and
predicted by the planner; "predicted ratio / measured" within 0.75..1.25 is agreement.

## Commands

    strata data prepare --input /usr/share/games/fortunes --out WORK/data
    {train_cmd} --strategy S --batch {batch} --grad-accum {accum}      # under mpirun -np 8, OMP_NUM_THREADS=1
    {train_cmd} --strategy S --batch {2 * int(batch)} --grad-accum {accum} --tp 2
    {train_cmd} --strategy S --batch {batch} --grad-accum {2 * int(accum)} --pp 2
    {plan_cmd} --strategy {','.join(names)} --json

## What the host cannot reproduce

- Compute contention. The planner gives every rank its own device at a fixed rate. Here the
  8 ranks share {cores} cores: while some ranks sleep in emulated transfers the others compute
  faster than {cores}/{ranks} of a core, and the comm threads (quantization, reductions, copies)
  take cycles from compute. With `small` at scale 100 (compute about half of ddp's step) ddp's
  measured compute was 2.4 times zero3's for the same work, which no fixed device rate can
  price. The check therefore keeps compute a minor share of each step (the predicted split
  above) so that this error stays inside the tolerance; it checks the planner's
  communication account and overlap, not its compute model.
- Per-message overhead. Each emulated message also costs this host a wake-up of a sleeping
  comm thread and a hand-off through MPI among 16 threads on {cores} cores (more when other
  work shares the machine): a few milliseconds, on top of the emulated time. At scale 1000
  a latency-bound collective of 64 KiB ran 1.3 to 5.5 times its alpha-beta time
  (`strata bench collectives --sizes-mib 0.0625,0.5 --emulate-links --emulate-scale 1000`, while
  other builds loaded the host). `SCALE=1000` with this script (compute then about 40% of a
  predicted step) agreed on a quiet host (predicted ratio / measured 0.95-1.12 for all six)
  but, with micro-batch 8 while the host was compiling, gave 0.48 (topo), 0.61 (zeropp),
  0.73 (hsdp) and 0.74 (zero3): the strategies with many small messages ran slower than
  priced. The default scale 10000 makes every message's emulated time (20-50 ms of latency
  alone) dwarf that overhead, so the check holds on a shared machine; the price is that
  compute is a smaller share of each step.
- Host copies on top of emulated time: every message is also copied through shared memory
  after it is released, and int8/int4 wires are quantized and dequantized on the CPU; the
  planner prices neither (on a real device they run on the accelerator, or are far smaller
  than a link's time).
""")
        f.write(kept)
sys.exit(0 if not disagree else 1)
PY
