#!/usr/bin/env bash
# End to end under mpirun on the 8-rank test topology: for every preset `strata train` writes
# a summary whose measured bytes per tier equal the schedule's and the planner's; a sharded
# run stopped and resumed reproduces the uninterrupted losses bit for bit, and so does one
# recomputing activations; bad specs are refused before training, naming the field.
# Usage: sharded_cli_test.sh STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
strata=$1 src=$2
shift 2
mpi=("$@" -np 8)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Real text (the project's own docs), tokenized by strata itself.
"$strata" data prepare --input "$src/docs" --out "$work/data" --val-fraction 0.2 --chunk-bytes 1024 > /dev/null
topo="$src/configs/topology/2node-2gpu-2die.toml"
common=(--topology "$topo" --model tiny --train-data "$work/data/train.bin" --batch 2 --seq 32 --lr 1e-3)
plan=(--model tiny --topology "$topo" --nodes 2 --precision fp32 --micro-batch 2 --seq 32
      --peak-tflops 1 --device-memory-gb 1 --hbm-gbps 10)

for strategy in ddp zero1 zero2 zero3 hsdp zeropp topo; do
  for accum in 1 2; do
    out="$work/$strategy.$accum"
    "${mpi[@]}" "$strata" train --strategy "$strategy" "${common[@]}" --grad-accum $accum --steps 4 --out "$out" > /dev/null
    /usr/bin/python3 - "$out/summary.json" "$strategy" <<'PY' || fail "$strategy accum $accum: measured bytes differ from the schedule"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["strategy"] == sys.argv[2], s["strategy"]
assert s["world_size"] == 8
assert s["comm"]["steps_measured"] == 3, s["comm"]
for tier, want in s["comm"]["scheduled_per_step"].items():
    got = s["comm"]["per_step"][tier]
    for k in ("bytes_sent", "bytes_received", "messages"):
        assert got[k] == want[k], (tier, k, got[k], want[k])
    # Time in collectives over the tier, wherever the tier carries messages.
    assert (got["busy_s"] > 0) == (got["messages"] > 0), (tier, got)
    # The least rank's busy time: at most the ranks' mean, and positive with it.
    assert 0 <= got["busy_min_s"] <= got["busy_s"] * (1 + 1e-12), (tier, got)
    assert (got["busy_min_s"] > 0) == (got["busy_s"] > 0), (tier, got)
for k in ("weights", "grads", "optimizer"):
    assert s["memory_bytes"][k] > 0
assert s["compute_s"] >= 0 and s["exposed_comm_s"] >= 0
# Each step's slowest rank computed at least as long as this one.
assert s["compute_max_s"] >= s["compute_s"] * (1 - 1e-12), (s["compute_max_s"], s["compute_s"])
PY
    "$strata" plan "${plan[@]}" --strategy "$strategy" --accum $accum --compare-summary "$out/summary.json" \
      | grep -q "^all equal" || fail "$strategy accum $accum: the planner's bytes differ from the run's"
  done
done

# ddp's first bucket (--first-bucket-bytes, 1 MiB by default): a smaller one splits the
# gradient into more buckets, so more messages carry the same bytes; the planner, given the
# same setting, prices the run's buckets exactly; the losses are those of the default's.
out="$work/ddp.first"
"${mpi[@]}" "$strata" train --strategy ddp "${common[@]}" --steps 4 --first-bucket-bytes 16384 --out "$out" > /dev/null
"$strata" plan "${plan[@]}" --strategy ddp --first-bucket-bytes 16384 --compare-summary "$out/summary.json" \
  | grep -q "^all equal" || fail "ddp --first-bucket-bytes: the planner's bytes differ from the run's"
/usr/bin/python3 - "$work/ddp.1" "$out" <<'PY' || fail "ddp --first-bucket-bytes: not more messages for the same bytes and losses"
import json, sys
a, b = (json.load(open(d + "/summary.json"))["comm"]["per_step"]["cluster"] for d in sys.argv[1:])
assert a["bytes_sent"] == b["bytes_sent"] and b["messages"] > a["messages"], (a, b)
la, lb = ([json.loads(l)["loss"] for l in open(d + "/metrics.jsonl")] for d in sys.argv[1:])
assert la == lb, (la, lb)
PY

# Pieces on the wire (--piece-kib, 1 MiB by default): zeropp's int8 gathers and int4
# all-to-all gradient exchange cut into 1 KiB pieces move the same bytes in the same
# messages and give the default's losses, bit for bit.
out="$work/zeropp.pieces"
"${mpi[@]}" "$strata" train --strategy zeropp "${common[@]}" --steps 4 --piece-kib 1 --out "$out" > /dev/null
/usr/bin/python3 - "$work/zeropp.1" "$out" <<'PY' || fail "zeropp --piece-kib 1: not the default's bytes, messages and losses"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert a["config"]["comm"]["piece_kib"] == 1024 and b["config"]["comm"]["piece_kib"] == 1, (a["config"], b["config"])
for tier, got in b["comm"]["per_step"].items():
    for k in ("bytes_sent", "bytes_received", "messages"):
        assert got[k] == a["comm"]["per_step"][tier][k], (tier, k, got, a["comm"]["per_step"][tier])
la, lb = ([json.loads(l)["loss"] for l in open(d + "/metrics.jsonl")] for d in sys.argv[1:])
assert len(la) == 4 and la == lb, (la, lb)
PY

# Stop at step 5, resume to 10: the same losses, bit for bit, as one run of 10 steps.
for strategy in zero3 topo; do
  "${mpi[@]}" "$strata" train --strategy $strategy "${common[@]}" --steps 10 --out "$work/full.$strategy" > /dev/null
  "${mpi[@]}" "$strata" train --strategy $strategy "${common[@]}" --steps 10 --stop-after 5 --out "$work/half.$strategy" > /dev/null
  "${mpi[@]}" "$strata" train --strategy $strategy "${common[@]}" --steps 10 --resume "$work/half.$strategy" \
    --out "$work/half.$strategy" > /dev/null
  /usr/bin/python3 - "$work/full.$strategy/metrics.jsonl" "$work/half.$strategy/metrics.jsonl" <<'PY' || fail "$strategy resume"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == 10 and a == b, (a, b)
PY
done

# Full activation recomputation: the zero3 run's losses above, bit for bit, holding fewer
# activation bytes (the summary's, which the planner prices: tests/plan).
"${mpi[@]}" "$strata" train --strategy zero3 "${common[@]}" --steps 10 --recompute full --out "$work/recompute" > /dev/null
/usr/bin/python3 - "$work/full.zero3" "$work/recompute" <<'PY' || fail "recompute"
import json, sys
kept, again = sys.argv[1], sys.argv[2]
a = [json.loads(l)["loss"] for l in open(kept + "/metrics.jsonl")]
b = [json.loads(l)["loss"] for l in open(again + "/metrics.jsonl")]
assert len(a) == 10 and a == b, (a, b)
sa, sb = json.load(open(kept + "/summary.json")), json.load(open(again + "/summary.json"))
assert sa["recompute"] is False and sb["recompute"] is True
assert sb["config"]["train"]["recompute"] == "full"
assert 0 < sb["memory_bytes"]["activations"] < sa["memory_bytes"]["activations"], (sa["memory_bytes"], sb["memory_bytes"])
PY
# ... and for a Llama model (grouped K/V heads, untied head).
for r in none full; do
  "${mpi[@]}" "$strata" train --strategy zero3 "${common[@]}" --model llama-tiny --steps 4 --recompute $r \
    --out "$work/llama.$r" > /dev/null
done
/usr/bin/python3 - "$work/llama.none" "$work/llama.full" <<'PY' || fail "llama recompute"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1] + "/metrics.jsonl")]
b = [json.loads(l)["loss"] for l in open(sys.argv[2] + "/metrics.jsonl")]
assert len(a) == 4 and a == b, (a, b)
sa, sb = (json.load(open(d + "/summary.json"))["memory_bytes"]["activations"] for d in sys.argv[1:])
assert 0 < sb < sa, (sa, sb)
PY

