#!/usr/bin/env bash
# `tpserve serve` under mpirun with 2 ranks, driven by real clients: 8 concurrent curl
# completions (greedy) must equal `tpserve generate`'s output for the same prompts
# (batching must not change results); streaming SSE ends with [DONE]; bad requests get
# 400/404; /health, /metrics; the gRPC path through `tpserve client`; SIGTERM drains and
# every rank exits 0. The server binds free ports (port 0) and names them in --port-file.
# Then a second server with --generation-config DIR: requests that leave temperature unset
# take the file's, explicit ones (0 included) keep theirs, and rank 0 logs the defaults.
# Usage: serve_test.sh TPSERVE_BINARY FIXTURES_DIR   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
source "$(dirname "$0")/harness.sh"
TOK="$FIX/tokenizers/gemma/tokenizer.json"
# The CPU backend: on a GPU, batching changes bf16 rounding and so may flip near-tied tokens.
MODEL=(--model gemma-4-tiny --load-format dummy --tokenizer "$TOK" --device cpu)

PROMPTS=("Hello there" "The capital of France is" "1 2 3 4" "def f(x):" "你好，世界" "emoji 🙂 test" "a b c d e f g" "Tensor parallel")
for i in "${!PROMPTS[@]}"; do
  timeout 60 "${MPIRUN[@]}" -np 2 "$TPSERVE" generate "${MODEL[@]}" --prompt "${PROMPTS[$i]}" --max-tokens 12 \
    --ignore-eos --json 2>/dev/null | grep -o '"text":"[^"]*"' > "$WORK/expect.$i"
done

# timeout: a hang guard (it ends the job; ctest's TIMEOUT is 600 s).
setsid timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$TPSERVE" serve "${MODEL[@]}" --host 127.0.0.1 --http-port 0 \
  --grpc-port 0 --port-file "$WORK/ports.json" --kv-cache-memory 128MiB >"$WORK/server.log" 2>&1 &
SERVER=$!
SESSIONS+=("$SERVER")
if ! wait_ports "$WORK/ports.json" $SERVER; then
  bad "no port file: $(cat "$WORK/server.log")"
  finish
  exit 1
fi
# mpirun forwards the ranks' stderr on its own time: the line may land after the file.
poll 30 grep -q "^tpserve: HTTP listening on 127.0.0.1:$HTTP$" "$WORK/server.log" \
  && poll 30 grep -q "^tpserve: gRPC listening on 127.0.0.1:$GRPC$" "$WORK/server.log" \
  && ok "the ports of --port-file are logged (HTTP $HTTP, gRPC $GRPC)" || bad "listening lines: $(cat "$WORK/server.log")"
wait_healthy $HTTP && ok "health 200 when ready" || bad "server not ready: $(cat "$WORK/server.log")"

for i in "${!PROMPTS[@]}"; do
  body=$(printf '{"model":"gemma-4-tiny","prompt":"%s","max_tokens":12,"temperature":0,"ignore_eos":true}' "${PROMPTS[$i]}")
  curl -s -m 60 "http://127.0.0.1:$HTTP/v1/completions" -H 'Content-Type: application/json' -d "$body" \
    > "$WORK/got.$i" &
done
wait $(jobs -p | grep -v "^$SERVER$") 2>/dev/null
same=0
for i in "${!PROMPTS[@]}"; do
  if [ -s "$WORK/expect.$i" ] && grep -qF "$(cat "$WORK/expect.$i")" "$WORK/got.$i"; then same=$((same + 1)); else
    echo "  prompt $i: expected $(cat "$WORK/expect.$i") got $(head -c 300 "$WORK/got.$i")"; fi
