#!/usr/bin/env bash
# `tpserve router`'s per-backend knobs and cost accounting, real processes: a backend that
# accepts and never answers (tests/stall_server.py) and the OpenAI stand-in
# (bench/mock_openai_server.py: usage = one prompt token per 4 bytes, max_tokens completion
# tokens) behind model "m" with `timeout_s: 1` and `cooldown_s: 30`; the stand-in priced at $3 /
# $15 per million tokens. The first request goes to the stalling backend, times out within its
# 1 s (not the default 600 s) and is answered by the stand-in; the stalling backend stays out of
# routing for its 30 s cooldown. A whole response, a stream with include_usage and one without
# (the router asks for its usage, its client gets none): /metrics has their exact tokens and
# cost under door="http" (the router has no gRPC port, so no door="grpc" series), and the
# request log their cost_usd. `max_retries` 0, 1 and 2 in front of
# two refusing backends and a fallback: the tries stop where the cap says (the 502 names it).
# `request_timeout_s` 1.5 against a backend that never answers (504), over two tries (504 at
# 1.5 s, not 1 + 30 s), and after a stream's first chunk (the router's error event, the backend's
# connection closed). A config with a bad knob stops the router at start naming the field.
# Usage: router_knobs_test.sh TPSERVE_BINARY   (run by ctest)
set -u
TPSERVE=$1
source "$(dirname "$0")/harness.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)

start_session STALL "$WORK/stall.port" python3 "$ROOT/tests/stall_server.py" --port-file "$WORK/stall.port"
start_session MOCK "$WORK/mock.port" python3 "$ROOT/bench/mock_openai_server.py" --port-file "$WORK/mock.port"
STALL="http://127.0.0.1:$PORT_STALL/v1"
MOCK="http://127.0.0.1:$PORT_MOCK/v1"
cat >"$WORK/router.json" <<JSON
{"timeout_s": 1,
 "models": {"m": {"policy": "round_robin", "cooldown_s": 30,
                  "backends": ["$STALL", {"url": "$MOCK", "price_per_mtok": {"input": 3, "output": 15}}]}}}
JSON
start_http R router --config "$WORK/router.json" --request-log "$WORK/requests.jsonl"
R="http://127.0.0.1:$PORT_R"

# 400 bytes of prompt: 100 prompt tokens at the stand-in; 50 completion tokens.
PROMPT=$(printf 'word %.0s' $(seq 1 80))
start=$SECONDS
code=$(curl -s -o "$WORK/body" -w '%{http_code}' --max-time 60 "$R/v1/completions" \
  -d "{\"model\": \"m\", \"prompt\": \"$PROMPT\", \"max_tokens\": 50}")
took=$((SECONDS - start))
[ "$code" = 200 ] && [ $took -le 10 ] && grep -q '"prompt_tokens": *100' "$WORK/body" \
  && ok "timeout_s 1: the stalling backend is given up after 1 s and the stand-in answers (${took}s)" \
  || bad "timeout_s: HTTP $code after ${took}s: $(cat "$WORK/body")"

# A stream with include_usage: 40 bytes (10 tokens), 6 completion tokens. One without: the router
# asks for its usage (request_usage) and counts it; its client gets no usage chunk.
curl -s --max-time 30 "$R/v1/completions" -o "$WORK/stream" \
  -d '{"model": "m", "prompt": "0123456789012345678901234567890123456789", "max_tokens": 6, "stream": true,
       "stream_options": {"include_usage": true}}'
curl -s --max-time 30 "$R/v1/completions" -o "$WORK/stream2" \
  -d '{"model": "m", "prompt": "0123456789012345678901234567890123456789", "max_tokens": 6, "stream": true}'
grep -q '"usage":{"prompt_tokens":10,"completion_tokens":6' "$WORK/stream" && grep -q '\[DONE\]' "$WORK/stream2" \
  && ! grep -q usage "$WORK/stream2" && [ "$(grep -c '^data: {' "$WORK/stream2")" = 6 ] \
  && ok "two streams through the router, the first with its usage chunk, the second without" \
  || bad "streams: $(cat "$WORK/stream") / $(cat "$WORK/stream2")"

