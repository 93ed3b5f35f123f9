#!/usr/bin/env bash
# `strata sample` end to end: a tiny model trained a few steps here, sampled from its checkpoint
# and from its exported safetensors; determinism per seed; the refusals; `strata bench decode`.
# Usage: sample_test.sh STRATA
set -euo pipefail
strata=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$dir/corpus"
for i in $(seq 1 2000); do echo "line $i of a small corpus, with some words in it."; done > "$dir/corpus/a.txt"
"$strata" data prepare --input "$dir/corpus" --out "$dir/data" > /dev/null
"$strata" train --model tiny --train-data "$dir/data/train.bin" --batch 2 --seq 32 --steps 3 --threads 1 \
  --out "$dir/run" > /dev/null
"$strata" export "$dir/run" --safetensors "$dir/model.safetensors" > /dev/null

sample() { "$strata" sample --threads 1 "$@"; }
a=$(sample --checkpoint "$dir/run" --prompt "line 7" --max-new-tokens 24 --seed 5)
b=$(sample --checkpoint "$dir/run" --prompt "line 7" --max-new-tokens 24 --seed 5)
c=$(sample --checkpoint "$dir/run" --prompt "line 7" --max-new-tokens 24 --seed 6)
echo "seed 5: $a"
echo "seed 6: $c"
[ "$a" = "$b" ] || fail "the same seed gave different text"
[ "$a" != "$c" ] || fail "another seed gave the same text"
[[ "$a" == "line 7"* ]] || fail "the text does not start with the prompt: $a"
# The exported file holds the same weights: the same text.
s=$(sample --safetensors "$dir/model.safetensors" --model tiny --prompt "line 7" --max-new-tokens 24 --seed 5)
[ "$a" = "$s" ] || fail "safetensors gave other text than the checkpoint: $s"
# Its metadata records the model: the file alone loads; config.json beside it is GPT2Config's.
s=$(sample --safetensors "$dir/model.safetensors" --prompt "line 7" --max-new-tokens 24 --seed 5)
[ "$a" = "$s" ] || fail "safetensors alone gave other text than the checkpoint: $s"
python3 - "$dir/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 256, "n_positions": 64,
        "n_embd": 64, "n_layer": 2, "n_head": 2, "activation_function": "gelu_new", "tie_word_embeddings": True}
assert all(c[k] == v for k, v in want.items()), c
PY
# A file without that metadata (another tool's) still needs --model or --config.
python3 - "$dir/model.safetensors" "$dir/foreign.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
del header["__metadata__"]["strata_model"]
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
printf '[model]\npreset = "tiny"\n[train]\nbatch = 2\n' > "$dir/run.toml"
s=$(sample --safetensors "$dir/model.safetensors" --config "$dir/run.toml" --prompt "line 7" --max-new-tokens 24 --seed 5)
[ "$a" = "$s" ] || fail "--config gave other text: $s"

# JSON: the counts, and greedy ignores the seed.
j=$(sample --checkpoint "$dir/run" --prompt "line 7" --max-new-tokens 24 --temperature 0 --json)
python3 - "$j" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
assert j["prompt_tokens"] == 6 and j["prompt_tokens_kept"] == 6, j
assert len(j["new_tokens"]) == 24 and all(0 <= t < 256 for t in j["new_tokens"]), j
assert j["text"] == "line 7" + j["completion"], j
PY
g1=$(sample --checkpoint "$dir/run" --prompt "line 7" --max-new-tokens 24 --temperature 0 --seed 1)
g2=$(sample --checkpoint "$dir/run" --prompt "line 7" --max-new-tokens 24 --top-k 1 --seed 2)
[ "$g1" = "$g2" ] || fail "greedy and top-k 1 differ"

# A prompt longer than fits keeps its last tokens and says so; an empty one starts at a newline.
long=$(printf 'x%.0s' $(seq 1 100))
out=$(sample --checkpoint "$dir/run" --prompt "$long" --max-new-tokens 10 --json 2>"$dir/err")
grep -q "the prompt's 100 tokens and --max-new-tokens = 10 exceed model.seq_len = 64: keeping the prompt's last 55 tokens" \
  "$dir/err" || fail "long prompt note: $(cat "$dir/err")"
