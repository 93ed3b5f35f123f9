#!/usr/bin/python3
"""Compare one strata forward/backward run (dumped by torch_reference_test.cpp) with the
PyTorch twin of bench/torch_gpt.py (GPT-2) or bench/torch_llama.py (Llama) in float64,
loaded with strata's own weights.

Usage: torch_reference.py DIR   (DIR holds index.json, params.f32, grads.f32, logits.f32,
tokens.i32, targets.i32, and optionally model.safetensors). Exit 0: all checks pass; 1: a
mismatch (each one is printed); 77: torch cannot be imported here, so there is nothing to
compare with.

Checks, each against the float64 twin:
  - initialisation: the documented GPT-2 scheme (zero biases, unit norm gains, normal
    weights of std 0.02, residual projections 0.02/sqrt(2 n_layer)), within 10% on the std;
  - when DIR holds model.safetensors (strata's Hugging Face export), the twin's weights come
    from that file, read with json + numpy under the Hugging Face names, and must equal
    strata's arena (padded vocabulary rows aside): the logits below then check the export;
  - the loss of every micro-batch, relative error <= 1e-5;
  - the logits of the last micro-batch over the real vocabulary, and every gradient tensor
    accumulated over all micro-batches: max |strata - twin| <= 1e-4 max |twin| per tensor
    (fp32 against fp64);
  - exact zeros where no gradient may flow: the rows of vocabulary matrices past vocab_size
    (padded logits are not in the loss), and the arena's alignment padding between tensors.
"""
import json
import math
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when torch loads OpenMP

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"torch_reference: skipped, {sys.executable} cannot import torch/numpy ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import torch_gpt  # noqa: E402

LOSS_RTOL = 1e-5
TENSOR_RTOL = 1e-4
INIT_STD_RTOL = 0.10


def max_rel_error(got, want):
    scale = float(np.abs(want).max())
    return float(np.abs(got - want).max()) / (scale if scale > 0 else 1.0)


class Checker:
    def __init__(self):
        self.failures = []
        self.count = 0

    def expect(self, ok, what):
        self.count += 1
        if not ok:
            self.failures.append(what)
            print("MISMATCH " + what)

    def close(self, name, got, want, rtol):
        err = max_rel_error(got, want)
        self.expect(err <= rtol, f"{name}: max error {err:.3g} of max |ref| > {rtol:g}")
        return err


VOCAB_MATRICES = ("wte.weight", "model.embed_tokens.weight", "lm_head.weight")
RESIDUAL_PROJECTIONS = ("c_proj.weight", "o_proj.weight", "down_proj.weight")


def check_init(chk, params, n_layer, vocab_size):
    residual_std = 0.02 / math.sqrt(2 * n_layer)
    for name, w in params.items():
        if name.endswith(".bias"):
            chk.expect(not w.any(), f"init {name}: biases must start at zero")
        elif w.ndim == 1:
            chk.expect(bool((w == 1).all()), f"init {name}: norm gains must start at one")
        else:
            real = w[:vocab_size] if name in VOCAB_MATRICES else w
            want = residual_std if name.endswith(RESIDUAL_PROJECTIONS) else 0.02
            std, mean = float(real.std()), float(real.mean())
            chk.expect(abs(std - want) <= INIT_STD_RTOL * want and abs(mean) <= 0.1 * want,
                       f"init {name}: mean {mean:.3g} std {std:.4g}, want normal(0, {want:.4g})")


