#!/usr/bin/env bash
# End-to-end checks of `tpserve generate` under mpirun: greedy output equals transformers'
# for a real checkpoint at 1, 2 and 4 ranks, and every bad input (files, fields, --device)
# ends every rank with a non-zero exit and a message naming the culprit, within seconds
# (no rank hangs); a model folder's generation_config.json sets the default temperature
# (--generation-config auto), which `vllm` and an explicit --temperature override.
# Usage: cli_test.sh TPSERVE_BINARY FIXTURES_DIR   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
source "$(dirname "$0")/harness.sh"

ids() { grep -o "\"$1\": \[[^]]*\]" "$2" | head -1 | sed 's/.*\[//; s/\]//; s/ //g'; }

# 1. Greedy tokens equal transformers' at TP 1, 2, 4 (gemma4_text) and TP 2 for the rest, on
# the CPU backend (fp32 like transformers; a GPU's bf16 may flip near ties).
# Extra arguments go to generate (e.g. a pipeline layout).
check_greedy() {
  local model=$1 np=$2
  shift 2
  local prompt expect got
  prompt=$(ids prompt_ids "$FIX/models/$model/reference.json")
  expect=$(ids greedy_ids "$FIX/models/$model/reference.json")
  got=$(timeout 120 "${MPIRUN[@]}" -np "$np" "$TPSERVE" generate --model "$FIX/models/$model" --device cpu \
        --prompt-ids "$prompt" --max-tokens 8 --ignore-eos "$@" 2>"$WORK/err")
  if [ "$got" = "$expect" ]; then ok "$model np=$np $* greedy = transformers"; else bad "$model np=$np $*: got '$got' want '$expect' ($(tail -2 "$WORK/err"))"; fi
}
for np in 1 2 4; do check_greedy gemma4_text $np; done
for m in gemma4_multimodal gemma3_text llama3 qwen2 qwen3; do check_greedy $m 2; done
# Pipeline stages of MPI ranks: 2 stages of 1, 2 stages of 2, 4 stages of 1.
check_greedy gemma4_text 2 --pipeline-parallel-size 2
check_greedy llama3 4 --pipeline-parallel-size 2
check_greedy qwen3 4 --pipeline-parallel-size 4
if grep -q "pp=4 (layers 0 | 1 | 2 | 3)" "$WORK/err"; then ok "4 stages of one layer each, logged"; else bad "the layout log: $(tail -2 "$WORK/err")"; fi
# --enforce-eager (vLLM's flag: no CUDA graphs) is accepted everywhere and changes nothing
# on the CPU.
prompt=$(ids prompt_ids "$FIX/models/qwen3/reference.json")
expect=$(ids greedy_ids "$FIX/models/qwen3/reference.json")
got=$(timeout 120 "${MPIRUN[@]}" -np 1 "$TPSERVE" generate --model "$FIX/models/qwen3" --device cpu \
      --prompt-ids "$prompt" --max-tokens 8 --ignore-eos --enforce-eager=false 2>"$WORK/err")
if [ "$got" = "$expect" ]; then ok "qwen3 --enforce-eager=false greedy = transformers"; else bad "qwen3 --enforce-eager=false: got '$got' want '$expect' ($(tail -2 "$WORK/err"))"; fi

# Seeded sampling (--temperature, --seed): the same tokens at 1 and 2 ranks (one rule, keyed by
# seed and output position), other tokens with another seed.
seeded() {
  local np=$1 seed=$2
  shift 2
  timeout 120 "${MPIRUN[@]}" -np "$np" "$TPSERVE" generate --model "$FIX/models/qwen3" --device cpu \
    --prompt-ids "$prompt" --max-tokens 12 --ignore-eos --temperature 1 --seed "$seed" "$@" 2>"$WORK/err"
}
s1=$(seeded 1 7); s2=$(seeded 2 7); s3=$(seeded 1 8); s4=$(seeded 2 7 --pipeline-parallel-size 2)
if [ -n "$s1" ] && [ "$s1" = "$s2" ]; then ok "seeded sampling: np=1 = np=2"; else bad "seeded sampling: np=1 '$s1' np=2 '$s2' ($(tail -2 "$WORK/err"))"; fi
if [ "$s1" = "$s4" ]; then ok "seeded sampling: np=1 = 2 pipeline stages"; else bad "seeded sampling: np=1 '$s1' 2 stages '$s4' ($(tail -2 "$WORK/err"))"; fi
if [ "$s1" != "$s3" ]; then ok "seeded sampling: another seed, other tokens"; else bad "seeds 7 and 8 drew the same tokens '$s1'"; fi

