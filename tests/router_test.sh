#!/usr/bin/env bash
# `tpserve router` in front of real `tpserve serve` processes (gemma-4-tiny, dummy weights, one
# rank each): two replicas of one model, one of another model name, and a third "cloud"
# replica behind its own --api-key as the fallback model. /v1/models lists the configured
# names; round_robin alternates the replicas (x-tpserve-backend); a streamed chat passes
# through as SSE; a client gone mid-stream cancels the backend request; an unknown model is a 404 naming the available ones;
# sequential requests reuse kept-alive connections, also across a backend's restart; with one replica killed
# requests still succeed, with both the fallback answers; the router's --api-key; the request
# log; the router's /metrics after all that (tries per backend add up to the requests sent, the
# killed replicas are unhealthy with connect errors, nothing left in flight, the fallback
# counted); config errors exit non-zero naming the field before listening. With TPBENCH, through
# a second router: `tpbench run` over two backends records each request's backend and splits the
# summary by backend; `tpbench compare` of two model names (replicas with the same weights) with
# prices reports no errors, the cost the prices imply and 100% greedy agreement. A stream whose
# client did not ask for usage: the router asks the replica for it and counts its tokens, and the
# client's stream has no usage chunk (unless `request_usage: false`).
# Usage: router_test.sh TPSERVE_BINARY FIXTURES_DIR [TPBENCH_BINARY]   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
TPBENCH=${3:-}
source "$(dirname "$0")/harness.sh"
replica_model "$FIX"

# Config errors: non-zero exit and the field, before listening.
router_exit bad1 '{"models": {"m": {"backends": [{"url": "grpcs://127.0.0.1:50051", "tls_insecure_skip_verify": true}]}}}'
[ $RC -ne 0 ] && grep -q 'models\["m"\].backends\[0\].tls_insecure_skip_verify: is not available for grpcs:// backends' \
  "$WORK/bad1.out" && ! grep -q "listening" "$WORK/bad1.out" \
  && ok "grpcs:// backend without verification refused at start (exit $RC)" || bad "grpcs:// skip-verify: rc $RC $(cat "$WORK/bad1.out")"
router_exit bad2 '{"models": {"m": {"policy": "cache_aware", "cache_threshold": 2, "backends": ["http://127.0.0.1:1/v1"]}}}'
[ $RC -ne 0 ] && grep -q 'cache_threshold: must be in \[0, 1\]' "$WORK/bad2.out" \
  && ok "a cache_threshold out of range refused at start (exit $RC)" || bad "cache_threshold: rc $RC $(cat "$WORK/bad2.out")"
router_exit bad3 '{"models": {"m": {"backends": [{"url": "http://127.0.0.1:1/v1", "api_key_env": "TPSERVE_ROUTER_TEST_UNSET"}]}}}'
[ $RC -ne 0 ] && grep -q 'api_key_env: \$TPSERVE_ROUTER_TEST_UNSET is not set' "$WORK/bad3.out" \
  && ok "an unset api_key_env refused at start (exit $RC)" || bad "api_key_env: rc $RC $(cat "$WORK/bad3.out")"
# The HTTP flags the router shares with serve are checked the same way.
router_exit bad4 '{"models": {"m": {"backends": ["http://127.0.0.1:1/v1"]}}}' --http-threads 0
[ $RC -ne 0 ] && grep -q 'router: --http-threads must be positive, got 0' "$WORK/bad4.out" \
  && ok "--http-threads 0 refused at start (exit $RC)" || bad "--http-threads 0: rc $RC $(cat "$WORK/bad4.out")"

start_http A1 serve "${MODEL[@]}" --grpc-port -1
start_http A2 serve "${MODEL[@]}" --grpc-port -1
start_http B serve "${MODEL[@]}" --grpc-port -1 --served-model-name other-model
start_http C serve "${MODEL[@]}" --grpc-port -1 --served-model-name cloud-model --api-key cloud-secret
wait_replicas A1 A2 B
A1="http://127.0.0.1:$PORT_A1/v1"
A2="http://127.0.0.1:$PORT_A2/v1"
B="http://127.0.0.1:$PORT_B/v1"
C="http://127.0.0.1:$PORT_C/v1"
cat >"$WORK/router.json" <<JSON
{"models": {
  "gemma-4-tiny": {"policy": "round_robin", "fallback": "cloud", "backends": ["$A1", "$A2"]},
  "other-model": {"backends": ["$B"]},
  "cloud": {"backends": [{"url": "$C", "model": "cloud-model", "api_key_env": "ROUTER_TEST_CLOUD_KEY",
                          "price_per_mtok": {"input": 0.5, "output": 1}}]}}}
