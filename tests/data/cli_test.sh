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
grep -q "2 text files, 1 skipped as not text, 1 skipped as duplicates" <<<"$out" || fail "prepare summary"
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
echo "PASS"
