#!/usr/bin/env bash
# The real Gemma 3 270M (Q4_K_M GGUF, fetched once by tools/fetch_real_model.sh into
# ~/.cache/tpserve, TPSERVE_CACHE) against transformers: `tpserve generate` on 2 MPI ranks
# gives transformers' greedy tokens for every prompt of tests/fixtures/gguf/
# gemma3_270m_reference.json (made by tools/make_real_model_reference.py: the prompt ids too,
# so the tokenizer built from the GGUF metadata is checked on the way); then `tpserve serve` on
# 2 ranks answers the first prompt with the same text over HTTP (curl, temperature 0) and gRPC
# (`tpserve client`), and a chat request gets Gemma 3's chat template (built in: the file has
# none) and the published generation defaults apply (top_k 64, top_p 0.95 from the cached
# generation_config.json, logged at start).
# Skipped (77) when the model is neither cached nor downloadable.
# The tokenizer built from the file's metadata is also compared with transformers' on 40
# varied strings (tokenizer_gguf_test's RealGemma3MatchesTransformers, run on the fetched file).
# Usage: real_model_test.sh TPSERVE_BINARY FIXTURES_DIR REPO_ROOT TOKENIZER_GGUF_TEST   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
ROOT=$3
TOKENIZER_TEST=$4
source "$(dirname "$0")/harness.sh"
REF="$FIX/gguf/gemma3_270m_reference.json"

rc=0
MODEL_DIR=$(bash "$ROOT/tools/fetch_real_model.sh" 2>"$WORK/fetch.log") || rc=$?
if [ $rc -eq 3 ]; then
  echo "SKIP: the real model is not cached and cannot be fetched: $(cat "$WORK/fetch.log")"
  exit 77
elif [ $rc -ne 0 ]; then
  bad "fetch_real_model.sh failed ($rc): $(cat "$WORK/fetch.log")"
  finish
  exit 1
fi

if TPSERVE_REAL_GGUF="$MODEL_DIR/gemma-3-270m-q4_k_m.gguf" "$TOKENIZER_TEST" --gtest_filter='*RealGemma3*' \
     >"$WORK/tok.log" 2>&1 && grep -q "1 test.*PASSED\|PASSED.*1 test" "$WORK/tok.log" && ! grep -q SKIPPED "$WORK/tok.log"; then
  ok "the tokenizer from the GGUF metadata equals transformers' on 40 strings"
else
  bad "tokenizer_gguf_test on the real file: $(tail -20 "$WORK/tok.log")"
fi