JSON
ROUTER_TEST_CLOUD_KEY=cloud-secret start_http R router --config "$WORK/router.json" --api-key router-key \
  --request-log "$WORK/requests.jsonl"
R="http://127.0.0.1:$PORT_R"
AUTH=(-H "Authorization: Bearer router-key")

# tpbench through a second router of its own (so that R's metrics below count only what was sent
# to R): A1 and B are replicas of the same dummy weights under two names.
if [ -n "$TPBENCH" ]; then
  cat >"$WORK/bench_router.json" <<JSON
{"models": {
  "tiny-a": {"backends": [{"url": "$A1", "model": "gemma-4-tiny", "price_per_mtok": {"input": 0.25, "output": 1.5}}]},
  "tiny-b": {"backends": [{"url": "$B", "model": "other-model", "price_per_mtok": {"input": 2, "output": 8}}]},
  "tiny-rr": {"policy": "round_robin", "backends": [{"url": "$A1", "model": "gemma-4-tiny"},
                                                    {"url": "$B", "model": "other-model"}]}}}
JSON
  start_http R2 router --config "$WORK/bench_router.json"
  R2="http://127.0.0.1:$PORT_R2/v1"
  "$TPBENCH" run --target "$R2" --model tiny-rr --input-len 8 --output-len 4 --concurrency 2 --rounds 2 --warmup 1 \
    --num-prompts 4 --progress=false --fail-on-error --out "$WORK/rr" >"$WORK/rr.out" 2>&1
  rc=$?
  n_a=$(grep -c "\"backend\":\"$A1\"" "$WORK/rr/requests.jsonl")
  n_b=$(grep -c "\"backend\":\"$B\"" "$WORK/rr/requests.jsonl")
  [ $rc -eq 0 ] && [ $((n_a + n_b)) -eq 5 ] && [ "$n_a" -ge 2 ] && [ "$n_b" -ge 2 ] \
    && grep -q '"by_backend"' "$WORK/rr/summary.json" && grep -q "by backend" "$WORK/rr.out" && grep -q "$B" "$WORK/rr.out" \
    && ok "tpbench run through the router: each record names its backend ($n_a + $n_b), the summary split by backend" \
    || bad "tpbench run by backend: rc $rc, $n_a + $n_b: $(cat "$WORK/rr.out") $(head -2 "$WORK/rr/requests.jsonl")"

  "$TPBENCH" compare --target "$R2" --models tiny-a,tiny-b --router-config "$WORK/bench_router.json" \
    --tokenizer "$TOK" --input-len 16 --output-len 12 --ignore-eos --num-prompts 6 --concurrency 2 --warmup 1 \
    --progress=false --out "$WORK/cmp" >"$WORK/cmp.out" 2>&1
  rc=$?
  # The checks, one line each on failure: the summary's numbers against the records and the prices.
  check=$(python3 - "$WORK/cmp" "$A1" "$B" <<'PY'
import json, sys
out, a1, b = sys.argv[1], sys.argv[2], sys.argv[3]
s = json.load(open(out + "/compare.json"))
problems = []
for side, url, price_in, price_out in ((s["sides"][0], a1, 0.25, 1.5), (s["sides"][1], b, 2, 8)):
    recs = [json.loads(l) for l in open(out + "/" + side["name"].lower() + "/requests.jsonl")]
    recs = [r for r in recs if r["round"] >= 0]
    if side["errors"] != 0 or side["timeouts"] != 0 or side["requests"] != 6:
        problems.append("side %s: %d requests, %d errors, %d timeouts" % (side["name"], side["requests"], side["errors"], side["timeouts"]))
    if side["backends"] != {url: 6}:
        problems.append("side %s backends %s, want %s" % (side["name"], side["backends"], url))
    usd = sum(r["prompt_tokens"] * price_in + r["completion_tokens"] * price_out for r in recs) / 1e6
    out_tokens = sum(r["completion_tokens"] for r in recs)
    if out_tokens != 6 * 12 or sum(r["prompt_tokens"] for r in recs) != 6 * 16:
        problems.append("side %s token counts %s" % (side["name"], [(r["prompt_tokens"], r["completion_tokens"]) for r in recs]))
    cost = side["cost"]
    if cost["usd"] is None or abs(cost["usd"] - usd) > 1e-12 or abs(cost["usd_per_output_mtok"] - usd / out_tokens * 1e6) > 1e-9:
        problems.append("side %s cost %s, the prices imply %.9f USD" % (side["name"], cost, usd))
g = s["agreement"]
if g["unit"] != "character" or g["compared"] != 6 or g["identical"] != 6 or g["identical_fraction"] != 1:
    problems.append("agreement %s" % g)
print("; ".join(problems) if problems else "ok")
PY
)
  [ $rc -eq 0 ] && [ "$check" = ok ] && ls "$WORK"/cmp/ttft_cdf.svg "$WORK"/cmp/agreement.svg >/dev/null 2>&1 \
    && grep -q "6 of 6 prompts identical (100.0%)" "$WORK/cmp.out" \
    && ok "tpbench compare tiny-a vs tiny-b: no errors, the cost the prices imply, greedy outputs 100% identical" \
    || bad "tpbench compare: rc $rc, $check: $(tail -30 "$WORK/cmp.out")"
  out=$("$TPBENCH" compare --target "$R2" --models tiny-a --out "$WORK/x" 2>&1)
  [ $? -eq 2 ] && echo "$out" | grep -q "exactly two models" && ok "tpbench compare: a bad --models exits 2 saying why" \
    || bad "compare --models tiny-a: $out"
  out=$("$TPBENCH" compare --target "$R2" --models tiny-a,tiny-b --prices tiny-c=1:2 --out "$WORK/x" 2>&1)
  [ $? -eq 2 ] && echo "$out" | grep -q '"tiny-c" is neither side' && ok "tpbench compare: a price for neither model exits 2" \
    || bad "compare --prices tiny-c: $out"
  kill_session TERM "$SID_R2"
