#!/usr/bin/python3
"""Measure llm.c's CPU trainer (train_gpt2.c) on a strata benchmark configuration.

Nothing of llm.c is part of strata: this uses a checkout the user points to (LLMC_DIR or
--llmc-dir, a clone of github.com/karpathy/llm.c) and works in a temporary folder:
  1. copies train_gpt2.c there and edits three constants of its main(), which takes no
     command-line flags: the batch size `int B = 4;`, the sequence length `int T = 64;` and
     the step count `step <= 40` (kept below 20 so that no sampling runs between steps);
     each edit must match exactly once, so a changed llm.c is refused, not mis-measured;
  2. builds it as llm.c's Makefile does for CPU: cc -Ofast -march=native -fopenmp -DOMP;
  3. writes the model checkpoint its main() loads by fixed path, gpt2_124M.bin (a header of
     256 int32: magic 20240326, version 3, max_seq_len, vocab_size, num_layers, num_heads,
     channels, padded_vocab_size; then the fp32 parameters in llm.c's order), holding a
     GPT-2 random initialisation of the configuration, and the token files it reads,
     dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin (256 int32: magic 20240520,
     version 1, token count; then uint16 tokens), of uniformly random tokens;
  4. runs it with OMP_NUM_THREADS threads and parses "step N: train loss L (took X ms)".
     Step 0 is left out: llm.c allocates gradients and AdamW moments lazily inside it.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.exit(f"{sys.executable} has no numpy: run this with Debian's /usr/bin/python3")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402

MODEL_MAGIC, MODEL_VERSION = 20240326, 3
DATA_MAGIC, DATA_VERSION = 20240520, 1
MAX_STEP = 15  # steps 0..15: llm.c samples text at step 20, which would not be timed but costs


def _edit_once(text, old, new):
    count = text.count(old)
    if count != 1:
        raise SystemExit(f"llmc: expected '{old}' once in train_gpt2.c, found it {count} times; "
                         "this llm.c differs from the one bench/llmc.py was written for")
    return text.replace(old, new)


def write_checkpoint(path, cfg, seed):
    """gpt2_124M.bin for cfg: llm.c's header, then its 16 parameter tensors in its order, each
    layer-major ([L, ...]), weights [out, in] as in the twin."""
    model = torch_gpt.build_model(cfg)
    torch_gpt.init_gpt2(model, seed)
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    L = cfg["n_layer"]

    def stacked(suffix):
        return np.stack([sd[f"h.{l}.{suffix}"] for l in range(L)])

    tensors = [sd["wte.weight"], sd["wpe.weight"], stacked("ln_1.weight"), stacked("ln_1.bias"),
               stacked("attn.c_attn.weight"), stacked("attn.c_attn.bias"), stacked("attn.c_proj.weight"),
               stacked("attn.c_proj.bias"), stacked("ln_2.weight"), stacked("ln_2.bias"),
               stacked("mlp.c_fc.weight"), stacked("mlp.c_fc.bias"), stacked("mlp.c_proj.weight"),
               stacked("mlp.c_proj.bias"), sd["ln_f.weight"], sd["ln_f.bias"]]
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [MODEL_MAGIC, MODEL_VERSION, cfg["seq_len"], cfg["vocab_size"], L, cfg["n_head"],
                  cfg["n_embd"], cfg["padded_vocab_size"]]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for t in tensors:
            f.write(np.ascontiguousarray(t, dtype=np.float32).tobytes())


def write_tokens(path, n_tokens, vocab, rng):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [DATA_MAGIC, DATA_VERSION, n_tokens]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(rng.integers(0, vocab, n_tokens, dtype=np.uint16).tobytes())


def build(llmc_dir, workdir, batch, seq):
    src = os.path.join(llmc_dir, "train_gpt2.c")
    if not os.path.isfile(src) or not os.path.isdir(os.path.join(llmc_dir, "llmc")):
        raise SystemExit(f"llmc: {llmc_dir} is not an llm.c checkout (no train_gpt2.c and llmc/)")
    text = open(src).read()
    text = _edit_once(text, "int B = 4;", f"int B = {batch};")
    text = _edit_once(text, "int T = 64;", f"int T = {seq};")
    text = _edit_once(text, "step <= 40;", f"step <= {MAX_STEP};")
    with open(os.path.join(workdir, "train_gpt2.c"), "w") as f:
        f.write(text)
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-Ofast", "-march=native", "-fopenmp", "-DOMP", "-Wno-unused-result", "-I", llmc_dir,
           "train_gpt2.c", "-lm", "-o", "train_gpt2"]
    out = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"llmc: build failed: {' '.join(cmd)}\n{out.stderr}")


def measure(llmc_dir, cfg, batch, seq, threads, seed=1234, keep=None):
    """tokens/s of llm.c's training step (forward, backward, AdamW) for cfg, batch x seq."""
    if seq > cfg["seq_len"]:
        raise SystemExit(f"llmc: seq {seq} exceeds the model's seq_len {cfg['seq_len']}")
    workdir = keep or tempfile.mkdtemp(prefix="strata-llmc-")
    os.makedirs(workdir, exist_ok=True)
    try:
        build(llmc_dir, workdir, batch, seq)
        write_checkpoint(os.path.join(workdir, "gpt2_124M.bin"), cfg, seed)
        data = os.path.join(workdir, "dev", "data", "tinyshakespeare")
        os.makedirs(data, exist_ok=True)
        rng = np.random.default_rng(seed)
        n_tokens = (MAX_STEP + 8) * batch * seq + 1
        write_tokens(os.path.join(data, "tiny_shakespeare_train.bin"), n_tokens, cfg["vocab_size"], rng)
        write_tokens(os.path.join(data, "tiny_shakespeare_val.bin"), n_tokens, cfg["vocab_size"], rng)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        out = subprocess.run(["./train_gpt2"], cwd=workdir, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"llmc: train_gpt2 failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr}")
        steps = [(int(s), float(ms)) for s, ms in
                 re.findall(r"^step (\d+): train loss [-+.\w]+ \(took ([\d.]+) ms\)", out.stdout, re.M)]
        if len(steps) != MAX_STEP + 1:
            raise SystemExit(f"llmc: expected {MAX_STEP + 1} step lines, got {len(steps)}:\n"
                             f"{out.stdout[-2000:]}")
        timed = [ms for s, ms in steps if s > 0]
        return {"impl": "llm.c", "config": cfg, "batch": batch, "seq": seq, "threads": threads,
                "steps": len(timed), "step_ms_median": sorted(timed)[len(timed) // 2],
                "tokens_per_s": batch * seq * len(timed) / (sum(timed) / 1e3)}
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llmc-dir", default=os.environ.get("LLMC_DIR"),
                   help="llm.c checkout (default $LLMC_DIR)")
    torch_gpt.add_model_args(p)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, help="default: the model's seq_len")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--keep", help="work in this folder and keep it (default: a temporary one)")
    args = p.parse_args()
    if not args.llmc_dir:
        raise SystemExit("llmc: point LLMC_DIR (or --llmc-dir) at a checkout of karpathy/llm.c")
    cfg = torch_gpt.resolve_config(args)
    result = measure(os.path.abspath(args.llmc_dir), cfg, args.batch, args.seq or cfg["seq_len"],
                     args.threads, keep=args.keep)
    print(json.dumps(dict(result, model=args.model)))


if __name__ == "__main__":
    main()