# n-gram speculative decoding under mpirun (np=2): a prompt that repeats a pattern gets drafts,
# and the greedy tokens are those generated without them.
# speculative MODEL PROMPT MAX_TOKENS CONFIG: generate --json with CONFIG at np=2 into
# $WORK/spec.json and sets spec_ids; json_field NAME reads a number from that JSON.
speculative() {
  timeout 120 "${MPIRUN[@]}" -np 2 "$TPSERVE" generate --model "$1" --device cpu --prompt-ids "$2" \
    --max-tokens "$3" --ignore-eos --json --speculative-config "$4" >"$WORK/spec.json" 2>"$WORK/err"
  spec_ids=$(grep -o '"output_ids":\[[^]]*\]' "$WORK/spec.json" | sed 's/.*\[//; s/\]//')
}
json_field() { grep -o "\"$1\":[0-9]*" "$WORK/spec.json" | sed 's/.*://'; }
rep=5,6,7,8,9,5,6,7,8,9,5,6,7,8,9,5,6,7
plain=$(timeout 120 "${MPIRUN[@]}" -np 2 "$TPSERVE" generate --model "$FIX/models/gemma4_text" --device cpu \
        --prompt-ids $rep --max-tokens 12 --ignore-eos 2>"$WORK/err")
speculative "$FIX/models/gemma4_text" "$rep" 12 \
  '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}'
drafts=$(json_field num_draft_tokens)
if [ -n "$plain" ] && [ "$spec_ids" = "$plain" ] && [ "${drafts:-0}" -gt 0 ]; then
  ok "np=2 n-gram speculative decoding: $drafts draft tokens, the same greedy tokens"
else
  bad "np=2 speculative: '$spec_ids' vs plain '$plain', draft tokens '${drafts}' ($(tail -2 "$WORK/err"))"
fi

# Gemma 4's MTP drafter under mpirun (np=2): the fixture's assistant drafts on both ranks;
# the output is transformers' greedy tokens (those of plain generate), 5 of its 6 drafts kept.
mtp_prompt=$(ids prompt_ids "$FIX/models/gemma4_mtp/reference.json")
mtp_expect=$(ids greedy_ids "$FIX/models/gemma4_mtp/reference.json")
MTP_CONFIG="{\"method\": \"mtp\", \"model\": \"$FIX/models/gemma4_mtp/assistant\", \"num_speculative_tokens\": 4}"
speculative "$FIX/models/gemma4_mtp/target" "$mtp_prompt" 8 "$MTP_CONFIG"
mtp_ids=$spec_ids
mtp_accepted=$(json_field num_accepted_tokens)
if [ -n "$mtp_expect" ] && [ "$mtp_ids" = "$mtp_expect" ] && [ "${mtp_accepted:-0}" -gt 0 ]; then
  ok "np=2 MTP drafter: transformers' greedy tokens, $mtp_accepted draft tokens accepted"
else
  bad "np=2 MTP drafter: '$mtp_ids' vs '$mtp_expect', accepted '${mtp_accepted}' ($(tail -2 "$WORK/err"))"
fi

