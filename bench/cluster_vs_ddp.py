#!/usr/bin/python3
"""strata against PyTorch DDP across shaped links (issue 46), on the namespace cluster
(docs/cluster.md): HOSTS hosts x RANKS ranks of one thread, links shaped by
scripts/cluster.sh at each RATE; the same model and batch for every engine, engines
alternated in each round; global tokens/s is the median of the steps after WARMUP.

  pytorch  DistributedDataParallel over gloo (Debian's PyTorch 1.13), a process per rank,
           started inside its host's namespace, gloo on the data network (eth0); AdamW and
           the training step of bench/torch_gpt.py
  strata   `mpirun strata train --strategy S --topology host` (the cluster's mpirun), S in
           --strategies (default ddp zero3)

For strata it also prints the exposed communication a step (the summary's exposed_comm_s)
against the link's own time for what a host sends a step: the `cluster` tier's accounted
bytes x ranks a host, with TCP/IP headers (66 bytes a 1448-byte segment), over the rate.

Root; makes and removes its own cluster (name "sddp").
  /usr/bin/python3 bench/cluster_vs_ddp.py --rates 100mbit 1gbit --models h128 small --rounds 3
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import torch_gpt  # noqa: E402

MODELS = {
    "h128": dict(n_layer=4, n_head=4, n_embd=128, seq_len=128, vocab_size=256, padded_vocab_size=256),
    "small": torch_gpt.PRESETS["small"],
}
BATCH = {"h128": 8, "small": 4}  # sequences a rank
NAME = "sddp"
TORCH_PORT = 29577


def rate_bytes_per_s(rate):
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
    if not m:
        sys.exit(f"cluster_vs_ddp: rate {rate}: give e.g. 100mbit or 1gbit")
    return float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]] / 8


def torch_rank(args):
    """One PyTorch rank (run inside its host's namespace): prints each step's seconds as JSON."""
    os.environ.update(GLOO_SOCKET_IFNAME="eth0")
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    cfg = MODELS[args.model]
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{TORCH_PORT}", rank=args.torch_rank,
                            world_size=args.world)
    model = torch_gpt.build_model(cfg)
    torch_gpt.init_gpt2(model, seed=1234)
    ddp = DistributedDataParallel(model)
    opt = torch_gpt.make_optimizer(model, lr=3e-4, foreach=False)
    gen = torch.Generator().manual_seed(1000 + args.torch_rank)
    T, V, B = cfg["seq_len"], cfg["vocab_size"], BATCH[args.model]
    batches = [tuple(torch.randint(0, V, (B, T), generator=gen) for _ in range(2)) for _ in range(4)]
    times = []
    dist.barrier()
    for i in range(args.steps):
        t0 = time.perf_counter()
        torch_gpt.train_step(ddp, opt, *batches[i % 4])
        times.append(time.perf_counter() - t0)
    dist.barrier()
    if args.torch_rank == 0:
        print(json.dumps({"step_s": times}), flush=True)
    dist.destroy_process_group()


def cluster(*args):
    subprocess.run([os.path.join(ROOT, "scripts", "cluster.sh"), *args, "--name", NAME], check=True,
                   stdout=subprocess.DEVNULL)


def measure_torch(model, hosts, ranks, steps, warmup):
    world = hosts * ranks
    procs = []
    for r in range(world):
        cmd = ["ip", "netns", "exec", f"{NAME}-h{r // ranks}", "env", "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1",
               "/usr/bin/python3", os.path.abspath(__file__), "--torch-rank", str(r), "--world", str(world),
               "--master", "198.18.0.1", "--model", model, "--steps", str(steps)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate() for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            sys.exit(f"cluster_vs_ddp: a PyTorch rank failed ({p.returncode}):\n{err[-3000:]}")
    step_s = json.loads(outs[0][0].strip().splitlines()[-1])["step_s"][warmup:]
    cfg = MODELS[model]
    return {"tokens_per_s": world * BATCH[model] * cfg["seq_len"] / statistics.median(step_s)}


def measure_strata(strata, strategy, model, hosts, ranks, steps, warmup, data, out):
    cfg = MODELS[model]
    cmd = [f"/run/strata-cluster/{NAME}/mpirun", "--oversubscribe", "--bind-to", "none", "--mca",
           "mpi_yield_when_idle", "1", "-x", "OMP_NUM_THREADS=1", "-np", str(hosts * ranks), strata, "train",
           "--strategy", strategy, "--topology", "host", "--model", "small"]
    for field in ("n_layer", "n_head", "n_embd", "seq_len", "vocab_size"):
        cmd += ["--" + field.replace("_", "-"), str(cfg[field])]
    cmd += ["--batch", str(BATCH[model]), "--steps", str(steps), "--threads", "1", "--train-data", data,
            "--log-every", str(steps), "--out", out, "--overwrite"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"cluster_vs_ddp: {' '.join(cmd)} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        steps_ = [json.loads(line) for line in f if line.strip()][warmup:]
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    host_bytes = summary["comm"]["per_step"]["cluster"]["bytes_sent"] * ranks
    return {"tokens_per_s": statistics.median(s["tokens_per_s"] for s in steps_),
            "exposed_comm_s": summary.get("exposed_comm_s"), "host_bytes": host_bytes}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    p.add_argument("--rates", nargs="+", default=["100mbit", "1gbit"])
    p.add_argument("--models", nargs="+", default=["h128", "small"], choices=sorted(MODELS))
    p.add_argument("--strategies", nargs="+", default=["ddp", "zero3"])
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--ranks", type=int, default=2, help="ranks a host")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
    p.add_argument("--json", help="also write every measurement here")
    p.add_argument("--torch-rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, help=argparse.SUPPRESS)
    p.add_argument("--master", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.torch_rank is not None:
        return torch_rank(args)
    if os.geteuid() != 0:
        sys.exit("cluster_vs_ddp: needs root (a namespace cluster)")
    torch_gpt.require_torch()
    strata = os.path.abspath(args.strata)
    work = tempfile.mkdtemp(prefix="strata-cluster-ddp-")
    os.chmod(work, 0o755)
    results = []
    try:
        subprocess.run([strata, "data", "prepare", "--input", os.path.join(ROOT, "docs"), "--out",
                        os.path.join(work, "data")], check=True, stdout=subprocess.DEVNULL)
        data = os.path.join(work, "data", "train.bin")
        cluster("up", "--hosts", str(args.hosts), "--slots", str(args.ranks), "--rate", args.rates[0], "--replace")
        for rate in args.rates:
            cluster("shape", "--rate", rate)
            for model in args.models:
                for rnd in range(args.rounds):
                    row = {"rate": rate, "model": model, "round": rnd,
                           "pytorch": measure_torch(model, args.hosts, args.ranks, args.steps, args.warmup)}
                    for s in args.strategies:
                        row[s] = measure_strata(strata, s, model, args.hosts, args.ranks, args.steps, args.warmup,
                                                data, os.path.join(work, s))
                    results.append(row)
                    print(f"{rate} {model} round {rnd}: pytorch {row['pytorch']['tokens_per_s']:.0f} tokens/s; " +
                          "; ".join(f"{s} {row[s]['tokens_per_s']:.0f} ({row[s]['tokens_per_s'] / row['pytorch']['tokens_per_s']:.2f}x), "
                                    f"exposed {row[s]['exposed_comm_s']:.3f} s / link "
                                    f"{row[s]['host_bytes'] * 1514 / 1448 / rate_bytes_per_s(rate):.3f} s"
                                    for s in args.strategies), flush=True)
    finally:
        subprocess.run([os.path.join(ROOT, "scripts", "cluster.sh"), "down", "--name", NAME],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nmedians over {args.rounds} rounds ({args.hosts} hosts x {args.ranks} ranks, 1 thread each); "
          "ratio = strata / PyTorch DDP tokens/s; exposed / link = exposed communication a step over the link's "
          "time for the bytes a host sends a step")
    for rate in args.rates:
        for model in args.models:
            rows = [r for r in results if r["rate"] == rate and r["model"] == model]
            cells = []
            for s in args.strategies:
                ratio = statistics.median(r[s]["tokens_per_s"] / r["pytorch"]["tokens_per_s"] for r in rows)
                link = rows[0][s]["host_bytes"] * 1514 / 1448 / rate_bytes_per_s(rate)
                exposed = statistics.median(r[s]["exposed_comm_s"] for r in rows)
                cells.append(f"{s} {ratio:.2f}x (exposed/link {exposed / link:.2f})")
            print(f"{rate:8} {model:6} " + "  ".join(cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
