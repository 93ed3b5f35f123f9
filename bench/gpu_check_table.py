#!/usr/bin/env python3
"""The table scripts/gpu-check.sh prints last: strata's bf16 training step against PyTorch's
eager and compiled runs of the same model and shape, from the JSON results in one folder:
  strata_step.json   `strata bench step --device cuda --json`
  strata_zero3.json  the summary of `strata train --strategy zero3 --device cuda` (mpirun -np 1),
                     the same model and shape sharded over NCCL
  torch_eager.json, torch_compile.json   bench/torch_gpt2_gpu.py
  strata_llama_step.json   `strata bench step --device cuda --json` of a Llama (no PyTorch run)
TFLOP/s = tokens/s x strata's FLOPs per token (ModelConfig::flops_per_token, the same count for
the GPT-2 rows; the Llama row its own model's); MFU = TFLOP/s / --peak-tflops (H200: 989, dense
bf16). A missing result is a row of dashes.
  python3 bench/gpu_check_table.py RESULTS_DIR [--peak-tflops 989]
"""
import argparse
import json
import os


def load(folder, name):
    try:
        with open(os.path.join(folder, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def table(folder, peak):
    strata = load(folder, "strata_step.json")
    lines = []
    if strata:
        fpt = strata["flops_per_token"]
        lines.append(f"{strata['model']}, batch {strata['batch']} x seq {strata['seq']}, {strata['precision']}; "
                     f"MFU against {peak:g} TFLOP/s; {fpt:.4g} FLOPs per token (strata's count, every GPT-2 row)")
    else:
        fpt = None
        lines.append("strata's step did not run: no TFLOP/s or MFU")
    lines.append(f"{'run':<18} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU':>7} {'strata / it':>12}")
    for name, r in (("strata", strata), ("strata zero3", load(folder, "strata_zero3.json")),
                    ("pytorch eager", load(folder, "torch_eager.json")),
                    ("pytorch compile", load(folder, "torch_compile.json"))):
        if not r:
            lines.append(f"{name:<18} {'-':>10} {'-':>8} {'-':>7} {'-':>12}")
            continue
        tps = r["tokens_per_s"]
        if fpt is None:
            lines.append(f"{name:<18} {tps:>10.0f} {'-':>8} {'-':>7} {'-':>12}")
            continue
        tflops = tps * fpt / 1e12
        lines.append(f"{name:<18} {tps:>10.0f} {tflops:>8.1f} {100 * tflops / peak:>6.1f}% "
                     f"{strata['tokens_per_s'] / tps:>11.2f}x")
    llama = load(folder, "strata_llama_step.json")
    if llama:
        tps = llama["tokens_per_s"]
        tflops = tps * llama["flops_per_token"] / 1e12
        lines.append(f"{'strata llama':<18} {tps:>10.0f} {tflops:>8.1f} {100 * tflops / peak:>6.1f}% {'-':>12}")
        lines.append(f"  strata llama: {llama['model']}, batch {llama['batch']} x seq {llama['seq']}, "
                     f"{llama['precision']}; {llama['flops_per_token']:.4g} FLOPs per token (its own)")
    else:
        lines.append(f"{'strata llama':<18} {'-':>10} {'-':>8} {'-':>7} {'-':>12}")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    args = p.parse_args()
    print(table(args.folder, args.peak_tflops))


if __name__ == "__main__":
    main()
