#!/usr/bin/env python3
"""Writes a small GPT-2 byte-level BPE for tests: DIR/vocab.json with the 256 byte symbols in
GPT-2's id order (printable bytes first as themselves, then the others as U+0100... in byte
order, so " " is "Ġ" = 220 and "\\n" is "Ċ" = 198) and one token per merge (ids 256, 257, ...),
and DIR/merges.txt with the merges in order.

Usage: write_bpe_files.py DIR "LEFT RIGHT"...   (symbols as in merges.txt, e.g. "Ġ c")
"""
import json
import sys
from pathlib import Path


def byte_symbols():
    """{byte: its symbol}, in GPT-2's id order."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    others = [b for b in range(256) if b not in printable]
    return dict(zip(printable + others, [chr(b) for b in printable] + [chr(0x100 + n) for n in range(len(others))]))


def write(folder, merges):
    vocab = {s: i for i, s in enumerate(byte_symbols().values())}
    for k, merge in enumerate(merges):
        vocab[merge.replace(" ", "")] = 256 + k
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(m + "\n" for m in merges), encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    write(sys.argv[1], sys.argv[2:])
