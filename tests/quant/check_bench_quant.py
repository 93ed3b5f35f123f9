#!/usr/bin/env python3
"""Runs `strata bench quant --json` on a small buffer and checks the report's shape: every
kernel x bits x dtype row present once, with positive times and consistent ratios."""
import json
import subprocess
import sys

strata = sys.argv[1]
out = subprocess.run([strata, "bench", "quant", "--size-mib", "1", "2", "--reps", "1", "--block-size", "100",
                      "--json"], check=True, capture_output=True, text=True).stdout
report = json.loads(out)
assert report["block_size"] == 100 and report["threads"] == 1, report
assert [s["size_mib"] for s in report["sizes"]] == [1, 2], report["sizes"]
want = {(k, b, d) for b in ("int8", "int4") for k, d in
        (("quantize", "f32"), ("quantize", "bf16"), ("quantize", "f16"),
         ("dequantize", "f32"), ("dequantize", "bf16"), ("dequant_add", "f32"))}
for size in report["sizes"]:
    rows = size["rows"]
    assert {(r["kernel"], r["bits"], r["dtype"]) for r in rows} == want and len(rows) == len(want), rows
    for r in rows:
        values = size["values"]
        assert r["bytes"] == values * (4 if r["dtype"] == "f32" else 2), r
        assert r["seconds"] > 0 and r["memcpy_seconds"] > 0, r
        assert abs(r["ratio"] - r["memcpy_seconds"] / r["seconds"]) < 1e-9 * r["ratio"] + 1e-12, r

bad = subprocess.run([strata, "bench", "quant", "--block-size", "0"], capture_output=True, text=True)
assert bad.returncode != 0 and "--block-size 0 must be positive" in bad.stderr, bad.stderr
print("ok")
