#!/usr/bin/python3
"""The report of bench/plan_vs_cluster.sh: predicted against measured step time, from a work folder.

A work folder (KEEP_WORK=1) holds one folder a (rate, model), RATE-MODEL, with the calibration
(calibration.toml), the planner's predictions (plan.json) and the training runs of each strategy:
one (STRATEGY/summary.json, metrics.jsonl) or, with the bench's REPEATS, one a repeat
(STRATEGY/repeat-K/...). For one work folder this prints per row the prediction, the measured
median (steps 2.. of every repeat, pooled), the error and both rank orders; the rows whose
repeats' own medians are more than 15% apart (the machine's speed moved between them, by more
than the goal allows a prediction); where each step's time goes
(each tier's busy time, the exposed wait, compute), predicted against measured; each
calibration's compute slowdown beside each tier's all-reduce; ddp's compute against its
prediction (whether the machine ran at its calibrated speed); and the verdict.

The goal (issue 13): every prediction within 15% of the measured median, and the strategies
ranked as measured. A pair of strategies is ranked by the measurement only where their
per-step times' quartiles are apart; a pair inside each other's noise has no measured order,
and no prediction can order it right or wrong. The verdict counts the pairs the measurement
orders; the strict count (every pair, by medians) is printed beside it.

--replan STRATA prices each folder again with that strata binary (`strata plan
--calibration`, the folder's kept calibration and the work folder's cluster.toml, the batch,
sequence and accumulation the runs trained with), in place of the kept plan.json: a change to
the cost model is judged on the kept measurements of every run, which it was not fitted to.
With several work folders it prints one line each and their total.

usage: bench/plan_vs_cluster_report.py [--replan STRATA] WORK_DIR [WORK_DIR ...]
Exit status 1 when a work folder misses the goal.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tomllib

STRATEGY_ORDER = ["ddp", "zero2", "zero3", "hsdp", "zeropp", "topo"]
MODEL_ORDER = ["tiny", "mini", "small"]
WITHIN = 0.15


def rate_bits(rate):
    """'1gbit' -> 1e9: folders sort fastest link first."""
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] if m else 0.0


def groups_of(work):
    """The (rate, model) folders of a work folder, fastest rate first, then by model size."""
    out = []
    for entry in os.listdir(work):
        run = os.path.join(work, entry)
        if "-" in entry and os.path.isfile(os.path.join(run, "calibration.toml")):
            rate, model = entry.split("-", 1)
            out.append((rate, model, run))
    rank = {m: i for i, m in enumerate(MODEL_ORDER)}
    return sorted(out, key=lambda g: (-rate_bits(g[0]), rank.get(g[1], len(rank)), g[1]))


def repeats_of(run, strategy):
    """The folders of a strategy's training runs: STRATEGY itself, or its repeat-K folders in order."""
    folder = os.path.join(run, strategy)
    if os.path.isfile(os.path.join(folder, "summary.json")):
        return [folder]
    found = [(int(m.group(1)), e) for e in os.listdir(folder)
             if (m := re.fullmatch(r"repeat-([0-9]+)", e)) and os.path.isfile(os.path.join(folder, e, "summary.json"))]
    return [os.path.join(folder, e) for _, e in sorted(found)]


def strategies_of(run):
    found = [n for n in os.listdir(run) if os.path.isdir(os.path.join(run, n)) and repeats_of(run, n)]
    return [n for n in STRATEGY_ORDER if n in found] + sorted(n for n in found if n not in STRATEGY_ORDER)