python3 -c 'import json,sys; j=json.loads(sys.argv[1]); assert j["prompt_tokens_kept"] == 55, j' "$out"
e=$(sample --checkpoint "$dir/run" --max-new-tokens 5 --json)
python3 -c 'import json,sys; j=json.loads(sys.argv[1]); assert j["text"].startswith("\n") and j["prompt_tokens"] == 1, j' "$e"

# Refusals: status 2 and a message naming the flag.
refused() {  # refused EXPECTED-TEXT ARGS...
  local want=$1 err status=0
  shift
  err=$(sample "$@" 2>&1 >/dev/null) || status=$?
  [ "$status" -eq 2 ] || fail "status $status for: $* ($err)"
  grep -qF -- "$want" <<<"$err" || fail "message for: $*: $err (wanted: $want)"
}
ck=(--checkpoint "$dir/run")
refused "sample: --prompt: not valid UTF-8 (byte 2 of 4, 0xff)" "${ck[@]}" --prompt $'ab\xffc'
printf 'ok\xc3(' > "$dir/bad.txt"
refused "--prompt-file $dir/bad.txt: not valid UTF-8 (byte 2 of 4, 0xc3)" "${ck[@]}" --prompt-file "$dir/bad.txt"
refused "--temperature = -1: must be finite and >= 0" "${ck[@]}" --temperature -1
refused "--top-k = -2: must be >= 0" "${ck[@]}" --top-k -2
refused "--top-p = 0: must be in (0, 1]" "${ck[@]}" --top-p 0
refused "--top-p = 1.5: must be in (0, 1]" "${ck[@]}" --top-p 1.5
refused "--max-new-tokens = 65: must be in [1, model.seq_len = 64]" "${ck[@]}" --max-new-tokens 65
refused "--max-new-tokens = 0: must be in [1, model.seq_len = 64]" "${ck[@]}" --max-new-tokens 0
refused "give one of --checkpoint DIR" --prompt hi
refused "the file carries no model config; give --model PRESET or --config FILE" --safetensors "$dir/foreign.safetensors"
refused "--model: a checkpoint records its model" "${ck[@]}" --model tiny
refused "model.safetensors: no tensor named 'model.embed_tokens.weight'" --safetensors "$dir/model.safetensors" --model llama-tiny

# A Llama exports LlamaConfig's fields and loads from its file alone too.
"$strata" train --model llama-tiny --train-data "$dir/data/train.bin" --batch 1 --seq 16 --steps 1 --threads 1 \
  --out "$dir/llama" > /dev/null
mkdir "$dir/llama-hf"
"$strata" export "$dir/llama" --safetensors "$dir/llama-hf/model.safetensors" > /dev/null
l1=$(sample --checkpoint "$dir/llama" --prompt "line" --max-new-tokens 8 --seed 3)
l2=$(sample --safetensors "$dir/llama-hf/model.safetensors" --prompt "line" --max-new-tokens 8 --seed 3)
[ "$l1" = "$l2" ] || fail "llama safetensors alone gave other text: $l2"
python3 - "$dir/llama-hf/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 256, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 10000, "tie_word_embeddings": False}
assert all(c[k] == v for k, v in want.items()), c
assert c["intermediate_size"] > 0, c
PY

# A tokenizer with more ids than the model has rows is refused naming both.
"$strata" train --model tiny --vocab-size 128 --n-layer 1 --train-data "$dir/data/train.bin" --batch 1 --seq 16 \
  --steps 1 --threads 1 --out "$dir/small_vocab" > /dev/null
refused "--tokenizer: tokenizer 'bytes' has 256 ids, more than the model's vocab_size = 128" \
  --checkpoint "$dir/small_vocab"
# bench decode: both timings of each context (no figure is asserted: timings vary), and its refusal.
j=$("$strata" bench decode --model llama-tiny --contexts 4,16 --repeats 1 --threads 1 --json)
python3 - "$j" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
assert [c["context"] for c in j["contexts"]] == [4, 16], j
assert all(c["kv_cache_s"] > 0 and c["full_prefix_s"] > 0 for c in j["contexts"]), j
PY
err=$("$strata" bench decode --model tiny --contexts 65 2>&1) && fail "context 65 accepted"
grep -qF "bench decode: --contexts: 65 is not in [1, model.seq_len = 64]" <<<"$err" || fail "bench message: $err"
echo "PASS"