# Bad specs are refused before training, naming the field.
expect_error() {
  local want=$1; shift
  if out=$("${mpi[@]}" "$strata" train "${common[@]}" --steps 2 "$@" 2>&1); then fail "accepted: $*"; fi
  grep -q -- "$want" <<<"$out" || fail "'$*' did not say '$want': $out"
}
expect_error "degree(G) >= degree(W)" --strategy zero3 --shard W=node,G=gpu
expect_error "shard.weights = 'rack'" --strategy zero3 --shard W=rack
expect_error "shard.block_size = 7" --strategy zeropp --block-size 7
expect_error "shard.weight_wire = int4" --strategy zero3 --weight-wire int4
expect_error "strategy 'zero4'" --strategy zero4
expect_error "train.recompute = 'half': must be none or full" --strategy zero3 --recompute half
expect_error "comm.piece_kib = -1: must lie in" --strategy zero3 --piece-kib -1
# --print-schedule --world-size N: from one process, the very schedule the N ranks print.
for strategy in zeropp topo; do
  "${mpi[@]}" "$strata" train --strategy $strategy "${common[@]}" --print-schedule > "$work/schedule8.txt"
  "$strata" train --strategy $strategy "${common[@]}" --print-schedule --world-size 8 > "$work/schedule1.txt"
  grep -q "^schedule: strategy $strategy on 8 ranks of '2node-2gpu-2die', 1 micro-batch a step" "$work/schedule1.txt" ||
    fail "$strategy preview: $(head -1 "$work/schedule1.txt")"
  cmp -s "$work/schedule8.txt" "$work/schedule1.txt" || fail "$strategy: the one-process preview differs from mpirun's"