def replan(strata, work, model, run, names):
    """The plan of `run` from its kept calibration, for the configuration its runs trained with."""
    summary = json.load(open(os.path.join(repeats_of(run, names[0])[0], "summary.json")))
    train = summary["config"]["train"]
    # One device's micro-batch and accumulation (--batch-per-device): a TP group of t ran t x
    # the batch, a pipeline of p stages p x the micro-batches.
    batch = train["batch"] // summary.get("tensor_parallel", 1)
    accum = train["grad_accum"] // summary.get("pipeline_stages", 1)
    topology = os.path.join(work, "cluster.toml")
    with open(topology, "rb") as f:
        node_size = tomllib.load(f)["tiers"][0]["size"]
    command = [strata, "plan", "--model", model, "--topology", topology,
               "--nodes", str(summary["world_size"] // node_size), "--micro-batch", str(batch),
               "--batch-per-device", "--seq", str(train["seq"]), "--accum", str(accum), "--precision", train["precision"],
               "--device-memory-gb", "3", "--calibration", os.path.join(run, "calibration.toml"),
               "--strategy", ",".join(names), "--json"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"plan_vs_cluster_report.py: {run}: {' '.join(command)}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def load_run(folder):
    """A training run's summary.json and the lines of its metrics.jsonl."""
    summary = json.load(open(os.path.join(folder, "summary.json")))
    metrics = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))]
    return summary, metrics


def step_samples(summary, metrics):
    """A run's measured step times: steps 2.. (step 1 pays allocation and connection set-up)."""
    return [summary["tokens_per_step"] / m["tokens_per_s"] for m in metrics[1:]]


