#!/usr/bin/env bash
# `strata train --pp` end to end on 4 ranks (2 nodes of 2 on the test topology, the stages
# across "node"): the losses and validation losses of --pp 2 with two ddp (zero1, zero3) replicas a stage
# equal those of the same global batch under ddp on 2 ranks, the summary's measured bytes per
# tier equal the schedule's (also on 8 ranks, zero1 over two tiers; and what --print-schedule prints), the checkpoint resumes in one process and under zero1 and zero3 stages (a zero3 one in one process) at
# the uninterrupted losses, the summary has the flat run's fields (busy time per tier, the
# slowest compute, memory by state), `strata plan --compare-summary` prices every tier of the ddp, zero1, zero3 and
# 8-rank zeropp runs as it measured it and the plan's memory a stage is the run's, and bad layouts are refused naming --pp (or --pp-layers).
# Usage: pp_cli_test.sh STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
strata=$1 src=$2
shift 2
mpi=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$strata" data prepare --input "$src/docs" --out "$work/data" --val-fraction 0.2 --chunk-bytes 1024 > /dev/null
topo="$src/configs/topology/2node-2gpu-2die.toml"
common=(--model tiny --train-data "$work/data/train.bin" --val-data "$work/data/val.bin" --val-every 2 --seq 32
        --lr 1e-3 --steps 6)

"${mpi[@]}" -np 4 "$strata" train "${common[@]}" --topology "$topo" --strategy ddp --pp 2 --pp-tier node --batch 2 \
  --grad-accum 4 --stop-after 4 --out "$work/pp" > /dev/null
"${mpi[@]}" -np 4 "$strata" train "${common[@]}" --topology "$topo" --strategy zero1 --pp 2 --pp-tier node --batch 2 \
  --grad-accum 4 --stop-after 4 --out "$work/pp_zero1" > /dev/null
# zero3 in each stage (the stage's sharding runtime), and its --print-schedule.
"${mpi[@]}" -np 4 "$strata" train "${common[@]}" --topology "$topo" --strategy zero3 --pp 2 --pp-tier node --batch 2 \
  --grad-accum 4 --stop-after 4 --out "$work/pp_zero3" > /dev/null
"${mpi[@]}" -np 4 "$strata" train "${common[@]}" --topology "$topo" --strategy zero3 --pp 2 --pp-tier node --batch 2 \
  --grad-accum 4 --print-schedule --json > "$work/pp_zero3_schedule.json"
# 8 ranks: the stages across "cluster", zero1 over the 4 replicas of each stage (two tiers).
"${mpi[@]}" -np 8 "$strata" train "${common[@]}" --topology "$topo" --strategy zero1 --pp 2 --batch 2 --grad-accum 2 \
  --stop-after 2 --out "$work/pp8" > /dev/null
# zeropp in each stage: 4 replicas over "gpu" and "cluster" (--pp 2 across "node"), int8 gathers
# (the backward's from the hpZ copy over "gpu") and int4 gradients.
"${mpi[@]}" -np 8 "$strata" train "${common[@]}" --topology "$topo" --strategy zeropp --pp 2 --pp-tier node --batch 2 \
  --grad-accum 2 --stop-after 2 --out "$work/pp8_zeropp" > /dev/null
# --print-schedule of that run: each stage's program and ops, and the bytes per tier a step.
for format in text json; do
  "${mpi[@]}" -np 8 "$strata" train "${common[@]}" --topology "$topo" --strategy zero1 --pp 2 --batch 2 --grad-accum 2 \
    --print-schedule $([[ $format == json ]] && echo --json) > "$work/pp8_schedule.$format"
done
"${mpi[@]}" -np 2 "$strata" train "${common[@]}" --strategy ddp --batch 2 --grad-accum 4 --stop-after 4 --out "$work/ddp" \
  > /dev/null
"$strata" train "${common[@]}" --batch 4 --grad-accum 4 --out "$work/one" > /dev/null
"$strata" train "${common[@]}" --batch 4 --grad-accum 4 --resume "$work/pp" --out "$work/resumed" > /dev/null
"${mpi[@]}" -np 4 "$strata" train "${common[@]}" --topology "$topo" --strategy zero1 --pp 2 --pp-tier node --batch 2 \
  --grad-accum 4 --resume "$work/pp" --out "$work/resumed_zero1" > /dev/null
"${mpi[@]}" -np 4 "$strata" train "${common[@]}" --topology "$topo" --strategy zero3 --pp 2 --pp-tier node --batch 2 \
  --grad-accum 4 --resume "$work/pp" --out "$work/resumed_zero3" > /dev/null
"$strata" train "${common[@]}" --batch 4 --grad-accum 4 --resume "$work/pp_zero3" --out "$work/zero3_resumed" > /dev/null