else
  echo "tpbench not built (it needs libcurl): the tpbench checks are left out"
fi

# A backend over its queue limit (429; bench/mock_openai_server.py --status 429 stands in): the
# next replica or the fallback takes the request and the busy backend stays in routing; with no
# other candidate the client gets the 429.
start_session BUSY "$WORK/BUSY.port" python3 "$(dirname "$0")/../bench/mock_openai_server.py" --status 429 \
  --port-file "$WORK/BUSY.port" --record "$WORK/busy_bodies.jsonl"
BUSY="http://127.0.0.1:$PORT_BUSY/v1"
cat >"$WORK/busy_router.json" <<JSON
{"models": {
  "busy-or-a1": {"policy": "round_robin", "backends": ["$BUSY", {"url": "$A1", "model": "gemma-4-tiny"}]},
  "only-busy": {"backends": ["$BUSY"]},
  "busy-local": {"backends": ["$BUSY"], "fallback": "tiny-fb"},
  "tiny-fb": {"backends": [{"url": "$A1", "model": "gemma-4-tiny"}]},
  "busy-renamed": {"backends": [{"url": "$BUSY", "model": "mock-name"}]}}}
JSON
start_http R3 router --config "$WORK/busy_router.json"
busy_complete() {
  curl -s -m 30 -D "$WORK/h3" -o "$WORK/b3" -w '%{http_code} ' "http://127.0.0.1:$PORT_R3/v1/completions" \
    -H 'Content-Type: application/json' -d "{\"model\":\"$1\",\"prompt\":\"Hello\",\"max_tokens\":2}"
  backend_of "$WORK/h3"
}
seen=$(for _ in 1 2 3 4; do busy_complete busy-or-a1; done | tr '\n' '|')
[ "$seen" = "200 $A1|200 $A1|200 $A1|200 $A1|" ] && ok "a busy (429) replica's requests go to the other one" \
  || bad "busy-or-a1: $seen"
seen=$(busy_complete only-busy)
[ "$seen" = "429 " ] && grep -q '"type":"rate_limit_error"' "$WORK/b3" && grep -q 'over its queue limit' "$WORK/b3" \
  && ok "every backend busy: the client gets 429 (rate_limit_error)" || bad "only-busy: $seen $(cat "$WORK/b3")"
