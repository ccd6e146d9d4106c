#!/usr/bin/env bash
# tpbench end to end against a real server: `tpserve serve` under mpirun with 2 ranks on
# the built-in tiny model, benchmarked over gRPC (token-id prompts), over HTTP
# completions and over HTTP chat; records checked line by line; faults (unreachable
# target, timeouts, bad flags) become error records or clear messages; `tpbench report`
# renders the runs. The server binds free ports (port 0) and names them in --port-file.
# Usage: tpbench_test.sh TPSERVE TPBENCH FIXTURES_DIR (run by ctest)
set -u
TPSERVE=$1
TPBENCH=$2
FIX=$3
source "$(dirname "$0")/harness.sh"
TOK="$FIX/tokenizers/gemma/tokenizer.json"
# jq is not required: python-free checks with grep/awk on the one-object-per-line records.
count() { grep -c "$1" "$2" 2>/dev/null || true; }

# timeout: a hang guard (ctest's TIMEOUT is 600 s too).
setsid timeout -k 10 600 "${MPIRUN[@]}" -np 2 "$TPSERVE" serve --model gemma-4-tiny \
  --load-format dummy --tokenizer "$TOK" --host 127.0.0.1 --http-port 0 --grpc-port 0 \
  --port-file "$WORK/ports.json" --kv-cache-memory 128MiB --max-num-seqs 8 \
  --quantization int8 --kv-cache-dtype fp8 >"$WORK/server.log" 2>&1 &
SERVER=$!
SESSIONS+=("$SERVER")
wait_ports "$WORK/ports.json" $SERVER || { bad "no port file: $(cat "$WORK/server.log")"; finish; exit 1; }
wait_healthy $HTTP || { bad "server not ready: $(cat "$WORK/server.log")"; finish; exit 1; }

COMMON=(--tokenizer "$TOK" --input-len 16 --output-len 8 --ignore-eos --concurrency 1,2 --rounds 2
        --warmup 1 --timeout 60 --progress=false --num-prompts 8)

# 1. gRPC: 1 warm-up + (1 + 2) clients x 2 rounds = 7 records, all with exactly 8 tokens.
if "$TPBENCH" run --target "grpc://127.0.0.1:$GRPC" "${COMMON[@]}" --fail-on-error --out "$WORK/grpc" \
     >"$WORK/grpc.out" 2>&1; then ok "tpbench run over gRPC exits 0"; else bad "gRPC run: $(tail -5 "$WORK/grpc.out")"; fi
lines=$(wc -l < "$WORK/grpc/requests.jsonl")
[ "$lines" = 7 ] && ok "gRPC: 7 request records" || bad "gRPC: $lines records"
n=$(count '"completion_tokens":8,' "$WORK/grpc/requests.jsonl")
[ "$n" = 7 ] && ok "gRPC: every request got exactly 8 tokens (ignore_eos)" || bad "gRPC: $n/7 with 8 tokens"
n=$(count '"prompt_tokens":16,' "$WORK/grpc/requests.jsonl")  # token ids are used as is: no BOS added
[ "$n" = 7 ] && ok "gRPC: token-id prompts of exactly 16 tokens" || bad "gRPC: prompt_tokens 16 in $n/7"
missing=""
for k in seq timestamp latency_ms ttft_ms prompt_tokens completion_tokens success error concurrency round target; do
  [ "$(count "\"$k\":" "$WORK/grpc/requests.jsonl")" = 7 ] || missing="$missing $k"
done
[ -z "$missing" ] && ok "gRPC: every record has the spec's fields" || bad "gRPC: fields missing:$missing"
[ "$(count '"round":-1' "$WORK/grpc/requests.jsonl")" = 1 ] && ok "gRPC: one warm-up record" || bad "warm-up records"
grep -q '"engine_version": "tpserve' "$WORK/grpc/run.json" && grep -q '"tp_size": 2' "$WORK/grpc/run.json" \
  && grep -q '"pp_size": 1' "$WORK/grpc/run.json" && grep -q '"pipeline_stages": "layers 0-' "$WORK/grpc/run.json" \
  && grep -q '"pipeline_ms": 0' "$WORK/grpc/run.json" \
  && grep -q '"available": true' "$WORK/grpc/run.json" && grep -q '"kernels": "cpu"' "$WORK/grpc/run.json" \
  && ok "run.json: server version, tp 2, pp 1 (one stage), step split, kernels" \
  || bad "run.json: $(head -c 1500 "$WORK/grpc/run.json")"
