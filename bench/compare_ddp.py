#!/usr/bin/python3
"""strata's data-parallel strategies against PyTorch's (issue 4), on one machine in one run:
4 ranks of one thread each, the hidden-128 model (4 layers, 4 heads, hidden 128, seq 128,
vocab 256), batch 8 x seq 128 per rank; global tokens/s of full training steps.

PyTorch 1.13 (Debian's python3-torch) over gloo, launched with torch.multiprocessing.spawn
(torchrun is broken on Python 3.11):
  ddp    DistributedDataParallel, AdamW on every rank
  zero1  DistributedDataParallel + ZeroRedundancyOptimizer(AdamW): optimizer state sharded
(Its FSDP does not run on CPU, and gloo has no reduce-scatter, so nothing sharded further.)
Both use the training step of bench/torch_gpt.py: AdamW 0.9/0.95, weight decay 0.1 on
matrices and embeddings, gradient clipping at 1.0.

strata: `mpirun -np 4 build/strata train --strategy S` for S in ddp, zero1 and, beside them,
zero3 and topo, on random tokens; measured only when `strata train --help` lists
--strategy (the sharding engine of issue 4), and skipped with a message before that.

  /usr/bin/python3 bench/compare_ddp.py
"""
import os

# Every rank is one thread: OpenMP and the pthread OpenBLAS torch calls alike. Set before
# torch loads, so the spawned ranks inherit it.
os.environ.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

try:
    import numpy as np
except ImportError:
    sys.exit(f"{sys.executable} has no numpy: run this with Debian's /usr/bin/python3")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llmc  # noqa: E402
import torch_gpt  # noqa: E402

H128 = dict(n_layer=4, n_head=4, n_embd=128, seq_len=128, vocab_size=256, padded_vocab_size=256)
TORCH_STRATEGIES = ("ddp", "zero1")
STRATA_STRATEGIES = ("ddp", "zero1", "zero3", "topo")


def torch_rank(rank, world, port, strategy, batch, warmup, steps, queue):
    import torch
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = torch_gpt.build_model(H128)
    torch_gpt.init_gpt2(model, seed=1234)
    ddp = DistributedDataParallel(model)
    if strategy == "ddp":
        opt = torch_gpt.make_optimizer(model, lr=3e-4, foreach=False)
    else:
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = ZeroRedundancyOptimizer(
            [{"params": decay, "weight_decay": torch_gpt.WEIGHT_DECAY},
             {"params": no_decay, "weight_decay": 0.0}],
            optimizer_class=torch.optim.AdamW, lr=3e-4, betas=torch_gpt.ADAMW_BETAS, eps=torch_gpt.ADAMW_EPS)
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own slice of the data
    T, V = H128["seq_len"], H128["vocab_size"]
    batches = [tuple(torch.randint(0, V, (batch, T), generator=gen) for _ in range(2)) for _ in range(4)]
    for i in range(warmup):
        torch_gpt.train_step(ddp, opt, *batches[i % 4])
    dist.barrier()
    start = time.perf_counter()
    for i in range(steps):
        loss = torch_gpt.train_step(ddp, opt, *batches[i % 4])
    dist.barrier()
    elapsed = time.perf_counter() - start
    if rank == 0:
        queue.put({"elapsed_s": elapsed, "loss": loss.item()})
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_torch(strategy, world, batch, warmup, steps):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(torch_rank, args=(world, free_port(), strategy, batch, warmup, steps, queue), nprocs=world)
    r = queue.get()
    if not math.isfinite(r["loss"]):
        sys.exit(f"compare_ddp: PyTorch {strategy} loss is not finite")
    tokens = world * batch * H128["seq_len"] * steps
    return {"impl": "pytorch", "strategy": strategy, "world": world, "batch_per_rank": batch, "steps": steps,
            "step_ms": 1e3 * r["elapsed_s"] / steps, "tokens_per_s": tokens / r["elapsed_s"]}


def strata_has_strategies(strata):
    out = subprocess.run([strata, "train", "--help"], capture_output=True, text=True)
    return out.returncode == 0 and "--strategy" in out.stdout