done
# --print-schedule --json: each op's issue points, slots and algorithm and the program's
# parameters; strata plan prints the very schedule it prices.
"$strata" train --strategy zeropp "${common[@]}" --prefetch 2 --print-schedule --json --world-size 8 > "$work/train.json"
"$strata" plan "${plan[@]}" --strategy zeropp --prefetch 2 --print-schedule --json > "$work/plan.json"
/usr/bin/python3 - "$work/train.json" "$work/plan.json" <<'PY' || fail "--print-schedule --json"
import json, sys
t = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2]))["schedules"]["zeropp*"]
assert t["program"]["prefetch"] == 2 and t["program"]["reductions_in_flight"] == 2, t["program"]
assert {op["algorithm"] for op in t["micro_batch_ops"]} == {"ring", "all-to-all"}
for op in t["micro_batch_ops"]:
    assert op["issue_event"] <= op["event"] <= op["complete_by"] <= len(t["program"]["events"]), op
    assert (op["writes"] == "gathered") == (op["kind"] == "all-gather"), op
assert p["micro_batch_ops"] == t["micro_batch_ops"] and p["program"] == t["program"]
PY
# Tensor parallelism: the preview counts the run's ranks and both splits, and strata plan
# prints (and prices) the very schedule `--tp 2` runs, its TP ops included.
"$strata" train --strategy zero3 --tp 2 "${common[@]}" --grad-accum 2 --print-schedule --world-size 8 > "$work/tp.txt"
grep -q "^schedule: strategy zero3 on 8 ranks: tp 2 x 4 data-parallel of '2node-2gpu-2die', 2 micro-batches a step" \
  "$work/tp.txt" || fail "--tp 2 preview: $(head -1 "$work/tp.txt")"
"$strata" train --strategy zero3 --tp 2 "${common[@]}" --grad-accum 2 --print-schedule --json --world-size 8 \
  > "$work/tp_train.json"
"$strata" plan "${plan[@]}" --strategy zero3+tp2 --accum 2 --print-schedule --json > "$work/tp_plan.json"
/usr/bin/python3 - "$work/tp_train.json" "$work/tp_plan.json" <<'PY' || fail "--tp 2: strata plan's schedule differs"
import json, sys
t = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2]))["schedules"]["zero3+tp2"]
assert t["tensor_parallel"] == 2 and p["tensor_parallel"] == 2 and t["tensor_parallel_ops"], t["tensor_parallel_ops"]
for k in ("micro_batch_ops", "tensor_parallel_ops", "step_ops", "per_step", "program"):
    assert p[k] == t[k], k
PY
preview_error() {  # WANT ARGS...: one process, refused saying WANT
  local want=$1 out; shift
  if out=$("$strata" train "${common[@]}" "$@" 2>&1); then fail "accepted: $*"; fi
  grep -q -- "$want" <<<"$out" || fail "'$*' did not say '$want': $out"
}
preview_error "world size 6 is not a multiple of 4 ranks per node" --strategy zero3 --print-schedule --world-size 6
preview_error "--world-size: only with --print-schedule" --strategy zero3 --world-size 8
preview_error "--json: only with --print-schedule" --strategy zero3 --json
preview_error "'host' is measured under mpirun" --strategy zero3 --print-schedule --world-size 8 --topology host
expect_error "--world-size: previews a layout from one process" --strategy zero3 --print-schedule --world-size 8
echo "sharded CLI: all checks passed"