# The weights' and the KV cache's storage: from ModelInfo over gRPC, from /metrics over HTTP.
grep -q '"quantization": "q8_0' "$WORK/grpc/run.json" && grep -q '"kv_cache_dtype": "fp8_e4m3"' "$WORK/grpc/run.json" \
  && ok "run.json (gRPC): quantization and KV cache dtype from ModelInfo" \
  || bad "gRPC run.json storage: $(grep -n 'quantization\|kv_cache' "$WORK/grpc/run.json")"
grep -q "TTFT" "$WORK/grpc.out" && ok "run prints the level table" || bad "no table: $(cat "$WORK/grpc.out")"

# 2. HTTP completions (token ids as the prompt array) and chat.
if "$TPBENCH" run --target "http://127.0.0.1:$HTTP/v1" "${COMMON[@]}" --fail-on-error --out "$WORK/http" \
     >"$WORK/http.out" 2>&1; then ok "tpbench run over HTTP completions exits 0"; else bad "HTTP: $(tail -5 "$WORK/http.out")"; fi
n=$(count '"success":true' "$WORK/http/requests.jsonl")
[ "$n" = 7 ] && [ "$(count '"completion_tokens":8,' "$WORK/http/requests.jsonl")" = 7 ] \
  && ok "HTTP completions: 7 successful records of 8 tokens" || bad "HTTP completions: $n/7 ok"
grep -q '"model": "gemma-4-tiny"' "$WORK/http/run.json" && grep -q '"max_model_len": 4096' "$WORK/http/run.json" \
  && ok "HTTP: model and max_model_len from /v1/models" || bad "HTTP run.json: $(head -c 600 "$WORK/http/run.json")"
grep -q '"quantization": "q8_0' "$WORK/http/run.json" && grep -q '"kv_cache_dtype": "fp8_e4m3"' "$WORK/http/run.json" \
  && ok "run.json (HTTP): quantization and KV cache dtype from /metrics" \
  || bad "HTTP run.json storage: $(grep -n 'quantization\|kv_cache' "$WORK/http/run.json")"
if "$TPBENCH" run --target "http://127.0.0.1:$HTTP/v1" --api chat "${COMMON[@]}" --concurrency 2 --fail-on-error \
     --out "$WORK/chat" >"$WORK/chat.out" 2>&1; then ok "tpbench run over HTTP chat exits 0"; else bad "chat: $(tail -5 "$WORK/chat.out")"; fi
[ "$(count '"success":true' "$WORK/chat/requests.jsonl")" = 5 ] && ok "HTTP chat: 5 successful records" \
  || bad "chat records: $(head -3 "$WORK/chat/requests.jsonl")"

# 3. Open loop: Poisson arrivals at 20 requests/s, 2 rounds of 3.
"$TPBENCH" run --target "grpc://127.0.0.1:$GRPC" --tokenizer "$TOK" --input-len 8 --output-len 4 --ignore-eos \
  --request-rate 20 --rounds 2 --round-size 3 --warmup 0 --progress=false --out "$WORK/rate" >"$WORK/rate.out" 2>&1
[ "$(count '"request_rate":20' "$WORK/rate/requests.jsonl")" = 6 ] && ok "open loop: 6 arrivals at rate 20" \
  || bad "open loop: $(cat "$WORK/rate.out")"
# --concurrency given explicitly, even as the default's value, runs beside --request-rate.
"$TPBENCH" run --target "grpc://127.0.0.1:$GRPC" --tokenizer "$TOK" --input-len 8 --output-len 2 --ignore-eos \
  --concurrency 1,2,4,8,16 --request-rate 20 --rounds 1 --round-size 1 --warmup 0 --progress=false \
  --out "$WORK/both" >"$WORK/both.out" 2>&1
[ "$(count '"request_rate":20' "$WORK/both/requests.jsonl")" = 1 ] && [ "$(count '"concurrency":16' "$WORK/both/requests.jsonl")" -ge 1 ] \
  && ok "explicit default --concurrency runs beside --request-rate" || bad "both: $(tail -5 "$WORK/both.out")"