done
[ $same -eq ${#PROMPTS[@]} ] && ok "8 concurrent curl completions equal tpserve generate" || bad "only $same/8 equal"

sse=$(curl -s -N -m 60 "http://127.0.0.1:$HTTP/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}')
echo "$sse" | tail -3 | grep -q "data: \[DONE\]" && echo "$sse" | grep -q '"usage"' && ok "chat SSE stream ends with usage and [DONE]" || bad "SSE: $(echo "$sse" | tail -3)"

code=$(curl -s -o "$WORK/e1" -w '%{http_code}' "http://127.0.0.1:$HTTP/v1/completions" -d '{"prompt":"x","max_tokens":0}')
[ "$code" = 400 ] && grep -q max_tokens "$WORK/e1" && ok "max_tokens 0 -> 400 naming the field" || bad "max_tokens 0 -> $code $(cat "$WORK/e1")"
code=$(curl -s -o "$WORK/e2" -w '%{http_code}' "http://127.0.0.1:$HTTP/v1/completions" -d '{"model":"nope","prompt":"x"}')
[ "$code" = 404 ] && ok "unknown model -> 404" || bad "unknown model -> $code"
code=$(curl -s -o "$WORK/e3" -w '%{http_code}' "http://127.0.0.1:$HTTP/v1/completions" -d '{"prompt": ')
[ "$code" = 400 ] && ok "malformed JSON -> 400" || bad "malformed JSON -> $code"
curl -s "http://127.0.0.1:$HTTP/metrics" >"$WORK/metrics"
grep -q "^# TYPE" "$WORK/metrics" && grep -q '^vllm:num_requests_running{model_name=' "$WORK/metrics" \
  && grep -q '^http_requests_total{handler="/v1/completions",method="POST",status="4xx"} [1-9]' "$WORK/metrics" \
  && ok "/metrics is Prometheus text under vLLM's names, with HTTP responses by route" \
  || bad "/metrics: $(head -c 600 "$WORK/metrics")"

timeout 60 "$TPSERVE" client --grpc "127.0.0.1:$GRPC" --prompt "Hello there" --max-tokens 6 >"$WORK/grpc.out" 2>&1 \
  && grep -q "finish_reason length" "$WORK/grpc.out" && ok "gRPC Generate via tpserve client" || bad "gRPC: $(cat "$WORK/grpc.out")"

# SIGTERM straight to the ranks: the children of the mpirun this test started.
mpirun_pid=$(pgrep -P $SERVER -x mpirun)
ranks=$([ -n "$mpirun_pid" ] && pgrep -P "$mpirun_pid" -x tpserve)
[ $(echo $ranks | wc -w) -eq 2 ] && kill -TERM $ranks
rc=0
wait $SERVER || rc=$?
[ $(echo $ranks | wc -w) -eq 2 ] && [ $rc -eq 0 ] && grep -q "drained" "$WORK/server.log" \
  && ok "SIGTERM drains, every rank exits 0" || bad "shutdown (ranks: $ranks) rc=$rc: $(tail -5 "$WORK/server.log")"

# --generation-config (vLLM's): the built-in model has no folder, so the defaults come from a
# folder of their own. The dummy model is so sure of its next token that temperature 1 still
# draws the greedy tokens; at the file's 5 a seeded request draws others.
mkdir -p "$WORK/gencfg"
echo '{"do_sample": true, "temperature": 5.0, "transformers_version": "5.24.0"}' >"$WORK/gencfg/generation_config.json"
rm -f "$WORK/ports.json"
setsid timeout -k 10 120 "${MPIRUN[@]}" -np 2 "$TPSERVE" serve "${MODEL[@]}" --host 127.0.0.1 --http-port 0 \
  --grpc-port 0 --port-file "$WORK/ports.json" --kv-cache-memory 128MiB --generation-config "$WORK/gencfg" \
  >"$WORK/server2.log" 2>&1 &
SERVER=$!
SESSIONS+=("$SERVER")
if wait_ports "$WORK/ports.json" $SERVER && wait_healthy $HTTP; then
  complete() {
    curl -s -m 60 "http://127.0.0.1:$HTTP/v1/completions" \
      -d "{\"prompt\":\"${PROMPTS[0]}\",\"max_tokens\":12,\"ignore_eos\":true,\"seed\":3$1}"
  }
  complete "" >"$WORK/unset"
  complete ',"temperature":5' >"$WORK/five"
  complete ',"temperature":0' >"$WORK/zero"
  text() { grep -o '"text":"[^"]*"' "$1"; }
  [ -n "$(text "$WORK/unset")" ] && [ "$(text "$WORK/unset")" = "$(text "$WORK/five")" ] \
    && [ "$(text "$WORK/unset")" != "$(cat "$WORK/expect.0")" ] \
    && ok "--generation-config DIR: an unset temperature takes the file's 5 (not tpserve's 1)" \
    || bad "unset temperature: $(text "$WORK/unset"), temperature 5: $(text "$WORK/five"), greedy: $(cat "$WORK/expect.0")"
  [ "$(text "$WORK/zero")" = "$(cat "$WORK/expect.0")" ] && ok "an explicit temperature 0 wins over the file's" \
    || bad "temperature 0 under the file's 5: $(head -c 300 "$WORK/zero"), want $(cat "$WORK/expect.0")"
  grep -qF "tpserve[rank 0]: Default sampling parameters have been overridden by the model's generation config ($WORK/gencfg/generation_config.json): {\"temperature\": 5}" "$WORK/server2.log" \
    && ok "rank 0 logs the model's sampling defaults" || bad "no defaults log line: $(head -20 "$WORK/server2.log")"
else
  bad "server with --generation-config not ready: $(tail -5 "$WORK/server2.log")"
fi
kill_session TERM "$SERVER"
wait $SERVER 2>/dev/null

finish