def measured(run, strategy):
    """A strategy's measurement: the step times of every repeat pooled, each repeat's own median,
    and the repeat whose median is the middle one (the lower of two), whose summary stands for
    the row where one run's figures are shown."""
    runs = [load_run(folder) for folder in repeats_of(run, strategy)]
    per_run = [step_samples(*r) for r in runs]
    medians = [statistics.median(xs) for xs in per_run]
    middle = sorted(range(len(runs)), key=lambda i: medians[i])[(len(runs) - 1) // 2]
    return [x for xs in per_run for x in xs], medians, runs[middle]


def measured_busy(summary, metrics, tier):
    """A tier's measured busy time a step: the summary's rank mean (the least rank's in brackets);
    where the summary has none (a pipeline run's recorded before its summary had it), rank 0's mean over
    steps 2.. of its step reports, marked 'r0'."""
    per_step = summary["comm"]["per_step"][tier]
    if "busy_s" in per_step:
        return f"{per_step['busy_s']:.4f} ({figure(per_step, 'busy_min_s')})"
    return f"{statistics.mean(m['comm'][tier]['busy_s'] for m in metrics[1:]):.4f} r0"


def figure(doc, key):
    return f"{doc[key]:.4f}" if key in doc else "-"


def quartiles(xs):
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def report(work, strata, full):
    """Prints the report of one work folder (all tables when `full`); returns its totals."""
    lines = ["| rate | model | strategy | predicted s | measured s | error | rank predicted | rank measured |",
             "|---|---|---|---|---|---|---|---|"]
    split, split_tiers, overlap, drift, spread, repeats, passes = [], [], [], [], [], 1, []
    errors, same_order = [], []
    by_model = {}  # model -> (|errors|, rank order the same a group)
    resolved, resolved_same, pairs_same, pairs, wrong = 0, 0, 0, 0, []
    for rate, model, run in groups_of(work):
        names = strategies_of(run)
        doc = replan(strata, work, model, run, names) if strata else json.load(open(os.path.join(run, "plan.json")))
        # A strategy given flags on top of its preset (STRATEGY_FLAGS) is named with a '*'.
        plan = {n.rstrip("*"): v for n, v in doc["strategies"].items()}
        tiers = [t["name"] for t in doc["topology"]["tiers"]]
        with open(os.path.join(run, "calibration.toml"), "rb") as f:
            cal = tomllib.load(f)
        overlap.append(f"{rate} {model}: " + ", ".join(
            f"{t['name']} x{t.get('overlap_slowdown', 1):.3g}" +
            (f" (all-reduces of {t['overlap_all_reduce_bytes'] / 1e6:.3g} MB a rank)" if "overlap_all_reduce_bytes" in t
             else "") for t in cal["tiers"]))
        if "pass_spread" in cal.get("compute", {}):
            passes.append(f"{rate} {model}: x{cal['compute']['pass_spread']:.3g}")
        rows, samples = {}, {}
        for n in names:
            samples[n], medians, (summary, metrics) = measured(run, n)
            rows[n] = (plan[n]["step_time_s"], statistics.median(samples[n]))
            repeats = max(repeats, len(medians))
            if max(medians) > (1 + WITHIN) * min(medians):
                spread.append(f"{rate} {model} {n}: " + ", ".join(f"{m:.3f}" for m in medians) +
                              f" s (x{max(medians) / min(medians):.2f})")
            # Where the time goes: each tier's busy time on the communication thread (rank
            # mean, steps 2..; in brackets the least rank's, whose wait for late partners is
            # least), the exposed wait, and compute (rank 0's; in brackets each step's slowest
            # rank's, whom the others wait for), against the planner's. A step's measured
            # compute is its time outside waits, so it holds what the planner prices apart: the
            # optimizer and compute's slowdown beside communication.
            # (Runs before session 18 have no least rank's or slowest rank's figure.) With
            # repeats, these are the middle repeat's figures.
            busy = " | ".join(f"{plan[n]['comm_time_per_step'][t]['busy_s']:.4f} / {measured_busy(summary, metrics, t)}"
                              for t in tiers)
            exposed_p = plan[n]["exposed_micro_batch_comm_s"] + plan[n]["step_phase_comm_s"]
            compute_p = plan[n]["compute_s"] + plan[n]["overlap_slowdown_s"] + plan[n]["optimizer_s"]
            exposed_m = statistics.median(m["exposed_comm_s"] for m in metrics[1:])
            split.append(f"| {rate} | {model} | {n} | {busy} | {exposed_p:.4f} / {exposed_m:.4f} | "
                         f"{compute_p:.4f} / {summary['compute_s']:.4f} ({figure(summary, 'compute_max_s')}) |")
            # ddp overlaps least (at most its last buckets beside backward), so its compute
            # measured against predicted checks the calibration's compute before any overlap
            # term: far from 1, the machine ran at another speed than it was calibrated at (run
            # 16's 1gbit mini: x1.32), or the calibration mis-times the step's compute.
            if n == "ddp":
                slowest = f" (slowest rank x{summary['compute_max_s'] / compute_p:.2f})" if "compute_max_s" in summary else ""
                drift.append(f"{rate} {model}: x{summary['compute_s'] / compute_p:.2f}{slowest}")
            split_tiers = tiers
        by_pred = sorted(names, key=lambda n: rows[n][0])
        by_meas = sorted(names, key=lambda n: rows[n][1])
        same_order.append(by_pred == by_meas)
        errs, orders = by_model.setdefault(model, ([], []))
        orders.append(by_pred == by_meas)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                agree = (rows[a][0] < rows[b][0]) == (rows[a][1] < rows[b][1])
                pairs += 1
                pairs_same += agree
                (qa1, qa3), (qb1, qb3) = quartiles(samples[a]), quartiles(samples[b])
                if qa3 < qb1 or qb3 < qa1:
                    resolved += 1
                    resolved_same += agree
                    if not agree:
                        wrong.append(f"{rate} {model} {a}/{b}")
        for n in names:
            p, m = rows[n]
            err = p / m - 1
            errors.append(abs(err))
            errs.append(abs(err))
            lines.append(f"| {rate} | {model} | {n} | {p:.4f} | {m:.4f} | {100 * err:+.1f}% | "
                         f"{by_pred.index(n) + 1} | {by_meas.index(n) + 1} |")
    if not errors:
        raise SystemExit(f"plan_vs_cluster_report.py: {work}: no RATE-MODEL folder with a calibration.toml")
    within = sum(e <= WITHIN for e in errors)
    met = within == len(errors) and resolved_same == resolved
    if full:
        print("\n".join(lines))
        print("\npredicted / measured seconds a step: each tier's communication busy time (rank mean; the least "
              "rank's in brackets), the exposed wait, and compute with its slowdown beside communication and the "
              "optimizer (rank 0; each step's slowest rank in brackets)"
              + (", of each row's middle repeat" if repeats > 1 else "") + "\n")
        print("| rate | model | strategy | " + " | ".join(f"{t} busy" for t in split_tiers) + " | exposed | compute |")
        print("|---|---|---|" + "---|" * (len(split_tiers) + 2))
        print("\n".join(split))
        print("\ncompute beside each tier's all-reduce / alone (the calibrations' overlap_slowdown):")
        print("\n".join(overlap))
        if passes:
            print("\neach calibration's compute passes, the slowest's matmul time / the fastest's (above x1.25, as strata calibrate notes, the "
                  "machine changed speed while it calibrated; the pooled medians follow the majority of passes):")
            print("\n".join(passes))
        if drift:
            print("\nddp's compute, measured (rank 0) / predicted (ddp overlaps least; far from 1: the machine's speed moved "
                  "since calibrate, or calibrate mis-times the step):")
            print("\n".join(drift))
        if repeats > 1:
            print(f"\nrows whose repeats' medians are more than 15% apart (of {repeats} repeats a row; the measured "
                  "median pools their steps):")
            print("\n".join(spread) if spread else "none")
        print(f"\n{within} of {len(errors)} predictions within 15% (mean |error| {100 * statistics.mean(errors):.1f}%, "
              f"worst {100 * max(errors):.1f}%); rank order the same in {sum(same_order)} of {len(same_order)} "
              "(rate, model) groups")
        for model, (errs, orders) in by_model.items():
            print(f"  {model}: {sum(e <= WITHIN for e in errs)} of {len(errs)} within 15% (mean |error| "
                  f"{100 * statistics.mean(errs):.1f}%, worst {100 * max(errs):.1f}%); rank order the same in "
                  f"{sum(orders)} of {len(orders)} groups")
        print(f"pairs of strategies ordered the same: {pairs_same} of {pairs}; of the {resolved} pairs the measurement "
              f"itself orders (their per-step times' quartiles apart), {resolved_same}"
              + (f" (the other way: {', '.join(wrong)})" if wrong else ""))
        print(f"goal (every prediction within 15%, every pair the measurement orders ordered the same): "
              f"{'met' if met else 'missed'}")
    return within, errors, resolved, resolved_same, met


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s [--replan STRATA] WORK_DIR [WORK_DIR ...]")
    parser.add_argument("--replan", metavar="STRATA", help="price the kept calibrations again with this strata")
    parser.add_argument("works", nargs="+", metavar="WORK_DIR")
    args = parser.parse_args(argv)
    for work in args.works:
        if not os.path.isdir(work):
            raise SystemExit(f"plan_vs_cluster_report.py: {work}: no such folder")
    if len(args.works) == 1:
        return 0 if report(args.works[0], args.replan, full=True)[-1] else 1
    print("| work folder | within 15% | mean \\|error\\| | worst | measured-ordered pairs ordered the same | goal |")
    print("|---|---|---|---|---|---|")
    all_errors, all_within, all_resolved, all_same, all_met = [], 0, 0, 0, True
    for work in args.works:
        within, errors, resolved, same, met = report(work, args.replan, full=False)
        print(f"| {work} | {within} of {len(errors)} | {100 * statistics.mean(errors):.1f}% | "
              f"{100 * max(errors):.1f}% | {same} of {resolved} | {'met' if met else 'missed'} |")
        all_errors += errors
        all_within, all_resolved, all_same, all_met = all_within + within, all_resolved + resolved, all_same + same, all_met and met
    print(f"| all | {all_within} of {len(all_errors)} | {100 * statistics.mean(all_errors):.1f}% | "
          f"{100 * max(all_errors):.1f}% | {all_same} of {all_resolved} | {'met' if all_met else 'missed'} |")
    return 0 if all_met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