# What the backend was sent: the client's bytes as they came when the backend knows the model by
# the client's name (spacing kept), the body with "model" replaced when it does not.
: >"$WORK/busy_bodies.jsonl"
sent='{ "model" : "only-busy", "prompt": "Hello",  "max_tokens": 2 }'
curl -s -m 30 -o /dev/null "http://127.0.0.1:$PORT_R3/v1/completions" -H 'Content-Type: application/json' -d "$sent"
curl -s -m 30 -o /dev/null "http://127.0.0.1:$PORT_R3/v1/completions" -H 'Content-Type: application/json' \
  -d "${sent/only-busy/busy-renamed}"
got=$(python3 -c 'import json, sys; print("|".join(json.loads(l) for l in open(sys.argv[1])))' "$WORK/busy_bodies.jsonl")
[ "$got" = "$sent|{\"max_tokens\":2,\"model\":\"mock-name\",\"prompt\":\"Hello\"}" ] \
  && ok "the backend gets the client's body as sent, or with its own model name put in" || bad "bodies sent: $got"
seen=$(busy_complete busy-local)
[ "$seen" = "200 $A1" ] && grep -qi '^x-tpserve-fallback: tiny-fb' "$WORK/h3" \
  && ok "a busy model's fallback answers, named in x-tpserve-fallback" || bad "busy-local: $seen $(cat "$WORK/h3" "$WORK/b3")"
seen=$(busy_complete busy-or-a1)
[ "$seen" = "200 $A1" ] && ! grep -qi '^x-tpserve-fallback' "$WORK/h3" \
  && ok "a model's own replica answers without x-tpserve-fallback" || bad "busy-or-a1: $seen $(cat "$WORK/h3")"
m3=$(curl -s "http://127.0.0.1:$PORT_R3/metrics")
busy=$(echo "$m3" | metric "tpserve_router_backend_errors_total{model=\"busy-or-a1\",backend=\"$BUSY\",kind=\"busy\"}" -)
healthy=$(echo "$m3" | metric "tpserve_router_backend_healthy{model=\"busy-or-a1\",backend=\"$BUSY\"}" -)
[ "${busy:-0}" -ge 2 ] && [ "$healthy" = 1 ] && ok "/metrics: busy answers counted ($busy), the busy backend still healthy" \
  || bad "busy metrics: busy=$busy healthy=$healthy: $(echo "$m3" | grep "$BUSY" | head -5)"
kill_session TERM "$SID_R3"
kill_session TERM "$SID_BUSY"

# A stream whose client did not ask for usage, from an http:// backend: the router asks A1 for
# it (request_usage, by default), counts its tokens, and the client's stream is the one A1 sends
# without include_usage (no usage chunk); a client that asked gets A1's usage chunk; with
# request_usage false the request goes as sent and is counted in requests_without_usage.
cat >"$WORK/usage_router.json" <<JSON
{"models": {"asked": {"backends": [{"url": "$A1", "model": "gemma-4-tiny"}]},
            "not-asked": {"request_usage": false, "backends": [{"url": "$A1", "model": "gemma-4-tiny"}]}}}
JSON
start_http R4 router --config "$WORK/usage_router.json"
# chat_stream API_ROOT MODEL [JSON_TAIL]: a greedy streamed chat's SSE.
chat_stream() {
  curl -s -m 60 "$1/chat/completions" -H 'Content-Type: application/json' -d "{\"model\": \"$2\", \"messages\": \
    [{\"role\": \"user\", \"content\": \"Hello\"}], \"max_tokens\": 6, \"temperature\": 0, \"stream\": true${3:-}}"
}
# same_events A B: the two streams' data events are the same, ids and times aside.
same_events() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def events(path):
    out = []
    for line in open(path):
        if line.startswith("data:"):
            data = line[5:].strip()
            chunk = data if data == "[DONE]" else json.loads(data)
            if isinstance(chunk, dict):
                chunk.pop("id", None)
                chunk.pop("created", None)
            out.append(chunk)
    return out
