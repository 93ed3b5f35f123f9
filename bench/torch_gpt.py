#!/usr/bin/python3
"""The PyTorch twin of strata's GPT: the peer strata's speed is measured against, and the
float64 reference its gradients are checked against (tests/peers).

Architecture as src/model/gpt.hpp and layout.hpp describe it: GPT-2 with token and learned
position embeddings, pre-LayerNorm blocks (eps 1e-5) of causal multi-head attention and a
tanh-GELU MLP of 4x hidden, a final LayerNorm and an LM head tied to the token embedding
over the padded vocabulary, whose padded logits take no part in the loss. Linear weights are
stored [out, in] (nn.Linear), as in strata's arena, and parameters carry the same GPT-2
(Hugging Face) names (`h.3.attn.c_attn.weight`).

Training step as strata's: AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices
and embeddings only), global gradient-norm clipping at 1.0.

Run with Debian's PyTorch 1.13 (/usr/bin/python3), not a python first on PATH:
  /usr/bin/python3 bench/torch_gpt.py --bench --model small --batch 4 --threads 2
  /usr/bin/python3 bench/torch_gpt.py --sweep --n-layer 4 --n-head 4 --n-embd 128 --seq-len 128 --batch 8
--bench times full training steps at the thread settings of this process (set
OMP_WAIT_POLICY / OPENBLAS_NUM_THREADS in the environment, --intra/--interop/--foreach on the
command line) and prints one JSON object. --sweep runs --bench in a fresh process for each
setting (OpenMP reads its environment once, at start) and prints the best, with all results.
"""
import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import time

import torch_llama  # this folder: the Llama twin (imports no torch itself)

# Shapes of strata's presets (src/model/config.cpp), fields as in ModelConfig::to_json().
PRESETS = {
    "tiny": dict(n_layer=2, n_head=2, n_embd=64, seq_len=64, vocab_size=256, padded_vocab_size=256),
    "small": dict(n_layer=6, n_head=6, n_embd=384, seq_len=256, vocab_size=256, padded_vocab_size=256),
    "gpt2-124m": dict(n_layer=12, n_head=12, n_embd=768, seq_len=1024, vocab_size=50257,
                      padded_vocab_size=50304),
}

PRESETS.update({name: dict(cfg, family="llama") for name, cfg in torch_llama.PRESETS.items()})

CONFIG_FIELDS = ("n_layer", "n_head", "n_embd", "seq_len", "vocab_size", "padded_vocab_size")

ADAMW_BETAS = (0.9, 0.95)
ADAMW_EPS = 1e-8
WEIGHT_DECAY = 0.1
GRAD_CLIP = 1.0


def _torch():
    # Imported lazily: --sweep must set each child's environment before OpenMP starts.
    try:
        import torch
    except ImportError:
        sys.exit(f"{sys.executable} has no torch: run this with Debian's /usr/bin/python3 (python3-torch)")
    return torch


def require_torch():
    """Fail early, with the fix, when this python cannot run the twin."""
    _torch()