/usr/bin/python3 - "$work" <<'PY' || fail "--pp 2 does not train as the same global batch without it"
import json, sys
work = sys.argv[1]
def metrics(run):
    rows = [json.loads(l) for l in open(f"{work}/{run}/metrics.jsonl")]
    return {(r["step"], "val_loss" in r): r.get("val_loss", r.get("loss")) for r in rows}
def close(a, b, what):
    assert a.keys() <= b.keys(), (what, a.keys(), b.keys())
    worst = max(abs(a[k] - b[k]) / abs(b[k]) for k in a)
    assert worst < 1e-5, (what, worst)
    print(f"{what}: largest relative loss difference {worst:.3g}")
pp, ddp = metrics("pp"), metrics("ddp")
close(pp, ddp, "--pp 2 vs ddp on 2 ranks")
close(metrics("pp_zero1"), ddp, "--pp 2 with zero1 vs ddp on 2 ranks")
after = lambda run: {k: v for k, v in metrics(run).items() if k[0] > 4}
close(after("resumed"), metrics("one"), "--pp 2 ddp resumed in one process")
close(after("resumed_zero1"), metrics("one"), "--pp 2 ddp resumed at --pp 2 zero1")
close(metrics("pp_zero3"), ddp, "--pp 2 with zero3 vs ddp on 2 ranks")
close(after("resumed_zero3"), metrics("one"), "--pp 2 ddp resumed at --pp 2 zero3")
close(after("zero3_resumed"), metrics("one"), "--pp 2 zero3 resumed in one process")
fields = ("bytes_sent", "bytes_received", "messages")
traffic = lambda per_step: {t: {f: v[f] for f in fields} for t, v in per_step.items()}
# The summary carries the flat run's fields with their meaning: per tier its bytes and the
# communication's busy time (the mean and the least rank's), each step's slowest compute, and
# the rank's memory by state (rank 0's: the first stage's, each stage's under "stages"), the
# steps after the first without evaluation counted (steps 2 and 4 of 4, step 2 of 2).
flat = json.load(open(f"{work}/ddp/summary.json"))
for run in ("pp", "pp_zero1", "resumed_zero1", "pp_zero3", "resumed_zero3", "pp8", "pp8_zeropp"):
    s = json.load(open(f"{work}/{run}/summary.json"))
    assert s["pipeline_stages"] == 2 and s["world_size"] == (8 if run.startswith("pp8") else 4), s
    measured, scheduled = s["comm"]["per_step"], s["comm"]["scheduled_per_step"]
    assert traffic(measured) == scheduled, (run, measured, scheduled)
    if not run.startswith("resumed"):
        assert s["comm"]["steps_measured"] == (1 if run.startswith("pp8") else 2), (run, s["comm"])
    for tier, m in measured.items():
        assert m.keys() == next(iter(flat["comm"]["per_step"].values())).keys(), (run, tier, m, flat["comm"])
        assert 0 <= m["busy_min_s"] <= m["busy_s"] * (1 + 1e-12) and (m["busy_s"] > 0) == (m["messages"] > 0), (run, tier, m)
    assert measured["node" if run != "pp8" else "cluster"]["busy_min_s"] > 0, (run, measured)  # the stage sends
    assert 0 < s["compute_s"] <= s["compute_max_s"], (run, s["compute_s"], s["compute_max_s"])
    assert s["memory_bytes"].keys() == flat["memory_bytes"].keys(), (run, s["memory_bytes"], flat["memory_bytes"])
    assert [t["stage"] for t in s["stages"]] == [0, 1] and s["stages"][0]["memory_bytes"] == s["memory_bytes"], s
    assert scheduled["node"]["bytes_sent"] > 0 and scheduled["gpu"]["bytes_sent"] > 0, scheduled
    assert (scheduled["cluster"]["bytes_sent"] > 0) == run.startswith("pp8"), scheduled
# The printed schedule's bytes per tier are what the run measured a step (and its summary's
# schedule), in the JSON and in the text; every stage's program and ops are there.
summary = json.load(open(f"{work}/pp8/summary.json"))["comm"]
printed = json.load(open(f"{work}/pp8_schedule.json"))
assert printed["per_step"] == traffic(summary["per_step"]) == summary["scheduled_per_step"], (printed["per_step"], summary)
assert [s["stage"] for s in printed["stages"]] == [0, 1], printed["stages"]
for stage in printed["stages"]:
    purposes = [op["purpose"] for op in stage["ops"]]
    assert purposes.count("activation-send" if stage["stage"] == 0 else "activation-grad-send") == 2, purposes
    assert "tied embeddings" in purposes, purposes
    assert stage["sharding"]["spec"]["preset"] == "zero1", stage["sharding"]["spec"]
    assert len(stage["program"]) == 8, stage["program"]