# One line a case: the reference's "prompt" line, a tab, the greedy ids comma-separated
# (the file is indented JSON: one list element a line; no jq on a fresh machine).
read_cases() {
  awk '/"prompt":/ {p=$0} /"greedy_ids":/ {g=1; ids=""; next} g && /\]/ {g=0; print p "\t" ids; next} g {gsub(/[ ,]/,""); ids = ids (ids == "" ? "" : ",") $0}' "$REF"
}
mapfile -t CASES < <(read_cases)
[ ${#CASES[@]} -ge 4 ] || { bad "could not read the cases of $REF"; finish; exit 1; }

# Transformers computes with the file's weights dequantized: so does --dequantize-weights.
n=0
for c in "${CASES[@]}"; do
  prompt=$(printf '%s' "${c%%$'\t'*}" | sed 's/^ *"prompt": "//; s/",$//')
  want=${c#*$'\t'}
  got=$(timeout 300 "${MPIRUN[@]}" -np 2 "$TPSERVE" generate --model "$MODEL_DIR" --prompt "$prompt" \
          --max-tokens 24 --ignore-eos --temperature 0 --dtype float32 --dequantize-weights --json 2>"$WORK/gen.err" |
        grep -o '"output_ids":\[[0-9,]*\]' | sed 's/.*\[//; s/\]//')
  if [ "$got" = "$want" ]; then
    n=$((n + 1))
  else
    echo "  \"$prompt\": expected $want"
    echo "  ${#prompt} got      $got $(tail -3 "$WORK/gen.err")"
  fi
done
[ $n -eq ${#CASES[@]} ] && ok "generate (2 ranks, float32, weights dequantized) gives transformers' 24 greedy tokens for $n/${#CASES[@]} prompts" \
  || bad "generate matched transformers for $n/${#CASES[@]} prompts"

# By default the blocks stay quantized (the decode products on int8-rounded activations, as
# llama.cpp's): the memory is the file's, and greedy decoding follows transformers' tokens
# until a near-tie flips (docs/quantization.md measures the divergence as KL); each prompt's
# first 3 tokens must match.
short=0
total=0
for c in "${CASES[@]}"; do
  prompt=$(printf '%s' "${c%%$'\t'*}" | sed 's/^ *"prompt": "//; s/",$//')
  want=${c#*$'\t'}
  timeout 300 "${MPIRUN[@]}" -np 2 "$TPSERVE" generate --model "$MODEL_DIR" --prompt "$prompt" \
    --max-tokens 24 --ignore-eos --temperature 0 --json >"$WORK/kept.json" 2>"$WORK/gen.err"
  got=$(grep -o '"output_ids":\[[0-9,]*\]' "$WORK/kept.json" | sed 's/.*\[//; s/\]//')
  IFS=, read -r -a w <<<"$want"
  IFS=, read -r -a g <<<"$got"
  same=0
  while [ $same -lt ${#w[@]} ] && [ "${g[$same]:-x}" = "${w[$same]}" ]; do same=$((same + 1)); done
  total=$((total + same))
  [ $same -ge 3 ] || { short=$((short + 1)); echo "  \"$prompt\": quantized kernels matched $same tokens: $got"; }
done
[ $short -eq 0 ] && ok "generate with the blocks kept quantized follows transformers for $total/$(( ${#CASES[@]} * 24 )) greedy tokens (at least 3 a prompt)" \
  || bad "generate with the blocks kept quantized diverged from transformers within 3 tokens on $short prompts"
FILE_BYTES=$(stat -c %s "$MODEL_DIR"/*.gguf)
RANK_BYTES=$(grep -o '"rank_weight_bytes":\[[0-9,]*\]' "$WORK/kept.json" | sed 's/.*\[//; s/\]//' | tr , +)
WEIGHT_BYTES=$(( ${RANK_BYTES:-0} ))
FORMATS=$(grep -o '"quantization":"[^"]*"' "$WORK/kept.json")
[ "$WEIGHT_BYTES" -gt 0 ] && [ $((WEIGHT_BYTES * 100)) -le $((FILE_BYTES * 115)) ] && \
  ok "the ranks hold $WEIGHT_BYTES bytes of weights for the $FILE_BYTES-byte file ($FORMATS)" || \
  bad "the ranks hold ${WEIGHT_BYTES:-?} bytes of weights for the $FILE_BYTES-byte file ($FORMATS): over 1.15x"

FIRST=$(printf '%s' "${CASES[0]%%$'\t'*}" | sed 's/^ *"prompt": "//; s/",$//')
EXPECT_TEXT=$(timeout 300 "${MPIRUN[@]}" -np 2 "$TPSERVE" generate --model "$MODEL_DIR" --prompt "$FIRST" \
  --max-tokens 12 --ignore-eos --temperature 0 --json 2>/dev/null | grep -o '"text":"[^"]*"' | sed 's/^"text"://')

start_serve 300 --model "$MODEL_DIR" --kv-cache-memory 256MiB --max-model-len 2048
body=$(printf '{"prompt":"%s","max_tokens":12,"temperature":0,"ignore_eos":true}' "$FIRST")
curl -s -m 120 "http://127.0.0.1:$HTTP/v1/completions" -d "$body" >"$WORK/http.json"
grep -qF "\"text\":$EXPECT_TEXT" "$WORK/http.json" && ok "HTTP completion = generate: $EXPECT_TEXT" \
  || bad "HTTP completion: $(head -c 400 "$WORK/http.json"), generate: $EXPECT_TEXT"
"$TPSERVE" client --grpc "127.0.0.1:$GRPC" --prompt "$FIRST" --max-tokens 12 --temperature 0 \
  >"$WORK/grpc.txt" 2>"$WORK/grpc.err"
grpc_text=$(printf '"%s"' "$(cat "$WORK/grpc.txt")")
[ "$grpc_text" = "$EXPECT_TEXT" ] && ok "gRPC completion = generate" \
  || bad "gRPC: $(cat "$WORK/grpc.txt") $(tail -2 "$WORK/grpc.err"), generate: $EXPECT_TEXT"

chat=$(curl -s -m 120 "http://127.0.0.1:$HTTP/v1/chat/completions" \
  -d '{"messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":16,"temperature":0,"logprobs":true}')
echo "$chat" | grep -q '"finish_reason"' && ok "chat completion answers (Gemma 3 template built in): $(echo "$chat" | grep -o '"content":"[^"]*"' | head -1)" \
  || bad "chat: $(echo "$chat" | head -c 400)"
grep -q "generation config.*top_k.*64" "$WORK/server.log" && grep -q "generation config.*top_p.*0.95" "$WORK/server.log" \
  && ok "the generation defaults apply (top_k 64, top_p 0.95; logged)" || bad "generation defaults: $(cat "$WORK/server.log")"

kill -TERM "$SERVER" 2>/dev/null
finish
