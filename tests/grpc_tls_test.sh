#!/usr/bin/env bash
# TLS on tpserve's gRPC ports and to grpcs:// backends, real processes: replica A (`tpserve serve`,
# gemma-4-tiny, dummy weights) serves gRPC with a certificate for localhost signed by a CA made
# here with openssl, replica B with one signed by another CA. `tpserve client --grpc-tls` talks to
# A with the CA (and fails without it, or in plaintext); a router lists grpcs://localhost:A and
# grpcs://localhost:B with the first CA in tls_ca_file: every chat is answered by A, B's failed
# handshakes fail over before the first token, counted as connect errors; B alone is a 502 naming
# the handshake and the CA file. The router's own gRPC port with TLS and a client CA (mutual TLS):
# the client needs the CA and a client certificate. Bad TLS flags stop serve and router at start.
# Usage: grpc_tls_test.sh TPSERVE_BINARY FIXTURES_DIR   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
source "$(dirname "$0")/harness.sh"
replica_model "$FIX"

make_ca ca
make_ca other
make_cert a ca serverAuth
make_cert b other serverAuth
make_cert client ca clientAuth

start_http A serve "${MODEL[@]}" --grpc-port 0 --grpc-tls-certfile "$WORK/a.pem" --grpc-tls-keyfile "$WORK/a.key"
start_http B serve "${MODEL[@]}" --grpc-port 0 --grpc-tls-certfile "$WORK/b.pem" --grpc-tls-keyfile "$WORK/b.key"
wait_replicas A B
GA=$(grpc_port A)
GB=$(grpc_port B)

# client NAME TARGET ARGS...: `tpserve client` to TARGET; its exit status in RC, output in $WORK/NAME.out.
client() {
  local name=$1 target=$2
  shift 2
  timeout 60 "$TPSERVE" client --grpc "$target" --prompt Hi --max-tokens 4 "$@" >"$WORK/$name.out" 2>&1
  RC=$?
}
client a-tls "localhost:$GA" --grpc-tls --grpc-tls-ca-file "$WORK/ca.pem"
[ $RC = 0 ] && grep -q "tokens" "$WORK/a-tls.out" && ok "serve's gRPC port over TLS, the client trusting its CA" \
  || bad "client over TLS: rc $RC $(cat "$WORK/a-tls.out")"
client a-other "localhost:$GA" --grpc-tls --grpc-tls-ca-file "$WORK/other.pem"
[ $RC != 0 ] && grep -qi "handshake\|certificate" "$WORK/a-other.out" \
  && ok "a client trusting another CA fails the handshake (rc $RC)" || bad "other CA: rc $RC $(cat "$WORK/a-other.out")"
client a-plain "127.0.0.1:$GA"
[ $RC != 0 ] && grep -q "UNAVAILABLE\|unavailable\|failed to connect" "$WORK/a-plain.out" \
  && ok "a plaintext client gets no answer from the TLS port (rc $RC)" || bad "plaintext: rc $RC $(cat "$WORK/a-plain.out")"

A="grpcs://localhost:$GA"
B="grpcs://localhost:$GB"
cat >"$WORK/router.json" <<JSON
{"models": {
  "both": {"policy": "round_robin", "backends": [{"url": "$B", "model": "gemma-4-tiny", "tls_ca_file": "$WORK/ca.pem"},
                                                 {"url": "$A", "model": "gemma-4-tiny", "tls_ca_file": "$WORK/ca.pem"}]},
  "untrusted": {"backends": [{"url": "$B", "model": "gemma-4-tiny", "tls_ca_file": "$WORK/ca.pem"}]},
  "gemma-4-tiny": {"backends": [{"url": "$A", "tls_ca_file": "$WORK/ca.pem"}]}}}
JSON
start_http R router --config "$WORK/router.json" --grpc-port 0 --grpc-tls-certfile "$WORK/a.pem" \
  --grpc-tls-keyfile "$WORK/a.key" --grpc-tls-client-ca-file "$WORK/ca.pem"
R="http://127.0.0.1:$PORT_R"
GR=$(grpc_port R)