def read_safetensors(path):
    """{name: float32 array} of a safetensors file, with json and numpy alone."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        if e["dtype"] != "F32":
            sys.exit(f"torch_reference: {path}: {name} is {e['dtype']}, expected F32")
        out[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(e["shape"])
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    index = json.load(open(os.path.join(d, "index.json")))
    cfg, B, T = index["config"], index["batch"], index["seq"]
    V, Vp, total = cfg["vocab_size"], cfg["padded_vocab_size"], index["total_floats"]

    def load(name, dtype, count):
        a = np.fromfile(os.path.join(d, name), dtype=dtype)
        if a.size != count:
            sys.exit(f"torch_reference: {name} holds {a.size} values, index.json implies {count}")
        return a

    params = load("params.f32", np.float32, total)
    grads = load("grads.f32", np.float32, total)
    n_micro = index["micro_batches"]
    tokens = load("tokens.i32", np.int32, n_micro * B * T).reshape(n_micro, B, T)
    targets = load("targets.i32", np.int32, n_micro * B * T).reshape(n_micro, B, T)
    logits = load("logits.f32", np.float32, B * T * Vp).reshape(B, T, Vp)

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    model = torch_gpt.build_model(cfg, dtype=torch.float64)
    twin_params = dict(model.named_parameters())
    index_names = [t["name"] for t in index["tensors"]]
    if sorted(index_names) != sorted(twin_params):
        sys.exit(f"torch_reference: tensor names differ\n strata: {sorted(index_names)}\n"
                 f" twin: {sorted(twin_params)}")

    chk = Checker()
    strata_params, strata_grads = {}, {}
    covered = np.zeros(total, dtype=bool)
    for t in index["tensors"]:
        shape, off = tuple(t["shape"]), t["offset"]
        n = math.prod(shape)
        if tuple(twin_params[t["name"]].shape) != shape:
            sys.exit(f"torch_reference: {t['name']} is {shape} in strata, "
                     f"{tuple(twin_params[t['name']].shape)} in the twin")
        strata_params[t["name"]] = params[off:off + n].reshape(shape)
        strata_grads[t["name"]] = grads[off:off + n].reshape(shape)
        covered[off:off + n] = True

    print(f"strata: {cfg}, batch {B} x seq {T}, {n_micro} micro-batches, {index.get('isa', '?')} kernels")
    check_init(chk, strata_params, cfg["n_layer"], V)

    weights = {name: strata_params[name] for name in twin_params}
    exported = os.path.join(d, "model.safetensors")
    if os.path.exists(exported):
        hf = read_safetensors(exported)
        chk.expect(sorted(hf) == sorted(twin_params), f"safetensors names {sorted(hf)} differ from the twin's")
        for name, w in hf.items():
            want = strata_params[name]
            if name in VOCAB_MATRICES:  # exported without the padded rows
                padded = np.zeros(want.shape, dtype=np.float32)
                padded[:w.shape[0]] = w
                w, want = padded, np.concatenate((want[:V], np.zeros_like(want[V:])))
            chk.expect(w.shape == want.shape and bool((w == want).all()),
                       f"safetensors {name} differs from strata's arena")
            weights[name] = w
        print(f"twin weights: {len(hf)} tensors read from {os.path.basename(exported)}")
    with torch.no_grad():
        for name, p in twin_params.items():
            p.copy_(torch.from_numpy(weights[name].astype(np.float64)))
    for m in range(n_micro):
        x = torch.from_numpy(tokens[m].astype(np.int64))
        y = torch.from_numpy(targets[m].astype(np.int64))
        loss = model(x, y)
        (loss * index["grad_scale"]).backward()
        got = index["losses"][m]
        err = abs(got - loss.item()) / abs(loss.item())
        chk.expect(err <= LOSS_RTOL, f"loss of micro-batch {m}: strata {got:.8g}, twin {loss.item():.8g}")
        print(f"loss[{m}]: strata {got:.8f} twin {loss.item():.8f} rel.err {err:.2g}")

    err = chk.close("logits[:, :, :vocab_size]", logits[..., :V].astype(np.float64),
                    model.logits.detach().numpy()[..., :V], TENSOR_RTOL)
    print(f"logits: max rel.err {err:.2g}")
    worst = ("", 0.0)
    for name, p in twin_params.items():
        err = chk.close(f"grad {name}", strata_grads[name].astype(np.float64), p.grad.numpy(), TENSOR_RTOL)
        worst = max(worst, (name, err), key=lambda w: w[1])
    print(f"gradients: {len(twin_params)} tensors, worst max rel.err {worst[1]:.2g} ({worst[0]})")

    for name in VOCAB_MATRICES:
        if name in strata_grads:
            chk.expect(not strata_grads[name][V:].any(),
                       f"grad {name} rows {V}..{Vp - 1} (padded vocabulary) must be exactly zero")
    chk.expect(not grads[~covered].any(), "gradient arena padding between tensors must stay zero")

    # The comparison must be able to fail: a 1e-3 change to one gradient element is caught.
    name = worst[0]
    ref = twin_params[name].grad.numpy()
    spoiled = strata_grads[name].astype(np.float64).copy()
    spoiled.flat[0] += 1e-3 * np.abs(ref).max()
    chk.expect(max_rel_error(spoiled, ref) > TENSOR_RTOL, "self-check: a spoiled gradient went unnoticed")

    if chk.failures:
        print(f"torch_reference: {len(chk.failures)} of {chk.count} checks failed")
        sys.exit(1)
    print(f"torch_reference: all {chk.count} checks passed")


if __name__ == "__main__":
    main()