# 2. Bad inputs: non-zero exit on every rank, message names the culprit, fast.
expect_error() {
  local name=$1 pattern=$2
  shift 2
  local start end rc
  start=$(date +%s)
  timeout 60 "$@" >"$WORK/out" 2>"$WORK/err"
  rc=$?
  end=$(date +%s)
  if [ $rc -eq 124 ]; then bad "$name: hung (killed after 60 s)"; return; fi
  if [ $rc -eq 0 ]; then bad "$name: exit 0"; return; fi
  if ! grep -q -- "$pattern" "$WORK/err"; then bad "$name: stderr lacks '$pattern': $(head -3 "$WORK/err")"; return; fi
  ok "$name (exit $rc in $((end - start)) s)"
}

copy_model() { rm -rf "$WORK/m"; cp -r "$FIX/models/$1" "$WORK/m"; }
GEN=(generate --model "$WORK/m" --prompt-ids 5,6,7 --max-tokens 2)

copy_model llama3
truncate -s -1000 "$WORK/m/model.safetensors"
expect_error "truncated safetensors" "model.safetensors" "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}"

copy_model llama3
rm "$WORK/m/model.safetensors"
expect_error "missing safetensors" "$WORK/m" "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}"

copy_model llama3
sed -i 's/"intermediate_size": [0-9]*/"intermediate_size": 96/' "$WORK/m/config.json"
expect_error "wrong tensor shape" "mlp.gate_proj.weight" "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}"

copy_model llama3
sed -i 's/"num_hidden_layers": [0-9]*/"num_hidden_layers": 9/' "$WORK/m/config.json"
expect_error "missing tensor" "missing tensor" "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}"

copy_model llama3
echo '{"model_type": "llama", ' > "$WORK/m/config.json"
expect_error "malformed config.json" "config.json" "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}"

copy_model llama3
sed -i 's/"model_type": "llama"/"model_type": "mamba"/' "$WORK/m/config.json"
expect_error "unsupported architecture" "unsupported architecture" "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}"

copy_model gemma4_text
expect_error "uneven tensor-parallel split" "tensor-parallel size 3" "${MPIRUN[@]}" -np 3 "$TPSERVE" "${GEN[@]}"
expect_error "--tensor-parallel-size that does not divide the MPI world" "does not divide the MPI world size 2" \
  "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}" --tensor-parallel-size 3

copy_model llama3
expect_error "token id outside the vocabulary" "outside the vocabulary" \
  "${MPIRUN[@]}" -np 2 "$TPSERVE" generate --model "$WORK/m" --prompt-ids 5,99999 --max-tokens 2

# --device cuda where no GPU is visible (hidden here, so a GPU machine checks it too), or a
# build without CUDA: every rank ends with the reason, none waits.
copy_model llama3
expect_error "--device cuda without a GPU" "--device cuda" \
  env CUDA_VISIBLE_DEVICES= "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}" --device cuda
expect_error "unknown --device" "auto, cpu, cuda" "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}" --device gpu
expect_error "speculative method not implemented" "not implemented yet" "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}" \
  --speculative-config '{"method": "eagle", "num_speculative_tokens": 2}'
expect_error "MTP drafter directory missing" "/nonexistent/assistant" "${MPIRUN[@]}" -np 2 "$TPSERVE" generate \
  --model "$FIX/models/gemma4_mtp/target" --prompt-ids 5,6,7 --max-tokens 2 \
  --speculative-config '{"method": "mtp", "model": "/nonexistent/assistant", "num_speculative_tokens": 2}'
expect_error "MTP drafter for another target" "the drafter was made for another model\|Gemma 4" "${MPIRUN[@]}" -np 2 \
  "$TPSERVE" generate --model "$FIX/models/llama3" --prompt-ids 5,6,7 --max-tokens 2 --speculative-config "$MTP_CONFIG"
expect_error "MTP drafter with pipeline stages" "does not run with pipeline stages" "${MPIRUN[@]}" -np 2 \
  "$TPSERVE" generate --model "$FIX/models/gemma4_mtp/target" --prompt-ids 5,6,7 --max-tokens 2 \
  --pipeline-parallel-size 2 --speculative-config "$MTP_CONFIG"