text = open(f"{work}/pp8_schedule.text").read()
rows = text.rsplit("by tier:\n", 1)[1].splitlines()[1:]  # the world's table, after the stages' own
table = {r.split()[0]: [float(x) for x in r.split()[1:]] for r in rows}
assert table == {t: [summary["per_step"][t][f] for f in fields] for t in summary["per_step"]}, (table, summary)
assert "stage 1 (blocks 1..1)" in text and "send to 1" in text and "tied embeddings" in text, text
print("--print-schedule --pp 2: bytes per tier equal the run's measured ones")
# zero3 stages: each stage's own sharding schedule (gathers, reductions) beside its sends and tied sum.
summary = json.load(open(f"{work}/pp_zero3/summary.json"))["comm"]
printed = json.load(open(f"{work}/pp_zero3_schedule.json"))
assert printed["per_step"] == traffic(summary["per_step"]), (printed["per_step"], summary)
for stage in printed["stages"]:
    assert stage["sharding"]["spec"]["preset"] == "zero3", stage["sharding"]["spec"]
    purposes = {op["purpose"] for op in stage["ops"]}
    assert "tied embeddings" in purposes, purposes
print("--print-schedule --pp 2 --strategy zero3: the stages' sharding schedules, bytes per tier the run's")
PY

# The planner prices the ddp, zero1, zero3 and zeropp stages from the runtime's own stage schedules: every
# tier's bytes and messages a step equal what the run measured and scheduled (summary.json's comm).
for run in pp:ddp pp_zero1:zero1 pp_zero3:zero3 pp8_zeropp:zeropp; do
  nodes=1 accum=4
  [[ ${run%%:*} == pp8* ]] && nodes=2 accum=2
  "$strata" plan --model tiny --topology "$topo" --nodes $nodes --pp-tier node --seq 32 --micro-batch 2 --accum $accum \
    --precision fp32 --peak-tflops 1 --device-memory-gb 8 --hbm-gbps 50 --strategy "${run#*:}+pp2" \
    --compare-summary "$work/${run%%:*}/summary.json" > "$work/compared.txt" || fail "plan: $(cat "$work/compared.txt")"
  [[ $(grep -c "^all equal" "$work/compared.txt") == 1 && $(grep -c " equal$" "$work/compared.txt") -ge 18 ]] &&
    ! grep -q "not compared" "$work/compared.txt" || fail "compare-summary of --pp 2 ${run#*:}: $(cat "$work/compared.txt")"
  # Each stage's memory by state, activations included (a stage's own blocks' buffers, a slot
  # per micro-batch in flight), as the plan prices it (--json's pipeline) and as the stage's
  # first rank allocated it (summary.json's stages).
  "$strata" plan --model tiny --topology "$topo" --nodes $nodes --pp-tier node --seq 32 --micro-batch 2 --accum $accum \
    --precision fp32 --peak-tflops 1 --device-memory-gb 8 --hbm-gbps 50 --strategy "${run#*:}+pp2" --json \
    > "$work/plan.json"
  /usr/bin/python3 - "$work/plan.json" "$work/${run%%:*}/summary.json" "${run#*:}" <<'PY' ||
import json, sys
plan, summary, strategy = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
planned = [s["memory_bytes"] for s in plan["strategies"][strategy + "+pp2"]["pipeline"]]
held = [s["memory_bytes"] for s in summary["stages"]]
assert len(planned) == len(held) == 2, (planned, held)
for stage, (p, h) in enumerate(zip(planned, held)):
    assert p.keys() - {"total"} == h.keys() and "activations" in h, (p.keys(), h.keys())
    for state in h:
        assert p[state] == h[state], (strategy, stage, state, p[state], h[state])
print(f"--pp 2 {strategy}: each stage's memory by state equals the plan's")
PY
    fail "the plan's memory a stage of --pp 2 ${run#*:} is not the run's"
done

refused() {  # refused FLAG_TEXT COMMAND...: fails unless COMMAND fails naming FLAG_TEXT
  local want=$1
  shift
  if out=$("$@" 2>&1); then fail "accepted: $*"; fi
  grep -q -- "$want" <<< "$out" || fail "refusal of '$*' does not name $want: $out"
}
refused "--pp 3" "${mpi[@]}" -np 4 "$strata" train "${common[@]}" --topology "$topo" --strategy ddp --pp 3 --batch 2 \
  --out "$work/bad"
refused "--pp 2" "${mpi[@]}" -np 4 "$strata" train "${common[@]}" --topology "$topo" --strategy ddp --pp 2 --batch 2 \
  --out "$work/bad"
refused "--pp 2" "$strata" train "${common[@]}" --pp 2 --batch 2 --out "$work/bad"
refused "--pp-layers 1: 1 block count for --pp 2" "${mpi[@]}" -np 4 "$strata" train "${common[@]}" --topology "$topo" \
  --strategy ddp --pp 2 --pp-tier node --pp-layers 1 --batch 2 --out "$work/bad"
refused "--pp-layers 1,2: 3 blocks in all, but the model has 2" "$strata" plan --model tiny --topology "$topo" \
  --nodes 2 --peak-tflops 1 --device-memory-gb 1 --hbm-gbps 1 --strategy zero1 --pp 2 --pp-layers 1,2
echo "pp_cli_test: ok"