# post MODEL [STREAM]: a chat to the router's HTTP port; prints "STATUS BACKEND", the body in $WORK/body.
post() {
  curl -s -N -m 60 -D "$WORK/h" -o "$WORK/body" -w '%{http_code}' "$R/v1/chat/completions" \
    -H 'Content-Type: application/json' \
    -d "{\"model\":\"$1\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4,\"stream\":${2:-false}}" \
    >"$WORK/code"
  echo "$(cat "$WORK/code") $(backend_of "$WORK/h")"
}
got=$(post gemma-4-tiny)
[ "$got" = "200 $A" ] && grep -q '"choices"' "$WORK/body" && ok "a chat relayed to a grpcs:// backend" \
  || bad "grpcs chat: $got $(cat "$WORK/body") $(cat "$WORK/R.log")"
got=$(post gemma-4-tiny true)
[ "$got" = "200 $A" ] && tail -2 "$WORK/body" | grep -q '^data: \[DONE\]' && ok "a streamed chat relayed over grpcs://" \
  || bad "grpcs stream: $got $(head -c 600 "$WORK/body")"
got=$(post untrusted)
[ "$got" = "502 " ] && grep -q "$B" "$WORK/body" && grep -qi "handshake" "$WORK/body" \
  && grep -q "verified against tls_ca_file $WORK/ca.pem" "$WORK/body" \
  && ok "a backend whose certificate the router does not trust: 502 naming the handshake and the CA file" \
  || bad "untrusted: $got $(cat "$WORK/body")"
seen=""
for _ in 1 2 3 4; do seen="$seen|$(post both)"; done
curl -s "$R/metrics" >"$WORK/metrics"
connect=$(metric "tpserve_router_backend_errors_total{model=\"both\",backend=\"$B\",kind=\"connect\"}")
[ "$seen" = "|200 $A|200 $A|200 $A|200 $A" ] && [ "${connect:-0}" -ge 1 ] \
  && ok "B untrusted: every chat fails over to A before the first token ($connect connect error)" \
  || bad "failover: $seen connect $connect $(grep "$B" "$WORK/metrics" | grep -v bucket)"

# The router's gRPC port: TLS with a client CA.
client r-mtls "localhost:$GR" --grpc-tls --grpc-tls-ca-file "$WORK/ca.pem" --grpc-tls-certfile "$WORK/client.pem" \
  --grpc-tls-keyfile "$WORK/client.key" --model gemma-4-tiny
[ $RC = 0 ] && grep -q "tokens" "$WORK/r-mtls.out" \
  && ok "the router's gRPC port over mutual TLS, on to the grpcs:// backend" || bad "router mTLS: rc $RC $(cat "$WORK/r-mtls.out")"
client r-nocert "localhost:$GR" --grpc-tls --grpc-tls-ca-file "$WORK/ca.pem" --model gemma-4-tiny
[ $RC != 0 ] && ok "without a client certificate the router's gRPC port refuses (rc $RC)" \
  || bad "router without client cert: rc $RC $(cat "$WORK/r-nocert.out")"

# Bad TLS flags: a clear error at start, before anything listens.
timeout 60 "$TPSERVE" serve "${MODEL[@]}" --http-port 0 --grpc-port 0 --grpc-tls-certfile /nonexistent/cert.pem \
  --grpc-tls-keyfile "$WORK/a.key" >"$WORK/serve-bad.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "serve: --grpc-tls-certfile: cannot read /nonexistent/cert.pem" "$WORK/serve-bad.out" \
  && ! grep -q "listening" "$WORK/serve-bad.out" && ok "serve with an unreadable --grpc-tls-certfile stops at start (exit $rc)" \
  || bad "serve bad cert: rc $rc $(cat "$WORK/serve-bad.out")"
router_exit bad '{"models": {"m": {"backends": ["grpcs://localhost:1"]}}}' --grpc-port 0 --grpc-tls-certfile "$WORK/a.pem"
[ $RC -ne 0 ] && grep -q "router: TLS needs both --grpc-tls-certfile (the certificate) and --grpc-tls-keyfile" "$WORK/bad.out" \
  && ok "a router with a certificate and no key stops at start (exit $RC)" || bad "router no key: rc $RC $(cat "$WORK/bad.out")"
router_exit bad2 '{"models": {"m": {"backends": [{"url": "grpcs://localhost:1", "tls_ca_file": "/nonexistent/ca.pem"}]}}}'
[ $RC -eq 1 ] && grep -q 'models\["m"\].backends\[0\].tls_ca_file: cannot read /nonexistent/ca.pem' "$WORK/bad2.out" \
  && ok "an unreadable tls_ca_file of a grpcs:// backend stops the router at start (exit $RC)" \
  || bad "grpcs bad ca: rc $RC $(cat "$WORK/bad2.out")"
finish