expect_error "more pipeline stages than layers" "fewer than the 4 pipeline stages" "${MPIRUN[@]}" -np 4 \
  "$TPSERVE" generate --model "$FIX/models/llama3_attn_bias" --prompt-ids 5,6,7 --max-tokens 2 --pipeline-parallel-size 4
expect_error "more micro-batches than pipeline stages" "pipeline-micro-batches 3: must be 0 (one per stage) or 1 to the pipeline's 2" \
  "${MPIRUN[@]}" -np 2 "$TPSERVE" serve --model "$FIX/models/llama3" --pipeline-parallel-size 2 --pipeline-micro-batches 3 \
  --http-port 0 --grpc-port 0
expect_error "unknown --kernels" "split, bulk, tuned, split+pdl, bulk+pdl, tuned+pdl" \
  "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}" --kernels fast
expect_error "--kernels with a bad suffix" "is not one of split, bulk, tuned" \
  "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}" --kernels tuned+fast
expect_error "--gpu-memory-utilization out of range" "gpu-memory-utilization must be in (0, 1]" \
  "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}" --gpu-memory-utilization 1.5

# Only rank 1 fails (its model directory is broken): rank 0 must not wait forever.
copy_model llama3
truncate -s -1000 "$WORK/m/model.safetensors"
expect_error "failure on one rank only" "rank 1" "${MPIRUN[@]}" \
  -np 1 "$TPSERVE" generate --model "$FIX/models/llama3" --prompt-ids 5,6 --max-tokens 2 : \
  -np 1 "$TPSERVE" "${GEN[@]}"

# 3. --generation-config (vLLM's): a model folder whose generation_config.json sets temperature
# samples by default, drawing what --temperature draws with the same seed; `vllm` ignores the
# file (generate's own default, greedy), as does an explicit --temperature 0.
run_qwen3() {
  local model=$1 np=$2
  shift 2
  timeout 120 "${MPIRUN[@]}" -np "$np" "$TPSERVE" generate --model "$model" --device cpu --prompt-ids "$prompt" \
    --max-tokens 12 --ignore-eos "$@" 2>"$WORK/err"
}
greedy=$(run_qwen3 "$FIX/models/qwen3" 1)
sampled=$(run_qwen3 "$FIX/models/qwen3" 1 --temperature 0.8 --seed 7)
if [ -n "$greedy" ] && [ -n "$sampled" ] && [ "$greedy" != "$sampled" ]; then ok "qwen3: temperature 0.8 seed 7 differs from greedy"
else bad "qwen3: greedy '$greedy' sampled '$sampled' ($(tail -2 "$WORK/err"))"; fi
copy_model qwen3
# The fixture's file has no sampling fields (transformers' save_pretrained output); add some.
sed -i 's/^{/{\n  "do_sample": true,\n  "temperature": 0.8,/' "$WORK/m/generation_config.json"
got=$(run_qwen3 "$WORK/m" 2 --seed 7)
[ "$got" = "$sampled" ] && ok "--generation-config auto: the model's temperature 0.8 is the default (np=2)" \
  || bad "auto: got '$got' want '$sampled' ($(tail -2 "$WORK/err"))"
grep -qF "tpserve: Default sampling parameters have been overridden by the model's generation config ($WORK/m/generation_config.json): {\"temperature\": 0.8}" "$WORK/err" \
  && [ "$(grep -c "Default sampling parameters" "$WORK/err")" = 1 ] \
  && ok "the defaults are logged once, by rank 0" || bad "defaults log: $(cat "$WORK/err")"
got=$(run_qwen3 "$WORK/m" 1 --seed 7 --generation-config vllm)
[ "$got" = "$greedy" ] && ! grep -q "Default sampling parameters" "$WORK/err" \
  && ok "--generation-config vllm: tpserve's default (greedy)" || bad "vllm: got '$got' want '$greedy' ($(tail -2 "$WORK/err"))"
got=$(run_qwen3 "$WORK/m" 1 --seed 7 --temperature 0)
[ "$got" = "$greedy" ] && ok "an explicit --temperature 0 wins over the model's default" \
  || bad "--temperature 0: got '$got' want '$greedy' ($(tail -2 "$WORK/err"))"