a, b = events(sys.argv[1]), events(sys.argv[2])
sys.exit(0 if a == b and len(a) > 2 and a[-1] == "[DONE]" else 1)
PY
}
INCLUDE=', "stream_options": {"include_usage": true}'
chat_stream "$A1" gemma-4-tiny >"$WORK/direct.sse"
chat_stream "$A1" gemma-4-tiny "$INCLUDE" >"$WORK/direct_usage.sse"
chat_stream "http://127.0.0.1:$PORT_R4/v1" asked >"$WORK/asked.sse"
chat_stream "http://127.0.0.1:$PORT_R4/v1" asked "$INCLUDE" >"$WORK/asked_usage.sse"
chat_stream "http://127.0.0.1:$PORT_R4/v1" not-asked >"$WORK/not_asked.sse"
usage=$(sed -n 's/.*"usage":{"prompt_tokens":\([0-9]*\),"completion_tokens":\([0-9]*\).*/\1 \2/p' "$WORK/direct_usage.sse")
read -r USAGE_P USAGE_C <<<"${usage:-x x}"
m4=$(curl -s "http://127.0.0.1:$PORT_R4/metrics")
asked="model=\"asked\",backend=\"$A1\""
not_asked="model=\"not-asked\",backend=\"$A1\""
same_events "$WORK/direct.sse" "$WORK/asked.sse" && ! grep -q usage "$WORK/asked.sse" \
  && same_events "$WORK/direct_usage.sse" "$WORK/asked_usage.sse" \
  && ok "request_usage: the client that did not ask gets A1's stream without usage, the one that asked its usage chunk" \
  || bad "request_usage streams: $(cat "$WORK/asked.sse") / direct: $(cat "$WORK/direct.sse")"
[ -n "$usage" ] && [ "$(echo "$m4" | metric "tpserve_router_backend_prompt_tokens_total{$asked}" -)" = $((2 * USAGE_P)) ] \
  && [ "$(echo "$m4" | metric "tpserve_router_backend_completion_tokens_total{$asked}" -)" = $((2 * USAGE_C)) ] \
  && [ "$(echo "$m4" | metric "tpserve_router_backend_requests_without_usage_total{$asked}" -)" = 0 ] \
  && ok "request_usage: both streams' tokens counted ($USAGE_P prompt and $USAGE_C completion tokens each)" \
  || bad "request_usage metrics (usage '$usage'): $(echo "$m4" | grep "$asked" | grep 'tokens\|usage')"
same_events "$WORK/direct.sse" "$WORK/not_asked.sse" \
  && [ "$(echo "$m4" | metric "tpserve_router_backend_requests_without_usage_total{$not_asked}" -)" = 1 ] \
  && [ "$(echo "$m4" | metric "tpserve_router_backend_prompt_tokens_total{$not_asked}" -)" = 0 ] \
  && ok "request_usage false: the stream goes as sent, its tokens unknown (requests_without_usage 1)" \
  || bad "request_usage false: $(echo "$m4" | grep "$not_asked" | grep 'tokens\|usage')"
kill_session TERM "$SID_R4"

code=$(curl -s -o /dev/null -w '%{http_code}' "$R/v1/models")
[ "$code" = 401 ] && ok "no key -> 401" || bad "no key -> $code"
code=$(curl -s -o /dev/null -w '%{http_code}' "$R/health")
[ "$code" = 200 ] && ok "/health open" || bad "/health -> $code"
models=$(curl -s "${AUTH[@]}" "$R/v1/models")
echo "$models" | grep -q '"object":"list"' && echo "$models" | grep -q '"id":"gemma-4-tiny"' \
  && echo "$models" | grep -q '"id":"other-model"' && echo "$models" | grep -q '"id":"cloud"' \
  && ok "/v1/models lists the configured names" || bad "/v1/models: $models"

# complete MODEL: a completion through the router; prints "STATUS BACKEND".
complete() {
  curl -s -m 60 -D "$WORK/h" -o "$WORK/body" -w '%{http_code}' "${AUTH[@]}" "$R/v1/completions" \
    -H 'Content-Type: application/json' -d "{\"model\":\"$1\",\"prompt\":\"Hello\",\"max_tokens\":4}" >"$WORK/code"
  echo "$(cat "$WORK/code") $(backend_of "$WORK/h")"
}
seen=""
for i in 1 2 3 4; do seen="$seen|$(complete gemma-4-tiny)"; done
{ [ "$seen" = "|200 $A1|200 $A2|200 $A1|200 $A2" ] || [ "$seen" = "|200 $A2|200 $A1|200 $A2|200 $A1" ]; } \
  && grep -q '"text"' "$WORK/body" && ok "round_robin alternates the replicas" || bad "round robin: $seen $(cat "$WORK/body")"
got=$(complete other-model)
[ "$got" = "200 $B" ] && grep -q '"model":"other-model"' "$WORK/body" && ok "other-model routed to its backend" \
  || bad "other-model: $got $(cat "$WORK/body")"
