#!/usr/bin/env bash
# `tpserve serve` under mpirun with 2 ranks, driven by real clients: 8 concurrent curl
# completions (greedy) must equal `tpserve generate`'s output for the same prompts
# (batching must not change results); streaming SSE ends with [DONE]; bad requests get
# 400/404; /health, /metrics; the gRPC path through `tpserve client`; SIGTERM drains and
# every rank exits 0. The server binds free ports (port 0) and names them in --port-file.
# Then a second server with --generation-config DIR: requests that leave temperature unset
# take the file's, explicit ones (0 included) keep theirs, and rank 0 logs the defaults; it
# also takes its API key from VLLM_API_KEY. A third with --api-key: 401 without a key or with
# a wrong one, 200 with either key, /health open, gRPC UNAUTHENTICATED without the key, and
# the keys nowhere in the log.
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
VLLM_KEY=vllm-env-key-$$
VLLM_API_KEY=$VLLM_KEY setsid timeout -k 10 120 "${MPIRUN[@]}" -np 2 "$TPSERVE" serve "${MODEL[@]}" --host 127.0.0.1 \
  --http-port 0 --grpc-port 0 --port-file "$WORK/ports.json" --kv-cache-memory 128MiB --generation-config "$WORK/gencfg" \
  >"$WORK/server2.log" 2>&1 &
SERVER=$!
SESSIONS+=("$SERVER")
if wait_ports "$WORK/ports.json" $SERVER && wait_healthy $HTTP; then
  code=$(curl -s -o /dev/null -w '%{http_code}' -m 60 "http://127.0.0.1:$HTTP/v1/completions" -d '{"prompt":"x"}')
  [ "$code" = 401 ] && ok "VLLM_API_KEY alone sets the API key (no key: 401)" || bad "VLLM_API_KEY: no key -> $code"
  complete() {
    curl -s -m 60 "http://127.0.0.1:$HTTP/v1/completions" -H "Authorization: Bearer $VLLM_KEY" \
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

# --api-key with two keys; TPSERVE_API_KEY in the environment too, which the flag overrides.
KEY1=flag-key-one-$$ KEY2=flag-key-two-$$ ENV_KEY=env-key-$$
rm -f "$WORK/ports.json"
TPSERVE_API_KEY=$ENV_KEY setsid timeout -k 10 120 "${MPIRUN[@]}" -np 2 "$TPSERVE" serve "${MODEL[@]}" --host 127.0.0.1 \
  --http-port 0 --grpc-port 0 --port-file "$WORK/ports.json" --kv-cache-memory 128MiB --api-key "$KEY1,$KEY2" \
  >"$WORK/server3.log" 2>&1 &
SERVER=$!
SESSIONS+=("$SERVER")
if wait_ports "$WORK/ports.json" $SERVER && wait_healthy $HTTP; then
  ok "/health answers 200 without a key"
  completion() {  # completion AUTHORIZATION_HEADER_OR_EMPTY -> the HTTP status; the body in $WORK/keyed
    curl -s -m 60 -o "$WORK/keyed" -w '%{http_code}' "http://127.0.0.1:$HTTP/v1/completions" ${1:+-H "Authorization: $1"} \
      -d '{"prompt":"Hello there","max_tokens":4}'
  }
  code=$(completion "")
  [ "$code" = 401 ] && grep -q '"code":"invalid_api_key"' "$WORK/keyed" && ok "no key -> 401 invalid_api_key" \
    || bad "no key -> $code $(cat "$WORK/keyed")"
  code=$(completion "Bearer wrong-$KEY1")
  [ "$code" = 401 ] && ok "a wrong key -> 401" || bad "a wrong key -> $code"
  code=$(completion "Bearer $ENV_KEY")
  [ "$code" = 401 ] && ok "--api-key wins over TPSERVE_API_KEY" || bad "the environment's key -> $code"
  c1=$(completion "Bearer $KEY1")
  c2=$(completion "Bearer $KEY2")
  [ "$c1" = 200 ] && [ "$c2" = 200 ] && ok "either key -> 200" || bad "keys -> $c1 $c2: $(cat "$WORK/keyed")"
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP/metrics")
  [ "$code" = 401 ] && ok "/metrics needs the key too" || bad "/metrics without a key -> $code"
  timeout 60 "$TPSERVE" client --grpc "127.0.0.1:$GRPC" --prompt "Hello there" --max-tokens 4 >"$WORK/nokey.out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && grep -q "needs an API key" "$WORK/nokey.out" && ok "gRPC without the key: refused (UNAUTHENTICATED)" \
    || bad "gRPC without a key: rc $rc $(cat "$WORK/nokey.out")"
  TPSERVE_API_KEY=$KEY2 timeout 60 "$TPSERVE" client --grpc "127.0.0.1:$GRPC" --prompt "Hello there" --max-tokens 4 \
    >"$WORK/key.out" 2>&1 && grep -q "finish_reason length" "$WORK/key.out" \
    && ok "tpserve client with TPSERVE_API_KEY over gRPC" || bad "gRPC with the key: $(cat "$WORK/key.out")"
  timeout 60 "$TPSERVE" client --http "http://127.0.0.1:$HTTP" --api-key "$KEY1" --prompt "Hello there" --max-tokens 4 \
    >"$WORK/key.out" 2>&1 && grep -q "finish_reason length" "$WORK/key.out" \
    && ok "tpserve client --api-key over HTTP" || bad "HTTP with the key: $(cat "$WORK/key.out")"
  grep -q "API keys: 2 set" "$WORK/server3.log" && ! grep -qe "$KEY1" -e "$KEY2" -e "$ENV_KEY" "$WORK/server3.log" \
    && ok "the log counts the keys and shows none" || bad "keys in the log: $(cat "$WORK/server3.log")"
else
  bad "server with --api-key not ready: $(tail -5 "$WORK/server3.log")"
fi
kill_session TERM "$SERVER"
wait $SERVER 2>/dev/null
! grep -qe "$VLLM_KEY" "$WORK/server2.log" || bad "VLLM_API_KEY's key in the log"
# A key setting that holds no key would leave the server open: refused before anything starts.
TPSERVE_API_KEY=" , " timeout 60 "$TPSERVE" serve "${MODEL[@]}" >"$WORK/nokeys.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q 'TPSERVE_API_KEY holds no key' "$WORK/nokeys.out" && ok "an API key setting with no key is refused" \
  || bad "TPSERVE_API_KEY=' , ': rc $rc $(cat "$WORK/nokeys.out")"

finish