got=$(run_qwen3 "$FIX/models/qwen3" 1 --seed 7 --generation-config "$WORK/m")
[ "$got" = "$sampled" ] && ok "--generation-config DIR: that folder's file" \
  || bad "DIR: got '$got' want '$sampled' ($(tail -2 "$WORK/err"))"

sed -i 's/"temperature": 0.8/"temperature": "warm"/' "$WORK/m/generation_config.json"
expect_error "generation_config.json with a wrong type" \
  "$WORK/m/generation_config.json: \"temperature\" must be a number, got \"warm\"" \
  "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}"
expect_error "unknown --generation-config" "--generation-config must be auto, vllm or a folder" \
  "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}" --generation-config model

copy_model qwen3
expect_error "unknown --quantization" 'is not one of none, int8, fp8' \
  "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}" --quantization awq
expect_error "--quantization int8 with --dequantize-weights" "contradict each other" \
  "${MPIRUN[@]}" -np 2 "$TPSERVE" "${GEN[@]}" --quantization int8 --dequantize-weights
# --quantization int8 (2 ranks) / fp8 (1 rank: at 2, qwen3's rows split below a 128-wide FP8
# block): the start-up log says what the matrices became.
for q in int8:q8_0 fp8:fp8_e4m3; do
  np=2
  [ "${q%%:*}" = fp8 ] && np=1
  "${MPIRUN[@]}" -np $np "$TPSERVE" generate --model "$FIX/models/qwen3" --prompt-ids 5,6,7 --max-tokens 2 \
    --quantization "${q%%:*}" >/dev/null 2>"$WORK/q.err"
  # (qwen3's 64-wide rows are no whole FP8 block of 128: those stay float32, said so.)
  grep -q "weights in memory (rank 0): .*${q#*:} [0-9.]* MiB" "$WORK/q.err" \
    && ok "--quantization ${q%%:*}: the matrices held as ${q#*:}, logged" \
    || bad "--quantization ${q%%:*}: $(grep -i weights "$WORK/q.err" | head -2) $(tail -2 "$WORK/q.err")"
done

# A GGUF file's own sampling defaults (general.sampling.*, as llama.cpp's converter writes them):
# the tiny gemma3 fixture carries top_k 40, top_p 0.9; --generation-config vllm ignores them.
GGUF="$FIX/gguf/models/gemma3.gguf"
"$TPSERVE" generate --model "$GGUF" --prompt-ids 2,3,4 --max-tokens 2 >/dev/null 2>"$WORK/gguf.err"
grep -qF 'gemma3.gguf: general.sampling.*): {"top_k": 40, "top_p": 0.9' "$WORK/gguf.err" \
  && ok "a GGUF file's general.sampling metadata are the default sampling parameters" \
  || bad "GGUF sampling defaults: $(cat "$WORK/gguf.err")"
"$TPSERVE" generate --model "$GGUF" --prompt-ids 2,3,4 --max-tokens 2 --generation-config vllm >/dev/null 2>"$WORK/gguf.err"
! grep -q "general.sampling" "$WORK/gguf.err" && ok "--generation-config vllm ignores a GGUF file's sampling metadata" \
  || bad "vllm with GGUF: $(cat "$WORK/gguf.err")"

# A Gemma 4 GGUF file's "gemma4" vocabulary: --prompt encodes as transformers converts it
# ("Hello" -> <0x48> el l o, no BOS though the file says add_bos_token).
out=$("$TPSERVE" generate --model "$FIX/gguf/models/gemma4.gguf" --prompt "Hello" --max-tokens 4 \
      --device cpu --json 2>"$WORK/gguf.err")
echo "$out" | grep -qF '"prompt_ids":[77,429,273,276]' \
  && ok "generate --prompt on a Gemma 4 GGUF: its tokenizer.ggml.model \"gemma4\" vocabulary" \
  || bad "gemma4 GGUF --prompt: $out $(tail -2 "$WORK/gguf.err")"

finish