got=$(complete nope)
[ "${got%% *}" = 404 ] && grep -q 'model_not_found' "$WORK/body" \
  && grep -q 'Available models: cloud, gemma-4-tiny, other-model' "$WORK/body" \
  && ok "unknown model -> 404 naming the available ones" || bad "unknown model: $got $(cat "$WORK/body")"

curl -s -N -m 60 -D "$WORK/sh" "${AUTH[@]}" "$R/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"gemma-4-tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"stream":true}' >"$WORK/sse"
chunks=$(grep -c '^data: {' "$WORK/sse")
[ "$chunks" -ge 3 ] && tail -2 "$WORK/sse" | grep -q '^data: \[DONE\]' && grep -qi '^x-tpserve-backend: http' "$WORK/sh" \
  && grep -qi '^content-type: text/event-stream' "$WORK/sh" && ok "streamed chat passes through ($chunks data chunks, [DONE])" \
  || bad "stream: $(head -c 600 "$WORK/sse") $(cat "$WORK/sh")"

# A client that disconnects mid-stream: the router closes the backend connection, the backend
# cancels its request (no request left running there), and the log records it.
curl -s -N -m 0.5 "${AUTH[@]}" "$R/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"other-model","prompt":"Hi","max_tokens":4000,"ignore_eos":true,"stream":true}' >"$WORK/cut" 2>/dev/null
running() { curl -s "http://127.0.0.1:$PORT_B/metrics" | grep -q '^vllm:num_requests_running{[^}]*} 0'; }
grep -q '^data: {' "$WORK/cut" && poll 10 grep -q '"model":"other-model".*"status":200,"success":false,"error":"the client disconnected' \
  "$WORK/requests.jsonl" && poll 3 running && ok "a client gone mid-stream cancels the backend request" \
  || bad "client gone: $(head -c 300 "$WORK/cut") $(tail -2 "$WORK/requests.jsonl")"

# Keep-alive: sequential requests to one backend reuse its connections (opened far fewer than
# requests); after the backend is killed and restarted on its port, the pooled connections it
# closed are retried on new ones: every request still succeeds, and none counts as an error.
POOLED=20
codes=""
for i in $(seq 1 $POOLED); do codes="$codes$(complete other-model | cut -d' ' -f1) "; done
curl -s "${AUTH[@]}" "$R/metrics" >"$WORK/metrics-pool"
pool_metric() { metric "$1{model=\"other-model\",backend=\"$B\"}" "$WORK/metrics-pool"; }
opened=$(pool_metric tpserve_router_backend_connections_opened_total)
reused=$(pool_metric tpserve_router_backend_connections_reused_total)
[ "$codes" = "$(printf '200 %.0s' $(seq 1 $POOLED))" ] && [ "${opened:-99}" -le 3 ] && [ "${reused:-0}" -ge $((POOLED - 2)) ] \
  && ok "keep-alive: $POOLED sequential requests (and 2 before) opened $opened connections, reused $reused" \
  || bad "keep-alive: codes $codes opened $opened reused $reused: $(grep '^tpserve_router_backend_connections' "$WORK/metrics-pool")"
end_session B
ON_PORT=$PORT_B start_http B serve "${MODEL[@]}" --grpc-port -1 --served-model-name other-model
wait_healthy "$PORT_B" || bad "B not healthy after its restart"
seen=""
for i in 1 2 3; do seen="$seen|$(complete other-model)"; done
curl -s "${AUTH[@]}" "$R/metrics" >"$WORK/metrics-pool"
stale=$(pool_metric tpserve_router_backend_connections_stale_total)
errors=$(sum 'tpserve_router_backend_errors_total{model="other-model"' "$WORK/metrics-pool")
[ "$seen" = "|200 $B|200 $B|200 $B" ] && [ "${stale:-0}" -ge 1 ] && [ "$errors" = 0 ] \
  && ok "B restarted on its port: requests succeed, $stale stale pooled connection(s) retried, no backend error" \
  || bad "B restarted: $seen stale $stale errors $errors: $(grep '^tpserve_router_backend_\(connections\|errors\)' "$WORK/metrics-pool")"

# One replica gone: every request still succeeds, on the other.
end_session A1
seen=""
for i in 1 2 3; do seen="$seen|$(complete gemma-4-tiny)"; done
[ "$seen" = "|200 $A2|200 $A2|200 $A2" ] && ok "A1 killed: requests fail over to A2" || bad "A1 killed: $seen"
# Both gone: the fallback model's backend (behind its own key) answers.
end_session A2
got=$(complete gemma-4-tiny)
[ "$got" = "200 $C" ] && grep -q '"model":"cloud-model"' "$WORK/body" && ok "both replicas killed: the fallback answers" \
  || bad "fallback: $got $(cat "$WORK/body")"
