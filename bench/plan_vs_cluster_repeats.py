#!/usr/bin/python3
"""Rank order across repeated runs of bench/plan_vs_cluster.sh (docs/plan-vs-measured.md).

A run orders a pair of strategies by their measured median step; where the same pair comes out
in a different order in another run of the same code on the same layout, the measurement itself
does not order it, and no prediction can be right or wrong about it. This takes the work folders
of several runs (KEEP_WORK=1), finds for each (rate, model) the pairs whose measured order is the
same in every run, and counts how often each run's prediction orders them the same.

usage: bench/plan_vs_cluster_repeats.py WORK_DIR WORK_DIR [WORK_DIR ...]
Exit status 1 when a prediction orders a repeating pair the other way.
"""
import itertools
import json
import os
import statistics
import sys

from plan_vs_cluster_report import measured


def measured_step(run, strategy):
    """The bench's measured figure: the median step time over steps 2.. (of every repeat)."""
    return statistics.median(measured(run, strategy)[0])


def main(works):
    if len(works) < 2:
        raise SystemExit(__doc__.split("\n\n")[-1])
    groups = {}  # (rate, model) -> [run folder of each work folder]
    for work in works:
        if not os.path.isdir(work):
            raise SystemExit(f"plan_vs_cluster_repeats.py: {work}: no such folder")
        for entry in sorted(os.listdir(work)):
            run = os.path.join(work, entry)
            if os.path.isfile(os.path.join(run, "plan.json")):
                groups.setdefault(tuple(entry.split("-", 1)), []).append(run)
    ok = True
    print("| rate | model | runs | pairs ordered the same in every run | predictions ordering them the same |")
    print("|---|---|---|---|---|")
    for (rate, model), runs in sorted(groups.items()):
        if len(runs) < 2:
            continue
        names = sorted(json.load(open(os.path.join(runs[0], "plan.json")))["strategies"])
        measured = [{n: measured_step(run, n) for n in names} for run in runs]
        predicted = [{n: s["step_time_s"] for n, s in json.load(open(os.path.join(run, "plan.json")))["strategies"].items()}
                     for run in runs]
        repeating = [(a, b) for a, b in itertools.combinations(names, 2)
                     if len({m[a] < m[b] for m in measured}) == 1]
        agree = sum((p[a] < p[b]) == (m[a] < m[b]) for p, m in zip(predicted, measured) for a, b in repeating)
        checked = len(repeating) * len(runs)
        ok &= agree == checked
        print(f"| {rate} | {model} | {len(runs)} | {len(repeating)} of {len(names) * (len(names) - 1) // 2} | "
              f"{agree} of {checked} |")
        for p, m, run in zip(predicted, measured, runs):
            wrong = [f"{a}/{b}" for a, b in repeating if (p[a] < p[b]) != (m[a] < m[b])]
            if wrong:
                print(f"  {run}: ordered the other way: {', '.join(wrong)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
