#!/usr/bin/env python3
"""Seed corpora and dictionaries for the fuzz targets, made fresh from real inputs on every
run so they follow the formats as they change (scripts/fuzz.sh calls this):

  config      scripts/demo.toml, the config of the training run below, and one file
              setting every key `strata train --help` lists to its default
  topology    configs/topology/*.toml and each preset as `strata topo --json` shows it,
              written back as TOML, each also with --tier overrides appended
  checkpoint  the manifest of a 2-step training run of the tiny model; the checkpoint
              folder itself goes to OUT/checkpoint for $STRATA_FUZZ_CHECKPOINT
  tokens      a token file made by `strata data prepare`, behind a few loader set-ups
  bpe         a small GPT-2 BPE (tests/data/write_bpe_files.py: byte symbols and merges of
              frequent pairs of README.md's head) with texts to encode: that head, and
              letters, digits, whitespace and bytes that are not UTF-8

Usage: make_seeds.py STRATA_BINARY OUT_DIR
Writes OUT_DIR/seeds/<target>/, OUT_DIR/dict/<target>.dict and OUT_DIR/checkpoint/.
"""
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FUZZ_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO / "tests" / "data"))
import write_bpe_files  # noqa: E402  (beside the data tests, which write their BPE with it)
TARGETS = ("config", "topology", "checkpoint", "tokens", "bpe")
TOKEN_SETUP_BYTES = 16  # fuzz_tokens.cpp: the loader set-up in front of the file


def run(*args):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True).stdout


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a JSON string is a valid TOML basic string


def dict_line(token):
    """One libFuzzer dictionary entry: a quoted string with \\xNN escapes."""
    data = token if isinstance(token, bytes) else token.encode()
    body = "".join(chr(b) if 0x20 <= b < 0x7F and chr(b) not in '"\\' else f"\\x{b:02x}" for b in data)
    return f'"{body}"'


def write_dict(out, name, tokens):
    static = (FUZZ_DIR / f"{name}.dict").read_text()
    generated = sorted({dict_line(t) for t in tokens})
    (out / "dict" / f"{name}.dict").write_text(static + "\n# from this run's strata\n" + "\n".join(generated) + "\n")


def prepare_tokens(strata, work):
    """A small corpus of real text (the head of README.md, whole lines) -> train.bin, val.bin."""
    text, size = [], 0
    for line in (REPO / "README.md").read_text().splitlines(keepends=True):
        text.append(line)
        size += len(line.encode())
        if size >= 6000:
            break
    (work / "text.txt").write_text("".join(text))
    run(strata, "data", "prepare", "--input", work / "text.txt", "--out", work / "data",
        "--val-fraction", "0.25", "--chunk-bytes", "512")
    return work / "data" / "train.bin", work / "data" / "val.bin"


def train_checkpoint(strata, work, train_bin, val_bin):
    """2 steps of the tiny model, driven by a config file; returns (config path, checkpoint folder)."""
    config = work / "train.toml"
    config.write_text(f"""[model]
preset = "tiny"

[data]
train = {toml_value(train_bin)}
val = {toml_value(val_bin)}

[optim]
lr = 1e-3
warmup = 1

[train]
batch = 2
seq = 32
steps = 2
threads = 1
val_every = 1
val_batches = 1
out = {toml_value(work / "run")}
""")
    run(strata, "train", "--config", config)
    ckpts = sorted((work / "run" / "ckpt").glob("step_*"))
    if not ckpts:
        raise SystemExit("make_seeds: the training run wrote no checkpoint")
    return config, ckpts[-1]


def is_literal(kind, default):
    """Whether a help text's default is a value of its kind ("4", "1e-3", "ring"), not words
    ("the --model preset's: tiny 2, ...", "optim.lr / 10")."""
    if kind == "INT":
        return re.fullmatch(r"-?\d+", default) is not None
    if kind == "FLOAT":
        try:
            float(default)
            return True
        except ValueError:
            return False
    return " " not in default


def config_seeds(strata, out, train_config, train_bin):
    seeds = out / "seeds" / "config"
    shutil.copy(REPO / "scripts" / "demo.toml", seeds / "demo.toml")
    shutil.copy(train_config, seeds / "train.toml")
    # Every key from the help text: "--batch INT  ... (train.batch) [default: 4]".
    sections, tokens = {}, set()
    pattern = re.compile(r"^\s+--[\w-]+ (INT|FLOAT|TEXT)\s.*\((\w+)\.(\w+)\)(?: \[default: ([^\]]*)\])?")
    for line in run(strata, "train", "--help").splitlines():
        m = pattern.match(line)
        if not m:
            continue
        kind, section, key, default = m.groups()
        tokens.update({f"[{section}]", f"{key} = ", f"{section}.{key}"})
        if key == "train" and section == "data":
            default = str(train_bin)
        if default is None or not is_literal(kind, default) or (kind == "INT" and int(default) <= 0):
            continue  # no default, one the help describes in words, or a sentinel a config file may not set
        value = default if kind != "TEXT" else toml_value(default)
        sections.setdefault(section, []).append(f"{key} = {value}")
    if "train" not in sections:
        raise SystemExit("make_seeds: no settings found in `strata train --help`")
    (seeds / "every_key.toml").write_text(
        "\n".join(f"[{s}]\n" + "\n".join(lines) + "\n" for s, lines in sections.items()))
    write_dict(out, "config", tokens)


