#!/usr/bin/env bash
# `tpserve router` with https:// backends, real processes: a `tpserve serve` replica (gemma-4-tiny,
# dummy weights) behind a TLS terminator (tests/tls_forwarder.py) holding a certificate for
# "localhost" signed by a CA made here with openssl. Through the router: a chat, streamed and
# not, with the CA in tls_ca_file (and kept-alive TLS connections reused); a 502 naming the
# certificate verification failure with another CA, and with a name the certificate does not
# hold; tls_insecure_skip_verify answers and warns; a chat through the router's gRPC port over
# the same https:// backend, and its certificate failure with another CA; the router keeps
# serving after the failures; an unreadable tls_ca_file stops it at start naming the field.
# Usage: router_tls_test.sh TPSERVE_BINARY FIXTURES_DIR   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
HERE=$(dirname "$0")
source "$HERE/harness.sh"
replica_model "$FIX"

# A CA, a certificate for DNS:localhost only, signed by it; and another CA that signed nothing.
pki() { openssl "$@" >>"$WORK/openssl.log" 2>&1 || { bad "openssl $1 failed: $(cat "$WORK/openssl.log")"; finish; exit 1; }; }
pki req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=router test CA" -keyout "$WORK/ca.key" -out "$WORK/ca.pem" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign"
pki req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=another CA" -keyout "$WORK/other.key" -out "$WORK/other.pem" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign"
pki req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$WORK/server.key" -out "$WORK/server.csr"
printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$WORK/server.ext"
pki x509 -req -in "$WORK/server.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial -days 2 \
  -extfile "$WORK/server.ext" -out "$WORK/server.pem"

start_http S serve "${MODEL[@]}" --grpc-port -1
wait_replicas S
start_session T "$WORK/T.port" python3 "$HERE/tls_forwarder.py" "$WORK/server.pem" "$WORK/server.key" "$PORT_S" "$WORK/T.port"
GOOD="https://localhost:$PORT_T/v1"
cat >"$WORK/router.json" <<JSON
{"models": {
  "gemma-4-tiny": {"backends": [{"url": "$GOOD", "tls_ca_file": "$WORK/ca.pem"}]},
  "wrong-ca": {"backends": [{"url": "$GOOD", "model": "gemma-4-tiny", "tls_ca_file": "$WORK/other.pem"}]},
  "wrong-ca-grpc": {"backends": [{"url": "$GOOD", "model": "gemma-4-tiny", "tls_ca_file": "$WORK/other.pem"}]},
  "wrong-name": {"backends": [{"url": "https://127.0.0.1:$PORT_T/v1", "model": "gemma-4-tiny",
                               "tls_ca_file": "$WORK/ca.pem"}]},
  "insecure": {"backends": [{"url": "https://127.0.0.1:$PORT_T/v1", "model": "gemma-4-tiny",
                             "tls_insecure_skip_verify": true}]}}}
JSON
start_http R router --config "$WORK/router.json" --grpc-port 0
R="http://127.0.0.1:$PORT_R"
GRPC_R=$(grpc_port R)

# chat MODEL [STREAM]: a chat through the router; prints the status, the body in $WORK/body.
chat() {
  curl -s -N -m 60 -o "$WORK/body" -w '%{http_code}' "$R/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$1\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":5,\"stream\":${2:-false}}"
}
code=$(chat gemma-4-tiny)
[ "$code" = 200 ] && grep -q '"choices"' "$WORK/body" && ok "chat over https:// with the CA in tls_ca_file" \
  || bad "https chat: $code $(cat "$WORK/body") $(cat "$WORK/T.log")"
code=$(chat gemma-4-tiny true)
[ "$code" = 200 ] && [ "$(grep -c '^data: {' "$WORK/body")" -ge 2 ] && tail -2 "$WORK/body" | grep -q '^data: \[DONE\]' \
  && ok "streamed chat over https://" || bad "https stream: $code $(head -c 600 "$WORK/body")"
code=$(chat wrong-ca)
[ "$code" = 502 ] && grep -q "the TLS handshake (localhost:$PORT_T): the backend's certificate failed verification: unable to get local issuer certificate" "$WORK/body" \
  && grep -q "tls_ca_file $WORK/other.pem" "$WORK/body" \
  && ok "another CA: 502 naming the certificate verification failure" || bad "wrong CA: $code $(cat "$WORK/body")"
code=$(chat wrong-name)
[ "$code" = 502 ] && grep -qi "certificate failed verification: IP address mismatch" "$WORK/body" \
  && ok "a name the certificate does not hold: 502 naming the mismatch" || bad "wrong name: $code $(cat "$WORK/body")"
code=$(chat insecure)
[ "$code" = 200 ] && grep -q 'WARNING: router config: models\["insecure"\].backends\[0\].*tls_insecure_skip_verify' "$WORK/R.log" \
  && ok "tls_insecure_skip_verify answers, and the router warned at start" || bad "insecure: $code $(cat "$WORK/R.log")"
# The router's gRPC port to the same https:// backend (its OpenAI API, over the same TLS client).
timeout 60 "$TPSERVE" client --grpc "127.0.0.1:$GRPC_R" --model gemma-4-tiny --prompt Hi --max-tokens 5 --chat \
  >"$WORK/grpc.out" 2>"$WORK/grpc.err"
rc=$?
[ $rc -eq 0 ] && [ -s "$WORK/grpc.out" ] && ok "Generate on the router's gRPC port to the https:// backend" \
  || bad "gRPC to https: rc $rc $(cat "$WORK/grpc.err")"
timeout 60 "$TPSERVE" client --grpc "127.0.0.1:$GRPC_R" --model wrong-ca-grpc --prompt Hi --max-tokens 5 --chat \
  >"$WORK/grpc.out" 2>"$WORK/grpc.err"
rc=$?
[ $rc -eq 1 ] && grep -q "the backend's certificate failed verification: unable to get local issuer certificate" \
  "$WORK/grpc.err" && ok "gRPC port, another CA: the call fails naming the certificate verification failure" \
  || bad "gRPC wrong CA: rc $rc $(cat "$WORK/grpc.err")"
codes=""
for i in 1 2 3; do codes="$codes$(chat gemma-4-tiny) "; done
metrics=$(curl -s "$R/metrics")
reused=$(echo "$metrics" | metric "tpserve_router_backend_connections_reused_total{model=\"gemma-4-tiny\",backend=\"$GOOD\"}" -)
[ "$codes" = "200 200 200 " ] && [ "${reused:-0}" -ge 3 ] \
  && ok "the router keeps serving after the failures, on reused TLS connections ($reused)" \
  || bad "after failures: $codes reused $reused"

router_exit bad '{"models": {"m": {"backends": [{"url": "https://localhost:1/v1", "tls_ca_file": "/nonexistent/ca.pem"}]}}}'
[ $RC -ne 0 ] && grep -q 'models\["m"\].backends\[0\].tls_ca_file: cannot load CA certificates from /nonexistent/ca.pem' \
  "$WORK/bad.out" && ! grep -q "listening" "$WORK/bad.out" \
  && ok "an unreadable tls_ca_file stops the router at start (exit $RC)" || bad "bad ca file: rc $RC $(cat "$WORK/bad.out")"
finish