def measure_strata(strata, strategy, world, batch, warmup, steps, data, workdir):
    out_dir = os.path.join(workdir, f"strata-{strategy}")
    # Launched as scripts/compare_strategies.sh does: ranks yield while they wait, since 4
    # ranks share 2 cores here, and talk through shared memory.
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1",
           "--mca", "btl", "self,vader", "-np", str(world), "-x", "OMP_NUM_THREADS=1"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [strata, "train", "--strategy", strategy, "--model", "small"]
    for field in ("n_layer", "n_head", "n_embd", "seq_len", "vocab_size"):
        cmd += ["--" + field.replace("_", "-"), str(H128[field])]
    cmd += ["--batch", str(batch), "--steps", str(warmup + steps), "--threads", "1", "--train-data", data,
            "--log-every", str(warmup + steps), "--out", out_dir, "--overwrite"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"compare_ddp: {' '.join(cmd)} failed ({run.returncode}):\n"
                 f"{run.stdout[-2000:]}{run.stderr[-4000:]}")
    # Steps after the warm-up, as for PyTorch: the harmonic mean of the per-step rates is
    # tokens over time of those steps.
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        rates = [json.loads(line)["tokens_per_s"] for line in f if line.strip()][warmup:]
    with open(os.path.join(out_dir, "summary.json")) as f:
        summary = json.load(f)
    return {"impl": "strata", "strategy": strategy, "world": summary.get("world_size", world),
            "batch_per_rank": batch, "steps": len(rates),
            "tokens_per_s": len(rates) / sum(1 / r for r in rates),
            "exposed_comm_s": summary.get("exposed_comm_s")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strata", default=os.path.join(HERE, "..", "build", "strata"), help="the strata binary")
    p.add_argument("--world", type=int, default=4, help="ranks")
    p.add_argument("--batch", type=int, default=8, help="sequences per rank")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--json", help="also write every measurement to this file")
    args = p.parse_args()
    torch_gpt.require_torch()

    load_before = os.getloadavg()[0]
    results = {"pytorch": {}, "strata": {}}
    for s in TORCH_STRATEGIES:
        results["pytorch"][s] = measure_torch(s, args.world, args.batch, args.warmup, args.steps)
        print(f"pytorch {s:6} {results['pytorch'][s]['tokens_per_s']:9.0f} tokens/s", flush=True)

    if not os.access(args.strata, os.X_OK):
        print(f"strata: not measured, no binary at {args.strata} (build it: ninja -C build)")
    elif not strata_has_strategies(args.strata):
        print("strata: not measured, `strata train --help` lists no --strategy yet "
              "(the sharding engine of issue 4)")
    else:
        workdir = tempfile.mkdtemp(prefix="strata-compare-ddp-")
        try:
            data = os.path.join(workdir, "train.bin")
            n_tokens = (args.warmup + args.steps + 2) * args.world * args.batch * H128["seq_len"] + 1
            llmc.write_tokens(data, n_tokens, H128["vocab_size"], np.random.default_rng(1234))
            for s in STRATA_STRATEGIES:
                results["strata"][s] = measure_strata(args.strata, s, args.world, args.batch, args.warmup,
                                                      args.steps, data, workdir)
                print(f"strata  {s:6} {results['strata'][s]['tokens_per_s']:9.0f} tokens/s", flush=True)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    print(f"\n{args.world} ranks x 1 thread, hidden-128 model, batch {args.batch} x seq {H128['seq_len']} "
          "per rank; global tokens/s")
    print(f"{'strategy':8} {'strata':>9} {'pytorch':>9} {'strata/pytorch':>15}")
    for s in STRATA_STRATEGIES:
        st = results["strata"].get(s, {}).get("tokens_per_s")
        pt = results["pytorch"].get(s, {}).get("tokens_per_s")
        print(f"{s:8} {f'{st:.0f}' if st else '-':>9} {f'{pt:.0f}' if pt else '-':>9} "
              f"{f'{st / pt:.2f}' if st and pt else '-':>15}")
    load_after = os.getloadavg()[0]
    print(f"(1-minute load average {load_before:.1f} before, {load_after:.1f} after, "
          f"on {os.cpu_count()} cores)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_before": load_before, "load_after": load_after, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
