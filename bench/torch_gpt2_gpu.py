#!/usr/bin/env python3
"""PyTorch's own GPT-2 training step on one GPU: the peer `strata bench step --device cuda`
is measured against in scripts/gpu-check.sh (issue 15). PyTorch 2.x with CUDA (the GPU
machine's python3, not Debian's CPU-only 1.13).

The model of bench/torch_gpt.py (strata's GPT-2: tied, padded LM head whose padding takes no
part in the loss; tanh GELU; LayerNorm eps 1e-5; its presets and initialisation), run the way
PyTorch runs it fastest: attention through F.scaled_dot_product_attention (causal, flash:
torch_gpt.build_model(flash=True)), bf16 autocast over fp32 master weights (as strata's --precision bf16), fused AdamW
(0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and embeddings), gradient clipping at 1.0.
--mode eager runs it as is; --mode compile wraps the model in torch.compile first (compile
time is reported apart, not in tokens/s).

  python3 bench/torch_gpt2_gpu.py --model gpt2-124m --batch 8 --seq 1024 --mode compile
prints one JSON object: tokens_per_s over the timed steps, step times, the final loss.
"""
import argparse
import json
import math
import sys
import time

import torch_gpt  # this folder: the model, its presets and initialisation (imports torch lazily)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2-124m", choices=["tiny", "small", "gpt2-124m"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (after compiling)")
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    try:
        import torch
    except ImportError:
        sys.exit(f"torch_gpt2_gpu: {sys.executable} has no torch (PyTorch 2.x with CUDA is needed)")
    if not torch.cuda.is_available():
        sys.exit("torch_gpt2_gpu: torch.cuda.is_available() is False: no GPU for PyTorch here")
    if args.mode == "compile" and not hasattr(torch, "compile"):
        sys.exit(f"torch_gpt2_gpu: torch {torch.__version__} has no torch.compile (PyTorch 2.x is needed)")

    cfg = torch_gpt.PRESETS[args.model]
    if args.seq > cfg["seq_len"]:
        sys.exit(f"torch_gpt2_gpu: --seq {args.seq} exceeds the model's seq_len {cfg['seq_len']}")
    dev = torch.device("cuda")
    torch.manual_seed(args.seed)
    model = torch_gpt.build_model(cfg, flash=True)
    torch_gpt.init_gpt2(model, args.seed)
    model.to(dev)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": torch_gpt.WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=torch_gpt.ADAMW_BETAS, eps=torch_gpt.ADAMW_EPS, fused=True)
    run = torch.compile(model) if args.mode == "compile" else model
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    batches = [(torch.randint(0, cfg["vocab_size"], (args.batch, args.seq), device=dev, generator=gen),
                torch.randint(0, cfg["vocab_size"], (args.batch, args.seq), device=dev, generator=gen))
               for _ in range(4)]

    def step(i):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = run(*batches[i % len(batches)])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), torch_gpt.GRAD_CLIP)
        opt.step()
        return loss

    start = time.perf_counter()
    step(0)  # compiles under --mode compile
    torch.cuda.synchronize()
    first_step_s = time.perf_counter() - start
    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize()
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        loss = step(i)
        loss_value = loss.item()  # waits for the step, as strata's step returns its loss
        times.append(time.perf_counter() - t0)
    if not math.isfinite(loss_value):
        sys.exit("torch_gpt2_gpu: loss is not finite")
    tokens = args.batch * args.seq
    print(json.dumps({
        "impl": "pytorch", "mode": args.mode, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
        "model": args.model, "batch": args.batch, "seq": args.seq, "steps": len(times),
        "first_step_s": first_step_s, "step_ms_median": 1e3 * sorted(times)[len(times) // 2],
        "tokens_per_s": tokens * len(times) / sum(times), "final_loss": loss_value,
    }))


if __name__ == "__main__":
    main()
