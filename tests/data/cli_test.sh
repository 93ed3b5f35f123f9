#!/usr/bin/env bash
# `strata data prepare` and `strata data inspect` end to end. Usage: cli_test.sh STRATA
set -euo pipefail
strata=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$dir/corpus/sub"
for i in $(seq 1 3000); do echo "line $i of a small corpus, with some words in it."; done > "$dir/corpus/a.txt"
for i in $(seq 1 1000); do echo "another file, line $i."; done > "$dir/corpus/sub/b.txt"
printf 'index\0\0\1' > "$dir/corpus/a.dat"
ln -s a.txt "$dir/corpus/a.u8"

out=$("$strata" data prepare --input "$dir/corpus" --out "$dir/out" --val-fraction 0.1)
echo "$out"
grep -q "4 files found, 2 read as text, 1 skipped as not text (binary), 1 skipped as duplicates" <<<"$out" || fail "prepare summary"
total=$(cat "$dir/corpus/a.txt" "$dir/corpus/sub/b.txt" | wc -c)
train=$(sed -n 's/.*train.bin: \([0-9]*\) tokens.*/\1/p' <<<"$out")
val=$(sed -n 's/.*val.bin: \([0-9]*\) tokens.*/\1/p' <<<"$out")
[ $((train + val)) -eq "$total" ] || fail "token counts $train + $val != $total bytes"
[ "$(stat -c %s "$dir/out/train.bin")" -eq $((1024 + 2 * train)) ] || fail "train.bin size"

info=$("$strata" data inspect "$dir/out/val.bin" --vocab-size 256)
echo "$info"
grep -q "val.bin: $val tokens, ids 10\.\." <<<"$info" || fail "inspect output"
grep -q "unigram entropy [0-9.]* nats" <<<"$info" || fail "inspect entropy"

# Refusals: exit code 2 and a message naming the culprit.
if err=$("$strata" data inspect "$dir/out/val.bin" --vocab-size 100 2>&1); then fail "vocab check passed"; fi
grep -q "val.bin: token id .* outside the vocabulary (vocab_size = 100)" <<<"$err" || fail "vocab message: $err"
if err=$("$strata" data prepare --input "$dir/corpus/a.dat" --out "$dir/out2" 2>&1); then fail "binary accepted"; fi
grep -q "a.dat: does not look like text" <<<"$err" || fail "binary message: $err"
[ ! -e "$dir/out2/train.bin" ] || fail "refused prepare wrote output"
if err=$("$strata" data prepare --input "$dir/nothing" --out "$dir/out2" 2>&1); then fail "missing accepted"; fi
grep -q "nothing: no such file or directory" <<<"$err" || fail "missing message: $err"
# GPT-2 BPE from files written here: byte symbols in GPT-2's id order and five merges, 256..260.
python3 "$(dirname "$0")/write_bpe_files.py" "$dir/bpe" "Ġ c" "Ġc a" "Ġca t" "t h" "th e"
mkdir -p "$dir/cats"
for i in $(seq 1 2000); do echo "the cat"; done > "$dir/cats/cats.txt"
# Each 8-byte line is "the" (260), " cat" (258), "\n" (198), starting at bytes 8j, 8j+3, 8j+7.
# With 802-byte chunks and --val-fraction 0.1, chunks 9 [7218, 8020) and 19 [15238, 16000) are
# validation; a token goes where its first byte lies: 2 + 99 * 3 + 2 and 1 + 95 * 3 tokens.
out=$("$strata" data prepare --input "$dir/cats" --out "$dir/bpe_out" --tokenizer "$dir/bpe" --val-fraction 0.1 \
      --chunk-bytes 802)
echo "$out"
grep -q "tokenizer: gpt2-bpe (261 tokens, 5 merges): train with model.vocab_size >= 261" <<<"$out" || fail "bpe summary"
grep -q "train.bin: 5413 tokens" <<<"$out" || fail "bpe train count"
grep -q "val.bin: 587 tokens" <<<"$out" || fail "bpe val count"
[ "$(od -An -tu2 -j1024 -N12 "$dir/bpe_out/train.bin" | tr -s ' ')" = " 260 258 198 260 258 198" ] || fail "bpe ids"
info=$("$strata" data inspect "$dir/bpe_out/train.bin" --vocab-size 261)
echo "$info"
grep -q "train.bin: 5413 tokens, ids 198\.\.260 (3 distinct)" <<<"$info" || fail "bpe inspect: $info"
# A model needs a vocabulary that large: the default of `tiny` (256) is refused, saying what to set.
if err=$("$strata" train --model tiny --train-data "$dir/bpe_out/train.bin" --batch 2 --seq 16 --steps 1 \
         --out "$dir/run" 2>&1); then fail "train with too small a vocabulary passed"; fi
grep -q "train.bin: token id 260 at position 0 is outside the vocabulary (vocab_size = 256).*model.vocab_size" \
  <<<"$err" || fail "vocab_size hint: $err"
"$strata" train --model tiny --vocab-size 261 --train-data "$dir/bpe_out/train.bin" --batch 2 --seq 16 --steps 1 \
  --out "$dir/run" > /dev/null || fail "train with --vocab-size 261"
# strata sample encodes the prompt and decodes the drawn ids with the same files.
"$strata" sample --checkpoint "$dir/run" --tokenizer "$dir/bpe" --prompt "$(head -c 40 "$dir/cats/"*)" \
  --max-new-tokens 8 --seed 3 --json > "$dir/sample.json" || fail "sample with the BPE tokenizer"
/usr/bin/python3 - "$dir/sample.json" <<'PY' || fail "sample's BPE tokens"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["tokenizer"].startswith("gpt2-bpe"), j["tokenizer"]
assert len(j["new_tokens"]) == 8 and all(0 <= t < 261 for t in j["new_tokens"]), j["new_tokens"]
assert j["prompt_tokens"] < 40, j  # merges made the 40-byte prompt fewer tokens
PY
# A malformed merges file is refused naming file and line, and nothing is written.
printf '#version: 0.2\nĠ c\nĠc a b\n' > "$dir/bpe/merges.txt"
if err=$("$strata" data prepare --input "$dir/cats" --out "$dir/bpe_bad" --tokenizer "$dir/bpe" 2>&1); then
  fail "bad merges accepted"
fi
grep -q "strata: error: .*bpe/merges.txt:3: \"Ġc a b\" is not two symbols separated by one space" <<<"$err" \
  || fail "merges message: $err"
[ ! -e "$dir/bpe_bad" ] || fail "refused prepare wrote output"
echo "PASS"