def build_model(cfg, dtype=None, flash=False):
    """flash: attention through F.scaled_dot_product_attention (PyTorch 2.x; how bench/
    torch_gpt2_gpu.py runs it fastest on a GPU) instead of the explicit masked softmax."""
    torch = _torch()
    if cfg.get("family", "gpt2") == "llama":  # the Llama twin, as Hugging Face's LlamaForCausalLM
        model = torch_llama.build_model(torch, cfg)
        return model if dtype is None else model.to(dtype)
    nn = torch.nn
    F = torch.nn.functional
    C, nh = cfg["n_embd"], cfg["n_head"]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            # True above the diagonal: a position never attends to later ones. A plain
            # attribute, not a buffer: DDP would broadcast a buffer, and gloo carries no bool.
            if not flash:
                self.future = torch.ones(cfg["seq_len"], cfg["seq_len"], dtype=torch.bool).triu(1)

        def forward(self, x):
            B, T, _ = x.shape
            hd = C // nh
            # c_attn's output columns are q | k | v, each split into heads of hd channels.
            q, k, v = self.c_attn(x).split(C, dim=2)
            q = q.view(B, T, nh, hd).transpose(1, 2)
            k = k.view(B, T, nh, hd).transpose(1, 2)
            v = v.view(B, T, nh, hd).transpose(1, 2)
            if flash:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
                return self.c_proj(y)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(self.future[:T, :T], float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(C, 4 * C)
            self.c_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = dict(cfg)
            self.wte = nn.Embedding(cfg["padded_vocab_size"], C)
            self.wpe = nn.Embedding(cfg["seq_len"], C)
            self.h = nn.ModuleList([Block() for _ in range(cfg["n_layer"])])
            self.ln_f = nn.LayerNorm(C, eps=1e-5)
            self.logits = None

        def forward(self, idx, targets):
            B, T = idx.shape
            pos = torch.arange(T, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head: B x T x padded_vocab
            self.logits = logits
            V = self.cfg["vocab_size"]
            real = logits if V == logits.shape[-1] else logits[..., :V]
            # fp32 logits into the loss also under bf16 autocast (a no-op in fp32)
            return F.cross_entropy(real.reshape(B * T, V).float(), targets.reshape(B * T))

    model = GPT()
    if dtype is not None:
        model = model.to(dtype)
    return model


def init_gpt2(model, seed):
    """GPT-2 initialisation as init.hpp describes it, for either family (normal 0.02, residual
    projections 0.02/sqrt(2L), zero biases, unit norm gains). Used for benchmarks, where only the
    scale of the weights matters; the reference test loads strata's own weights instead."""
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    residual_std = 0.02 / math.sqrt(2 * model.cfg["n_layer"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif p.dim() == 1:  # LayerNorm gains
                p.fill_(1.0)
            else:
                residual = name.endswith(("c_proj.weight", "o_proj.weight", "down_proj.weight"))
                std = residual_std if residual else 0.02
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * std)


def make_optimizer(model, lr, foreach):
    torch = _torch()
    decay = [p for p in model.parameters() if p.dim() >= 2]   # matrices and embeddings
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # LayerNorm gains and biases
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=ADAMW_BETAS, eps=ADAMW_EPS, foreach=foreach)


def train_step(model, opt, x, y):
    torch = _torch()
    opt.zero_grad(set_to_none=True)
    loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    opt.step()
    return loss


def add_model_args(p):
    """--model PRESET and strata's override flags (--n-layer, ..., as `strata bench step`)."""
    p.add_argument("--model", default="small", choices=sorted(PRESETS))
    for field in CONFIG_FIELDS:
        p.add_argument("--" + field.replace("_", "-"), dest=field, type=int, help="override the preset")


def pad_vocab(vocab_size):
    return (vocab_size + 63) // 64 * 64  # as model::pad_vocab


def resolve_config(args):
    cfg = dict(PRESETS[args.model])
    for field in CONFIG_FIELDS:
        value = getattr(args, field)
        if value is not None:
            cfg[field] = value
    if args.vocab_size is not None and args.padded_vocab_size is None:
        cfg["padded_vocab_size"] = pad_vocab(args.vocab_size)  # the padding follows, as in strata
    if cfg["n_embd"] % cfg["n_head"]:
        sys.exit(f"torch_gpt: n_head = {cfg['n_head']} does not divide n_embd = {cfg['n_embd']}")
    if cfg["padded_vocab_size"] < cfg["vocab_size"]:
        sys.exit("torch_gpt: padded_vocab_size is smaller than vocab_size")
    return cfg


def settings_of(args):
    return {
        "intra_threads": args.intra if args.intra is not None else args.threads,
        "interop_threads": args.interop,
        "foreach": args.foreach,
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "(unset)"),
    }


def bench(args):
    torch = _torch()
    settings = settings_of(args)
    torch.set_num_threads(settings["intra_threads"])
    torch.set_num_interop_threads(args.interop)
    cfg = resolve_config(args)
    T = args.seq if args.seq is not None else cfg["seq_len"]
    torch.manual_seed(args.seed)
    model = build_model(cfg)
    init_gpt2(model, args.seed)
    opt = make_optimizer(model, lr=3e-4, foreach=args.foreach)
    batches = [(torch.randint(0, cfg["vocab_size"], (args.batch, T)),
                torch.randint(0, cfg["vocab_size"], (args.batch, T))) for _ in range(4)]
    for i in range(args.warmup):
        train_step(model, opt, *batches[i % len(batches)])
    times = []
    i = 0
    while i < args.steps or sum(times) < args.min_time:
        start = time.perf_counter()
        loss = train_step(model, opt, *batches[i % len(batches)])
        times.append(time.perf_counter() - start)
        i += 1
    if not math.isfinite(loss.item()):
        sys.exit("torch_gpt: loss is not finite")
    tokens = args.batch * T
    return {
        "impl": "pytorch", "torch": torch.__version__, "model": args.model, "config": cfg,
        "batch": args.batch, "seq": T, "threads": args.threads, "settings": settings,
        "steps": len(times), "step_ms_median": 1e3 * sorted(times)[len(times) // 2],
        "tokens_per_s": tokens * len(times) / sum(times), "final_loss": loss.item(),
    }


def sweep_grid(threads, full):
    """Thread settings to try: intra-op threads, inter-op threads, OMP_WAIT_POLICY (None:
    unset), OPENBLAS_NUM_THREADS (this torch calls the pthread build of OpenBLAS, whose
    threads are not its OpenMP threads) and AdamW's foreach. The quick grid holds PyTorch's
    defaults and the settings that came out on top in full sweeps (bench/README.md)."""
    if full:
        grid = itertools.product(sorted({1, threads}), sorted({1, threads}), ["PASSIVE", "ACTIVE", None],
                                 [None, "1"], [False, True])
        return [dict(intra=i, interop=j, wait=w, blas=b, foreach=f) for i, j, w, b, f in grid]
    return [dict(intra=threads, interop=1, wait=None, blas=None, foreach=False),  # PyTorch's defaults
            dict(intra=threads, interop=1, wait="PASSIVE", blas=None, foreach=False),
            dict(intra=threads, interop=1, wait="PASSIVE", blas=None, foreach=True),
            dict(intra=threads, interop=1, wait=None, blas="1", foreach=True)]


def child_args(args):
    """The command line of one --bench run with args' model, shape and step counts."""
    out = ["--model", args.model, "--batch", str(args.batch), "--threads", str(args.threads),
           "--warmup", str(args.warmup), "--steps", str(args.steps), "--min-time", str(args.min_time),
           "--seed", str(args.seed)]
    for field in CONFIG_FIELDS + ("seq",):
        if getattr(args, field) is not None:
            out += ["--" + field.replace("_", "-"), str(getattr(args, field))]
    return out


def sweep(args):
    results = []
    for s in sweep_grid(args.threads, args.full):
        env = dict(os.environ)
        for var, value in (("OMP_WAIT_POLICY", s["wait"]), ("OPENBLAS_NUM_THREADS", s["blas"])):
            if value is None:
                env.pop(var, None)
            else:
                env[var] = value
        env["OMP_NUM_THREADS"] = str(s["intra"])
        cmd = [sys.executable, os.path.abspath(__file__), "--bench", "--intra", str(s["intra"]),
               "--interop", str(s["interop"])] + (["--foreach"] if s["foreach"] else []) + child_args(args)
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"torch_gpt: {' '.join(cmd)} failed:\n{out.stderr}")
        r = json.loads(out.stdout)
        results.append(r)
        print(f"  {json.dumps(r['settings'])}: {r['tokens_per_s']:.0f} tokens/s", file=sys.stderr)
    best = max(results, key=lambda r: r["tokens_per_s"])
    return dict(best, sweep=[{"settings": r["settings"], "tokens_per_s": r["tokens_per_s"]} for r in results])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--bench", action="store_true", help="time training steps at this process's settings")
    mode.add_argument("--sweep", action="store_true", help="--bench over thread settings; print the best")
    p.add_argument("--full", action="store_true", help="with --sweep: the full grid, not the quick one")
    add_model_args(p)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, help="tokens per sequence (default: the model's seq_len)")
    p.add_argument("--threads", type=int, default=2, help="cores the run may use")
    p.add_argument("--intra", type=int, help="torch.set_num_threads (default --threads)")
    p.add_argument("--interop", type=int, default=1, help="torch.set_num_interop_threads")
    p.add_argument("--foreach", action="store_true", help="AdamW(foreach=True)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10, help="timed steps, at least")
    p.add_argument("--min-time", type=float, default=3.0, help="seconds of timed steps, at least")
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    print(json.dumps(sweep(args) if args.sweep else bench(args)))


if __name__ == "__main__":
    main()
