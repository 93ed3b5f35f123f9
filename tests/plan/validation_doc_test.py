"""docs/validation.md cannot go stale silently: every row's `strata plan` command is run, and
the tokens/s a GPU it prints now must be the figure in the table, the row's error must follow
from the measured and predicted figures, and the mean absolute percentage error must follow
from the rows. Rows `RN+cal` price row RN with a shipped calibration: their command must be
RN's plus `--calibration FILE`, their measured figure RN's, and their mean is reported apart.
Rows under a "## Held-out group" heading (added after the model, issue 40) are a group of
their own, and rows under "## Held-out group N" another (group N, its mean line "... over K rows
of held-out group N: **X%**"): each group's mean, the other rows' mean and the mean over all rows
are each checked. A
table row or command named otherwise (e.g. "H1") is refused: it would go unchecked.

usage: validation_doc_test.py STRATA_EXE SOURCE_DIR
"""
import concurrent.futures
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROW = re.compile(r"^\| (R\d+(?:\+cal)?) \|")
COMMAND = re.compile(r"```sh\n# (R\d+(?:\+cal)?)\n(.*?)```", re.S)
ROW_LIKE = re.compile(r"^\| ([A-Z]+\d+\S*) \|", re.M)
COMMAND_LIKE = re.compile(r"```sh\n# (\S+)\n")
MAPE = re.compile(r"mean absolute percentage error over (\d+) rows: \*\*([0-9.]+)%\*\*")
MAPE_CALIBRATED = re.compile(
    r"mean absolute percentage error over (\d+) rows with the shipped calibrations: \*\*([0-9.]+)%\*\*")
MAPE_HELD_OUT = re.compile(r"mean absolute percentage error over (\d+) held-out rows: \*\*([0-9.]+)%\*\*")
MAPE_ALL = re.compile(r"mean absolute percentage error over all (\d+) rows: \*\*([0-9.]+)%\*\*")
HELD_OUT_HEADING = re.compile(r"## Held-out group(?: (\d+))?")
CALIBRATED = "+cal"


def mape_of_group(group):
    """The mean line of held-out group `group` (1: the first group's "held-out rows" line)."""
    if group == 1:
        return MAPE_HELD_OUT, "mean absolute percentage error over N held-out rows: **X%**"
    return (re.compile(rf"mean absolute percentage error over (\d+) rows of held-out group {group}: "
                       r"\*\*([0-9.]+)%\*\*"),
            f"mean absolute percentage error over N rows of held-out group {group}: **X%**")


def rows_of(text):
    """Each row's (measured, predicted, error) and the held-out group (1, 2, ...) of each row
    under a held-out heading."""
    rows, held_out, group = {}, {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = HELD_OUT_HEADING.match(line)
            group = int(heading.group(1) or 1) if heading else None
        if not ROW.match(line):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        row, measured, predicted, error = cells[0], cells[-3], cells[-2], cells[-1]
        rows[row] = (float(measured), int(predicted), error)
        if group is not None:
            held_out[row] = group
    return rows, held_out


def commands_of(text):
    out = {}
    for row, body in COMMAND.findall(text):
        words = shlex.split(body.replace("\\\n", " "))
        if words[:2] != ["strata", "plan"]:
            raise SystemExit(f"{row}: the command must start with 'strata plan', not {words[:2]}")
        out[row] = words[2:]
    return out


def predicted(exe, source_dir, args):
    done = subprocess.run([exe, "plan", *args, "--json"], cwd=source_dir, capture_output=True, text=True)
    if done.returncode != 0:
        return None, done.stderr.strip()
    doc = json.loads(done.stdout)
    (estimate,) = doc["strategies"].values()  # one strategy a row
    return round(estimate["tokens_per_s"] / estimate["world_size"]), ""


def check_mean(text, pattern, errors, what, problems):
    found = pattern.search(text)
    if not found:
        problems.append(f"no '{what}' line")
    elif errors:
        n, mape = int(found.group(1)), float(found.group(2))
        if n != len(errors) or abs(mape - round(sum(errors) / len(errors), 1)) > 1e-9:
            problems.append(f"{what}: the doc says {mape}% over {n} rows, the rows give "
                            f"{sum(errors) / len(errors):.1f}% over {len(errors)}")


def main():
    exe, source_dir = sys.argv[1], Path(sys.argv[2])
    text = (source_dir / "docs" / "validation.md").read_text()
    (rows, held_out), commands = rows_of(text), commands_of(text)
    problems = [f"{name}: a row or command named otherwise than R<n> or R<n>+cal is not checked"
                for name in sorted(set(ROW_LIKE.findall(text)) | set(COMMAND_LIKE.findall(text)))
                if not ROW.match(f"| {name} |")]
    plain = [r for r in rows if not r.endswith(CALIBRATED)]
    if len(plain) < 8:
        problems.append(f"the table has {len(plain)} rows, the issue asks for at least 8")
    if set(rows) != set(commands):
        problems.append(f"rows without a command: {sorted(set(rows) - set(commands))}; "
                        f"commands without a row: {sorted(set(commands) - set(rows))}")
    for row in rows:
        if not row.endswith(CALIBRATED):
            continue
        base = row[: -len(CALIBRATED)]
        if base not in rows or base not in commands or row not in commands:
            problems.append(f"{row}: no row {base} to calibrate")
            continue
        extra = commands[row][len(commands[base]):]
        if commands[row][: len(commands[base])] != commands[base] or len(extra) != 2 or extra[0] != "--calibration":
            problems.append(f"{row}: its command must be {base}'s plus --calibration FILE, not {commands[row]}")
        if rows[row][0] != rows[base][0]:
            problems.append(f"{row}: measured {rows[row][0]}, but {base} says {rows[base][0]}")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        now = dict(zip(commands, pool.map(lambda r: predicted(exe, source_dir, commands[r]), commands)))
    errors = {False: [], True: []}
    held_out_errors = {group: [] for group in held_out.values()}
    order = lambda kv: (int(kv[0][1:].removesuffix(CALIBRATED)), kv[0].endswith(CALIBRATED))
    for row, (measured, in_doc, error) in sorted(rows.items(), key=order):
        figure, stderr = now.get(row, (None, "no command"))
        if figure is None:
            problems.append(f"{row}: strata plan failed: {stderr}")
            continue
        if figure != in_doc:
            problems.append(f"{row}: the table says {in_doc} tokens/s a GPU, strata plan prints {figure} now")
        pct = (in_doc - measured) / measured * 100
        if row in held_out:
            held_out_errors[held_out[row]].append(abs(pct))
        else:
            errors[row.endswith(CALIBRATED)].append(abs(pct))
        if error != f"{pct:+.1f}%":
            problems.append(f"{row}: error {error} in the table, {pct:+.1f}% from its figures")
    check_mean(text, MAPE, errors[False], "mean absolute percentage error over N rows: **X%**", problems)
    if errors[True]:
        check_mean(text, MAPE_CALIBRATED, errors[True],
                   "mean absolute percentage error over N rows with the shipped calibrations: **X%**", problems)
    for group, group_errors in sorted(held_out_errors.items()):
        pattern, what = mape_of_group(group)
        check_mean(text, pattern, group_errors, what, problems)
    if held_out:
        every = errors[False] + [e for group_errors in held_out_errors.values() for e in group_errors]
        check_mean(text, MAPE_ALL, every, "mean absolute percentage error over all N rows: **X%**", problems)
    for p in problems:
        print("FAILED:", p)
    print(f"{len(rows)} rows checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
