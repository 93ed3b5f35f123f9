#!/usr/bin/python3
"""strata's full training step (forward, backward, AdamW) against its peers, measured on
this machine in one run: Debian's PyTorch 1.13 running the twin of bench/torch_gpt.py at
its best thread settings, and, when LLMC_DIR points at a checkout of karpathy/llm.c,
llm.c's CPU trainer (bench/llmc.py). Prints tokens/s of each and the ratios strata/peer.

  /usr/bin/python3 bench/compare_step.py                     # strata and PyTorch
  LLMC_DIR=~/llm.c /usr/bin/python3 bench/compare_step.py    # and llm.c

Configurations (issue 2): `small` at batch 4, and hidden 128 (4 layers, 4 heads, seq 128,
vocab 256) at batch 8; 2 threads each. For every configuration the three run back to back,
so a change in the machine's load shows up in all three rather than in one.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_gpt  # noqa: E402

# name -> (preset, overrides, batch). The overrides are flags both strata and torch_gpt.py take.
CONFIGS = {
    "small": ("small", {}, 4),
    "h128": ("small", {"n_layer": 4, "n_head": 4, "n_embd": 128, "seq_len": 128, "vocab_size": 256}, 8),
    "llama-small": ("llama-small", {}, 4),
}


def model_flags(preset, overrides):
    flags = ["--model", preset]
    for field, value in overrides.items():
        flags += ["--" + field.replace("_", "-"), str(value)]
    return flags


def run_json(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"compare_step: {' '.join(cmd)} failed ({out.returncode}):\n"
                 f"{out.stdout[-2000:]}{out.stderr[-4000:]}")
    return json.loads(out.stdout)


def measure_strata(strata, preset, overrides, batch, threads, steps):
    cmd = [strata, "bench", "step"] + model_flags(preset, overrides) + [
        "--batch", str(batch), "--threads", str(threads), "--steps", str(steps), "--warmup", "3", "--json"]
    # The same wait policy as the peers run with: OpenMP's spinning threads collapse when
    # anything else shares the cores (unless the caller chose a policy).
    return run_json(cmd, env={**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")})


def measure_pytorch(preset, overrides, batch, threads, full_sweep):
    cmd = [sys.executable, os.path.join(HERE, "torch_gpt.py"), "--sweep"] + (["--full"] if full_sweep else [])
    cmd += model_flags(preset, overrides) + ["--batch", str(batch), "--threads", str(threads)]
    return run_json(cmd)


def measure_llmc(llmc_dir, preset, overrides, batch, threads):
    import llmc
    cfg = dict(torch_gpt.PRESETS[preset], **overrides)
    cfg["padded_vocab_size"] = torch_gpt.pad_vocab(cfg["vocab_size"])
    return llmc.measure(llmc_dir, cfg, batch, cfg["seq_len"], threads)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strata", default=os.path.join(HERE, "..", "build", "strata"), help="the strata binary")
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--strata-steps", type=int, default=20, help="timed steps of `strata bench step`")
    p.add_argument("--full-sweep", action="store_true",
                   help="PyTorch over every thread setting, not the quick grid")
    p.add_argument("--llmc-dir", default=os.environ.get("LLMC_DIR"),
                   help="llm.c checkout (default $LLMC_DIR)")
    p.add_argument("--json", help="also write every measurement to this file")
    args = p.parse_args()
    torch_gpt.require_torch()
    if not os.access(args.strata, os.X_OK):
        sys.exit(f"compare_step: no strata binary at {args.strata}: "
                 "build it first (ninja -C build) or pass --strata")
    names = args.configs.split(",")
    for n in names:
        if n not in CONFIGS:
            sys.exit(f"compare_step: unknown configuration '{n}' (known: {', '.join(CONFIGS)})")
    if not args.llmc_dir:
        print("compare_step: llm.c not measured (set LLMC_DIR to a checkout of karpathy/llm.c to include it)")

    load_before = os.getloadavg()[0]
    results = {}
    for name in names:
        preset, overrides, batch = CONFIGS[name]
        print(f"[{name}] batch {batch}, {args.threads} threads", flush=True)
        r = {"strata": measure_strata(args.strata, preset, overrides, batch, args.threads, args.strata_steps)}
        print(f"  strata  {r['strata']['tokens_per_s']:9.0f} tokens/s", flush=True)
        r["pytorch"] = measure_pytorch(preset, overrides, batch, args.threads, args.full_sweep)
        print(f"  pytorch {r['pytorch']['tokens_per_s']:9.0f} tokens/s  best of {len(r['pytorch']['sweep'])} "
              f"settings: {json.dumps(r['pytorch']['settings'])}", flush=True)
        if args.llmc_dir and torch_gpt.PRESETS[preset].get("family", "gpt2") == "gpt2":  # llm.c trains GPT-2 only
            r["llm.c"] = measure_llmc(os.path.abspath(args.llmc_dir), preset, overrides, batch, args.threads)
            print(f"  llm.c   {r['llm.c']['tokens_per_s']:9.0f} tokens/s", flush=True)
        results[name] = r

    print(f"\n{'config':8} {'strata':>9} {'pytorch':>9} {'llm.c':>9} {'strata/pytorch':>15} "
          f"{'strata/llm.c':>13}")
    for name, r in results.items():
        s = r["strata"]["tokens_per_s"]
        t = r["pytorch"]["tokens_per_s"]
        line = f"{name:8} {s:9.0f} {t:9.0f}"
        line += f" {r['llm.c']['tokens_per_s']:9.0f}" if "llm.c" in r else f" {'-':>9}"
        line += f" {s / t:15.2f}"
        line += f" {s / r['llm.c']['tokens_per_s']:13.2f}" if "llm.c" in r else f" {'-':>13}"
        print(line)
    load_after = os.getloadavg()[0]
    print(f"(tokens/s of full training steps; 1-minute load average {load_before:.1f} before, "
          f"{load_after:.1f} after on {os.cpu_count()} cores: anything else running skews all three)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "load_before": load_before, "load_after": load_after,
                       "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