# 4. Faults: a timeout shorter than any request (64 tokens: 8 could all come within the 1 ms), an
# unreachable target, bad flags.
"$TPBENCH" run --target "grpc://127.0.0.1:$GRPC" "${COMMON[@]}" --output-len 64 --concurrency 1 --rounds 2 --timeout 0.001 \
  --out "$WORK/timeout" >"$WORK/timeout.out" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(count '"timeout":true' "$WORK/timeout/requests.jsonl")" = 3 ] \
  && ok "timeouts are records with timeout=true; the run completes" || bad "timeout run rc=$rc: $(head -2 "$WORK/timeout/requests.jsonl")"
# Port 0: nothing can listen there, so every connection is refused (no guessed free port).
DEAD=0
"$TPBENCH" run --target "http://127.0.0.1:$DEAD/v1" --input-len 4 --output-len 4 --concurrency 1 --rounds 2 \
  --progress=false --out "$WORK/dead" >"$WORK/dead.out" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(count '"success":false' "$WORK/dead/requests.jsonl")" = 3 ] && grep -qi "refused\|connect" "$WORK/dead/requests.jsonl" \
  && ok "unreachable target: every request an error record with its reason" || bad "dead target rc=$rc: $(cat "$WORK/dead.out")"
"$TPBENCH" run --target "http://127.0.0.1:$DEAD/v1" --input-len 4 --output-len 4 --concurrency 1 --rounds 1 \
  --progress=false --fail-on-error --out "$WORK/dead2" >/dev/null 2>&1
[ $? = 3 ] && ok "--fail-on-error exits 3 when requests failed" || bad "--fail-on-error"
out=$("$TPBENCH" run --target "grpc://127.0.0.1:$GRPC" --concurrency 0 --out "$WORK/x" 2>&1)
[ $? = 2 ] && echo "$out" | grep -q "concurrency" && ok "bad --concurrency: exit 2 naming the flag" || bad "bad flag: $out"
out=$("$TPBENCH" run --target "ftp://x" --out "$WORK/x" 2>&1)
[ $? = 2 ] && echo "$out" | grep -q "grpc://" && ok "bad --target: exit 2 saying what is accepted" || bad "bad target: $out"
out=$(env -u TPBENCH_NO_SUCH_KEY "$TPBENCH" run --target "https://api.groq.com/openai/v1" --api-key-env TPBENCH_NO_SUCH_KEY --out "$WORK/x" 2>&1)
[ $? = 2 ] && echo "$out" | grep -q "TPBENCH_NO_SUCH_KEY" && ok "missing API key variable: clear message" || bad "api key: $out"

# 5. Report over three runs, with the cloud baselines.
if "$TPBENCH" report "$WORK/grpc" "$WORK/http" "$WORK/dead" --baselines "$(dirname "$0")/../bench/baselines/cloud.json" \
     --out "$WORK/report" >"$WORK/report.out" 2>&1; then ok "tpbench report exits 0"; else bad "report: $(cat "$WORK/report.out")"; fi
grep -q "TTFT" "$WORK/report/report.md" && grep -q "Groq" "$WORK/report/report.md" && ls "$WORK"/report/*.svg >/dev/null 2>&1 \
  && ok "report.md has level tables, baselines and SVG plots" || bad "report: $(head -40 "$WORK/report/report.md")"
grep -q "KV cache dtype | fp8_e4m3" "$WORK/report/report.md" && ok "report: the KV cache dtype" \
  || bad "report KV cache: $(grep -n "KV cache\|quantization" "$WORK/report/report.md")"
grep -q "(no GPU)" "$WORK/report/report.md" && grep -q "Server memory (rank 0 peak RSS) | [1-9]" "$WORK/report/report.md" \
  && ok "report: the CPU device and the server's peak memory" || bad "report environment: $(grep -n "Device\|memory" "$WORK/report/report.md")"

# SIGUSR1 to the mpirun this test started: mpirun forwards it to every rank, which drains.
kill -USR1 "$(pgrep -P $SERVER -x mpirun)"
rc=0
wait $SERVER || rc=$?
[ $rc -eq 0 ] && ok "the server drains and exits 0" || bad "server exit $rc: $(tail -5 "$WORK/server.log")"
finish