def topology_toml(tiers):
    out = []
    for tier in tiers:
        out.append("[[tiers]]")
        for key in ("name", "size", "bandwidth_GBps", "latency_us", "efficiency", "source"):
            if tier.get(key) is not None:
                out.append(f"{key} = {toml_value(tier[key])}")
        out.append("")
    return "\n".join(out)


def topology_seeds(strata, out):
    seeds = out / "seeds" / "topology"
    files = {p.stem: p.read_text() for p in sorted((REPO / "configs" / "topology").glob("*.toml"))}
    tokens = {"[[tiers]]", "\0"}
    presets = ("frontier", "dgx-a100", "dgx-h100", "host")
    for preset in presets:
        tiers = json.loads(run(strata, "topo", "--topology", preset, "--json"))["topology"]["tiers"]
        tiers[-1]["size"] = None  # open, as in the preset (`topo` shows it resolved for one process)
        files[preset] = topology_toml(tiers)
        for tier in tiers:
            tokens.update(f"{key} = " for key in tier)
            tokens.add(tier["name"])
    for name, text in files.items():
        (seeds / f"{name}.toml").write_text(text)
        # The same with --tier overrides, NUL-separated after the file (fuzz_topology.cpp).
        tiers = re.findall(r'^name = "([^"]+)"', text, re.M)
        overrides = [f"{tiers[0]}.bandwidth_GBps=100", f"{tiers[-1]}.size=2", f"{tiers[0]}.latency_us=0.5"]
        (seeds / f"{name}_overrides.bin").write_bytes(text.encode() + b"".join(b"\0" + o.encode() for o in overrides))
    write_dict(out, "topology", tokens)


def checkpoint_seeds(out, ckpt):
    shutil.copytree(ckpt, out / "checkpoint")
    manifest = (ckpt / "manifest.json").read_text()
    (out / "seeds" / "checkpoint" / "manifest.json").write_text(manifest)
    tokens = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                tokens.add(f'"{key}":')
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str):
            tokens.add(json.dumps(node))

    walk(json.loads(manifest))
    write_dict(out, "checkpoint", tokens)


def token_seeds(out, val_bin):
    seeds = out / "seeds" / "tokens"
    data = val_bin.read_bytes()
    # (batch-1, seq-1, world-1, rank, vocab_size, shuffle, seed, position): see fuzz_tokens.cpp.
    setups = {
        "plain": (0, 0, 0, 0, 0, 0, 0, 0),
        "sharded_shuffled": (1, 7, 1, 1, 256, 1, 7, 5),
        "small_vocab": (3, 31, 0, 0, 64, 0, 0, 0),
    }
    for name, s in setups.items():
        setup = struct.pack("<BBBBHBBq", *s)
        assert len(setup) == TOKEN_SETUP_BYTES
        (seeds / f"{name}.bin").write_bytes(setup + data)
    header = struct.unpack_from("<3i", data)
    write_dict(out, "tokens", [struct.pack("<i", header[0]), struct.pack("<i", header[1])])


def bpe_seeds(out, work):
    """vocab.json NUL merges.txt NUL text (fuzz_bpe.cpp), the merges joining the most frequent
    adjacent symbols of a real text, one at a time as BPE training does."""
    text = (work / "text.txt").read_text()
    to_symbol = write_bpe_files.byte_symbols()
    words = [[to_symbol[b] for b in w.encode()] for w in re.findall(r" ?\w+| ?[^\s\w]+|\s+", text)]
    merges = []
    for _ in range(40):
        pairs = {}
        for w in words:
            for p in zip(w, w[1:]):
                pairs[p] = pairs.get(p, 0) + 1
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        merges.append(f"{best[0]} {best[1]}")
        for w in words:
            i = 0
            while i + 1 < len(w):
                if (w[i], w[i + 1]) == best:
                    w[i:i + 2] = [w[i] + w[i + 1]]
                i += 1
    write_bpe_files.write(work / "bpe", merges)
    vocab = (work / "bpe" / "vocab.json").read_bytes()
    merges_txt = (work / "bpe" / "merges.txt").read_bytes()
    texts = {
        "readme": text.encode(),
        "scripts": "they'll say it's 2024: café, привет, 中文 😀!!\n\n  \t end   ".encode(),
        "not_utf8": b"ok \xff\xfe caf\xc3 \xe2\x82 end\n",
    }
    seeds = out / "seeds" / "bpe"
    for name, body in texts.items():
        (seeds / f"{name}.bin").write_bytes(vocab + b"\0" + merges_txt + b"\0" + body)
    write_dict(out, "bpe", merges + [m.replace(" ", "") for m in merges])


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    strata, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    for sub in ("seeds", "dict", "checkpoint", "work"):
        shutil.rmtree(out / sub, ignore_errors=True)
    for target in TARGETS:
        (out / "seeds" / target).mkdir(parents=True)
    (out / "dict").mkdir()
    work = out / "work"
    work.mkdir()

    train_bin, val_bin = prepare_tokens(strata, work)
    train_config, ckpt = train_checkpoint(strata, work, train_bin, val_bin)
    config_seeds(strata, out, train_config, train_bin)
    topology_seeds(strata, out)
    checkpoint_seeds(out, ckpt)
    token_seeds(out, val_bin)
    bpe_seeds(out, work)
    shutil.rmtree(work)
    for target in TARGETS:
        n = len(list((out / "seeds" / target).iterdir()))
        print(f"make_seeds: {target}: {n} seeds, {out / 'dict' / (target + '.dict')}")


if __name__ == "__main__":
    main()