# Past the default 5 s cooldown: the stalling backend is still out (its cooldown_s is 30).
sleep 6
curl -s "$R/metrics" >"$WORK/metrics"
metric() { awk -v s="$1" 'index($0, s " ") == 1 { print $2 }' "$WORK/metrics"; }
S="model=\"m\",backend=\"$STALL\""
M="model=\"m\",backend=\"$MOCK\""
[ "$(metric "tpserve_router_backend_errors_total{$S,kind=\"timeout\"}")" = 1 ] \
  && [ "$(metric "tpserve_router_backend_retries_total{$S}")" = 1 ] \
  && [ "$(metric "tpserve_router_backend_requests_total{$S}")" = 1 ] \
  && [ "$(metric "tpserve_router_backend_healthy{$S}")" = 0 ] \
  && [ "$(metric "tpserve_router_backend_requests_total{$M}")" = 3 ] \
  && ok "/metrics: one timeout on the stalling backend, retried; still out 6 s later (cooldown_s 30)" \
  || bad "timeout metrics: $(grep "$PORT_STALL" "$WORK/metrics")"
# 100 + 2 x 10 prompt and 50 + 2 x 6 completion tokens;
# (100 x 3 + 50 x 15) / 1e6 + 2 x (10 x 3 + 6 x 15) / 1e6 (0.0012900000000000001 in doubles).
[ "$(metric "tpserve_router_backend_prompt_tokens_total{$M}")" = 120 ] \
  && [ "$(metric "tpserve_router_backend_completion_tokens_total{$M}")" = 62 ] \
  && awk -v v="$(metric "tpserve_router_backend_cost_usd_total{$M}")" 'BEGIN { exit !(v - 0.00129 < 1e-15 && 0.00129 - v < 1e-15) }' \
  && [ "$(metric "tpserve_router_backend_requests_without_usage_total{$M}")" = 0 ] \
  && [ -z "$(metric "tpserve_router_backend_cost_usd_total{$S}")" ] \
  && ok "/metrics: 120 prompt and 62 completion tokens, \$0.00129 (the stream whose client asked no usage too)" \
  || bad "cost metrics: $(grep 'tokens_total\|cost_usd\|without_usage' "$WORK/metrics")"
[ "$(metric 'tpserve_router_requests_total{model="m",door="http",outcome="success"}')" = 3 ] \
  && ! grep -q 'door="grpc"' "$WORK/metrics" && ! grep -q model_info "$WORK/metrics" \
  && ok "/metrics: 3 requests by door=\"http\"; no gRPC port, no door=\"grpc\" series" \
  || bad "doors: $(grep '^tpserve_router_requests_total' "$WORK/metrics")"
sed -n 1p "$WORK/requests.jsonl" | grep -q "\"backend\":\"$MOCK\".*\"prompt_tokens\":100,\"completion_tokens\":50,.*\"cost_usd\":0.00105" \
  && sed -n 2p "$WORK/requests.jsonl" | grep -q '"prompt_tokens":10,"completion_tokens":6,.*"cost_usd":0.00012' \
  && sed -n 3p "$WORK/requests.jsonl" | grep -q '"prompt_tokens":10,"completion_tokens":6,.*"cost_usd":0.00012' \
  && ok "the request log: each request's tokens and cost_usd" \
  || bad "request log: $(cat "$WORK/requests.jsonl")"

# max_retries: two backends that refuse connections (never ejected: cooldown_s 0) and the
# stand-in behind them as the fallback. With max_retries 0 the first refusal is the client's 502
# (the second backend and the fallback not tried, no retry counted); with 1, one move on and the
# 502; with 2 the fallback answers.
DEAD1="http://127.0.0.1:1/v1"
DEAD2="http://127.0.0.1:2/v1"
cat >"$WORK/retries.json" <<JSON
{"cooldown_s": 0,
 "models": {"r0": {"max_retries": 0, "fallback": "live", "backends": ["$DEAD1", "$DEAD2"]},
            "r1": {"max_retries": 1, "fallback": "live", "backends": ["$DEAD1", "$DEAD2"]},
            "r2": {"max_retries": 2, "fallback": "live", "backends": ["$DEAD1", "$DEAD2"]},
            "live": {"backends": ["$MOCK"]}}}
JSON
start_http RETRY router --config "$WORK/retries.json"
for model in r0 r1 r2; do
  curl -s -o "$WORK/$model.body" -w '%{http_code}' --max-time 30 "http://127.0.0.1:$PORT_RETRY/v1/completions" \
    -d "{\"model\": \"$model\", \"prompt\": \"hi\", \"max_tokens\": 2}" >"$WORK/$model.code"
done
curl -s "http://127.0.0.1:$PORT_RETRY/metrics" >"$WORK/metrics"
tries() { sum "tpserve_router_backend_requests_total{model=\"$1\""; }
retries() { sum "tpserve_router_backend_retries_total{model=\"$1\""; }
[ "$(cat "$WORK/r0.code")" = 502 ] && grep -q 'max_retries (0) allows no further try' "$WORK/r0.body" \
  && [ "$(tries r0)" = 1 ] && [ "$(retries r0)" = 0 ] && [ "$(tries live)" = 1 ] \
  && ok "max_retries 0: the first refusal is the client's 502, one try, no retry" \
  || bad "max_retries 0: HTTP $(cat "$WORK/r0.code"): $(cat "$WORK/r0.body"); tries $(tries r0), retries $(retries r0)"
[ "$(cat "$WORK/r1.code")" = 502 ] && grep -q "max_retries (1) allows no further try (not tried: $MOCK)" "$WORK/r1.body" \
  && [ "$(tries r1)" = 2 ] && [ "$(retries r1)" = 1 ] \
  && ok "max_retries 1: both refusing backends tried, one retry, the fallback not tried" \
  || bad "max_retries 1: HTTP $(cat "$WORK/r1.code"): $(cat "$WORK/r1.body"); tries $(tries r1), retries $(retries r1)"
[ "$(cat "$WORK/r2.code")" = 200 ] && [ "$(tries r2)" = 2 ] && [ "$(retries r2)" = 2 ] \
  && [ "$(metric 'tpserve_router_fallbacks_total{model="r2",fallback="live"}')" = 1 ] \
  && ok "max_retries 2: two retries, the fallback answers" \
  || bad "max_retries 2: HTTP $(cat "$WORK/r2.code"): $(cat "$WORK/r2.body"); retries $(retries r2)"

# request_timeout_s bounds the whole request. A backend that never answers (timeout_s 30): 504
# at 1.5 s, counted as its timeout, not ejected. Two tries, 1 s (timeout_s) on the first and the
# fallback's backend then: 504 at 1.5 s from the arrival, not 1 + 30 s. A backend that sends a
# stream's first chunk and then nothing: the client has the chunk, then the router's error
# event and [DONE] at 1.5 s, and the backend's connection is closed (its request cancelled).
start_session FIRST "$WORK/first.port" python3 "$ROOT/tests/stall_server.py" --first-chunk \
  --events "$WORK/first.events" --port-file "$WORK/first.port"
FIRST="http://127.0.0.1:$PORT_FIRST/v1"
cat >"$WORK/deadline.json" <<JSON
{"timeout_s": 30, "request_timeout_s": 1.5,
 "models": {"stalls": {"backends": ["$STALL"]},
            "spans": {"timeout_s": 1, "fallback": "stalls", "backends": ["$STALL"]},
            "cut": {"backends": ["$FIRST"]}}}
JSON
start_http DEADLINE router --config "$WORK/deadline.json"
D="http://127.0.0.1:$PORT_DEADLINE"
# in_time SECONDS: 1.4 <= SECONDS <= 10 (1.5 s and a loaded machine's slack, far below 30 s).
in_time() { awk -v t="$1" 'BEGIN { exit !(t >= 1.4 && t <= 10) }'; }
chat='"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4'
read -r code took < <(curl -s -o "$WORK/stalls.body" -w '%{http_code} %{time_total}' --max-time 40 \
  "$D/v1/chat/completions" -d "{\"model\": \"stalls\", $chat}")
[ "$code" = 504 ] && in_time "$took" && grep -q '"type":"server_error"' "$WORK/stalls.body" \
  && grep -q "request_timeout_s (1.5s from its arrival at the router) before the backend $STALL answered" \
    "$WORK/stalls.body" \
  && ok "request_timeout_s 1.5: a backend that never answers is a 504 after ${took}s" \
  || bad "request_timeout_s: HTTP $code after ${took}s: $(cat "$WORK/stalls.body")"
read -r code took < <(curl -s -o "$WORK/spans.body" -w '%{http_code} %{time_total}' --max-time 40 \
  "$D/v1/chat/completions" -d "{\"model\": \"spans\", $chat}")
[ "$code" = 504 ] && in_time "$took" && grep -q "before the backend $STALL answered" "$WORK/spans.body" \
  && ok "request_timeout_s spans the tries: a 1 s timeout, then the fallback's backend, 504 after ${took}s" \
  || bad "request_timeout_s over two tries: HTTP $code after ${took}s: $(cat "$WORK/spans.body")"
read -r code took < <(curl -s -N -o "$WORK/cut.sse" -w '%{http_code} %{time_total}' --max-time 40 \
  "$D/v1/chat/completions" -d "{\"model\": \"cut\", $chat, \"stream\": true}")
# The first chunk, the choice ended with finish_reason "error" (in a chunk as the backend's, its
# id), then the error event, then [DONE], in that order.
order=$(grep -o '"content":"first"\|{"id":"stall","object":"chat.completion.chunk","created":0,"model":"stall","choices":\[{"index":0,"delta":{},"finish_reason":"error"}\]}\|request_timeout_s (1.5s from its arrival at the router) while the backend\|\[DONE\]' \
  "$WORK/cut.sse" | tr '\n' '|')
[ "$code" = 200 ] && in_time "$took" \
  && [ "$order" = '"content":"first"|{"id":"stall","object":"chat.completion.chunk","created":0,"model":"stall","choices":[{"index":0,"delta":{},"finish_reason":"error"}]}|request_timeout_s (1.5s from its arrival at the router) while the backend|[DONE]|' ] \
  && poll 10 grep -q closed "$WORK/first.events" \
  && ok "request_timeout_s after the first byte: the chunk, finish_reason error, the error event and [DONE] after ${took}s; the backend's connection closed" \
  || bad "request_timeout_s mid-stream: HTTP $code after ${took}s: $(cat "$WORK/cut.sse"); events: $(cat "$WORK/first.events" 2>&1)"
curl -s "$D/metrics" >"$WORK/metrics"
[ "$(metric "tpserve_router_backend_errors_total{model=\"stalls\",backend=\"$STALL\",kind=\"timeout\"}")" = 2 ] \
  && [ "$(metric "tpserve_router_backend_healthy{model=\"stalls\",backend=\"$STALL\"}")" = 1 ] \
  && [ "$(metric "tpserve_router_backend_retries_total{model=\"stalls\",backend=\"$STALL\"}")" = 0 ] \
  && [ "$(metric "tpserve_router_backend_retries_total{model=\"spans\",backend=\"$STALL\"}")" = 1 ] \
  && [ "$(metric "tpserve_router_backend_errors_total{model=\"cut\",backend=\"$FIRST\",kind=\"timeout\"}")" = 1 ] \
  && [ "$(metric 'tpserve_router_requests_total{model="cut",door="http",outcome="error"}')" = 1 ] \
  && ok "/metrics: each request timeout a timeout of the backend tried then, not ejected, not a retry" \
  || bad "request_timeout_s metrics: $(grep 'errors_total.*timeout\|retries\|healthy' "$WORK/metrics")"

# A bad knob: the router exits 2 before listening, naming the field and the model.
echo "{\"models\": {\"m\": {\"backends\": [{\"url\": \"$MOCK\", \"timeout_s\": \"30\"}]}}}" >"$WORK/bad.json"
timeout 20 "$TPSERVE" router --config "$WORK/bad.json" --host 127.0.0.1 --http-port 0 >"$WORK/bad.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q 'models\["m"\].backends\[0\].timeout_s: must be a number of seconds > 0' "$WORK/bad.log" \
  && ok "timeout_s \"30\" (a string): exit 2 naming the field" || bad "bad knob: rc $rc: $(cat "$WORK/bad.log")"
finish
