"""bench/plan_vs_cluster_repeats.py on made-up work folders: it keeps only the pairs whose
measured order repeats in every run, counts the predictions that order them the same, names a
pair a prediction orders the other way (exit 1), and refuses a missing folder.

usage: cluster_repeats_test.py SOURCE_DIR
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def write_run(work, rate_model, predicted, measured_steps):
    run = work / rate_model
    run.mkdir(parents=True)
    (run / "plan.json").write_text(json.dumps({"strategies": {n: {"step_time_s": s} for n, s in predicted.items()}}))
    for name, steps in measured_steps.items():
        (run / name).mkdir()
        (run / name / "summary.json").write_text(json.dumps({"tokens_per_step": 100}))
        # step 1 is left out by the script: make it absurd so that using it would show
        lines = [{"tokens_per_s": 1e-3}] + [{"tokens_per_s": 100 / s} for s in steps]
        (run / name / "metrics.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))


def run_script(source, *works):
    return subprocess.run([sys.executable, str(source / "bench" / "plan_vs_cluster_repeats.py"), *map(str, works)],
                          capture_output=True, text=True)


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")


def main():
    source = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # a < b < c in both runs; b and c swap in run 2's measurement: only a/b and a/c repeat.
        write_run(tmp / "r1", "1gbit-tiny", {"a": 1.0, "b": 2.0, "c": 3.0}, {"a": [1, 1.1], "b": [2, 2], "c": [3, 3]})
        write_run(tmp / "r2", "1gbit-tiny", {"a": 1.0, "b": 2.0, "c": 3.0}, {"a": [1, 1], "b": [3, 3], "c": [2, 2]})
        done = run_script(source, tmp / "r1", tmp / "r2")
        check(done.returncode == 0, f"agreeing predictions: exit {done.returncode}\n{done.stdout}{done.stderr}")
        check("| 1gbit | tiny | 2 | 2 of 3 | 4 of 4 |" in done.stdout, f"counts:\n{done.stdout}")

        # run 3 predicts c before a: a/c is ordered the other way there, and named.
        write_run(tmp / "r3", "1gbit-tiny", {"a": 3.5, "b": 4.0, "c": 3.0}, {"a": [1, 1], "b": [2, 2], "c": [3, 3]})
        done = run_script(source, tmp / "r1", tmp / "r2", tmp / "r3")
        check(done.returncode == 1, f"a disagreeing prediction: exit {done.returncode}\n{done.stdout}")
        check("| 1gbit | tiny | 3 | 2 of 3 | 5 of 6 |" in done.stdout, f"counts with run 3:\n{done.stdout}")
        check("ordered the other way: a/c" in done.stdout, f"the pair named:\n{done.stdout}")

        done = run_script(source, tmp / "r1", tmp / "missing")
        check(done.returncode != 0 and "missing: no such folder" in done.stderr, f"missing folder:\n{done.stderr}")
    print("ok")


if __name__ == "__main__":
    main()