# Scraped at once: the replicas' 5 s ejection (the last by the request above) is still on.
curl -s "${AUTH[@]}" "$R/metrics" >"$WORK/metrics"
code=$(curl -s -o /dev/null -w '%{http_code}' "$R/metrics")
[ "$code" = 401 ] && ok "/metrics needs the router's key" || bad "/metrics without key -> $code"
# The requests that reached a configured model: 4 + 1 + 1 streamed + 1 cut + 20 + 3 kept alive
# + 3 + 1 (the 404 for an unknown model did not).
SENT=$((11 + POOLED + 3))
# (metric and sum, harness.sh's, read this scrape.)
tries=$(sum 'tpserve_router_backend_requests_total{')
retries=$(sum 'tpserve_router_backend_retries_total{')
outcomes=$(sum 'tpserve_router_requests_total{')
[ $((tries - retries)) -eq $SENT ] && [ "$retries" -ge 1 ] && [ "$outcomes" -eq $SENT ] \
  && [ "$(metric 'tpserve_router_requests_total{model="other-model",door="http",outcome="client_gone"}')" = 1 ] \
  && ok "/metrics: tries per backend ($tries) less retries ($retries), and outcomes, add up to the $SENT requests" \
  || bad "/metrics counts: tries $tries retries $retries outcomes $outcomes, sent $SENT: $(grep '^tpserve_router_\(backend_requests\|backend_retries\|requests\)_total' "$WORK/metrics")"
killed_ok=1
for b in "$A1" "$A2"; do
  l="model=\"gemma-4-tiny\",backend=\"$b\""
  [ "$(metric "tpserve_router_backend_healthy{$l}")" = 0 ] \
    && [ "$(metric "tpserve_router_backend_errors_total{$l,kind=\"connect\"}")" -ge 1 ] 2>/dev/null || killed_ok=0
done
[ $killed_ok = 1 ] && [ "$(metric "tpserve_router_backend_healthy{model=\"cloud\",backend=\"$C\"}")" = 1 ] \
  && ok "/metrics: the killed replicas are unhealthy (0) with connect errors, the fallback's backend healthy" \
  || bad "/metrics health: $(grep '^tpserve_router_backend_\(healthy\|errors_total\)' "$WORK/metrics")"
in_flight=$(grep -c '^tpserve_router_backend_requests_in_flight{' "$WORK/metrics")
busy=$(grep '^tpserve_router_backend_requests_in_flight{' "$WORK/metrics" | grep -vc ' 0$')
[ "$in_flight" -eq 4 ] && [ "$busy" -eq 0 ] && ok "/metrics: no request in flight on any of the 4 backends" \
  || bad "/metrics in flight: $(grep '^tpserve_router_backend_requests_in_flight' "$WORK/metrics")"
fallbacks=$(metric 'tpserve_router_fallbacks_total{model="gemma-4-tiny",fallback="cloud"}')
answered=$(metric "tpserve_router_backend_request_latency_seconds_count{model=\"cloud\",backend=\"$C\"}")
[ "${fallbacks:-0}" -ge 1 ] && [ "${answered:-0}" -ge 1 ] \
  && ok "/metrics: the fallback counted ($fallbacks) and its backend's latency observed" \
  || bad "/metrics fallback: $fallbacks, answered $answered: $(grep '^tpserve_router_fallbacks' "$WORK/metrics")"
# The cloud backend without the router's forwarded key would refuse: check it does.
code=$(curl -s -o /dev/null -w '%{http_code}' "$C/models")
[ "$code" = 401 ] && ok "the fallback backend needs its key (the router sent it)" || bad "cloud without key -> $code"

lines=$(wc -l <"$WORK/requests.jsonl")
grep -q "\"model\":\"gemma-4-tiny\",\"backend\":\"$C\",.*\"status\":200,\"success\":true,\"error\":null,\"prompt_tokens\":[0-9]" \
  "$WORK/requests.jsonl" && grep -q '"seq":1,' "$WORK/requests.jsonl" \
  && ok "the request log has a line per request ($lines), with the backend and usage" \
  || bad "request log: $(cat "$WORK/requests.jsonl")"

router_stops R
finish
