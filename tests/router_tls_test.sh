#!/usr/bin/env bash
# `tpserve router` with TLS backends, real processes: one `tpserve serve` replica (gemma-4-tiny,
# dummy weights) reached through TLS terminators (tests/tls_forwarder.py) in front of its HTTP
# port and through its own gRPC port served with TLS, every certificate signed by a CA made here
# with openssl. https://: a chat, streamed and not, with the CA in tls_ca_file (and kept-alive
# TLS connections reused); a 502 naming the certificate verification failure with another CA,
# and with a name the certificate does not hold; tls_insecure_skip_verify answers and warns; the
# router keeps serving after the failures. Mutual TLS: a terminator and the gRPC port that
# require a client certificate answer chats (and health probes) with tls_cert_file and
# tls_key_file; without them the chat is a prompt 502 saying what to set, and with a certificate
# from a CA the terminator does not trust a 502 naming the file. tls_server_name: a certificate for
# DNS:backend.test only, reached at 127.0.0.1, answers with "tls_server_name": "backend.test"
# and is a 502 naming the name checked without it (https:// and grpcs://). Unreadable TLS files
# and a key that is not the certificate's stop the router at start naming the field. The
# router's gRPC port: a chat over the https:// backend, and its certificate failure with another CA.
# Usage: router_tls_test.sh TPSERVE_BINARY FIXTURES_DIR   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
HERE=$(dirname "$0")
source "$HERE/harness.sh"
replica_model "$FIX"

# A CA and what it signed: a server certificate for DNS:localhost only, one for DNS:backend.test
# only, and the router's client certificate; another CA.
make_ca ca
make_ca other
make_cert server ca serverAuth
make_cert named ca serverAuth DNS:backend.test
make_cert client ca clientAuth
make_cert stranger other clientAuth  # a client certificate from a CA the backends do not trust

# The replica's gRPC port: TLS with the backend.test certificate, a client certificate required.
start_http S serve "${MODEL[@]}" --grpc-port 0 --grpc-tls-certfile "$WORK/named.pem" \
  --grpc-tls-keyfile "$WORK/named.key" --grpc-tls-client-ca-file "$WORK/ca.pem"
wait_replicas S
G=$(grpc_port S)
# forwarder NAME ARGS...: a TLS terminator in front of the replica's HTTP port; sets PORT_NAME.
forwarder() {
  local name=$1
  shift
  start_session "$name" "$WORK/$name.port" python3 "$HERE/tls_forwarder.py" "$@" "$PORT_S" "$WORK/$name.port"
}
forwarder T "$WORK/server.pem" "$WORK/server.key"
forwarder M --client-ca "$WORK/ca.pem" "$WORK/server.pem" "$WORK/server.key"  # mutual TLS
forwarder N "$WORK/named.pem" "$WORK/named.key"                                # DNS:backend.test
GOOD="https://localhost:$PORT_T/v1"
CA="\"tls_ca_file\": \"$WORK/ca.pem\""
CLIENT="\"tls_cert_file\": \"$WORK/client.pem\", \"tls_key_file\": \"$WORK/client.key\""
NAME='"tls_server_name": "backend.test"'
PROBE='"health_check": {"interval_s": 0.5}'
cat >"$WORK/router.json" <<JSON
{"models": {
  "gemma-4-tiny": {"backends": [{"url": "$GOOD", $CA}]},
  "wrong-ca": {"backends": [{"url": "$GOOD", "model": "gemma-4-tiny", "tls_ca_file": "$WORK/other.pem"}]},
  "wrong-ca-grpc": {"backends": [{"url": "$GOOD", "model": "gemma-4-tiny", "tls_ca_file": "$WORK/other.pem"}]},
  "wrong-name": {"backends": [{"url": "https://127.0.0.1:$PORT_T/v1", "model": "gemma-4-tiny", $CA}]},
  "insecure": {"backends": [{"url": "https://127.0.0.1:$PORT_T/v1", "model": "gemma-4-tiny",
                             "tls_insecure_skip_verify": true}]},
  "https-mtls": {$PROBE, "backends": [{"url": "https://localhost:$PORT_M/v1", "model": "gemma-4-tiny", $CA, $CLIENT}]},
  "https-no-cert": {"backends": [{"url": "https://localhost:$PORT_M/v1", "model": "gemma-4-tiny", $CA}]},
  "https-stranger": {"backends": [{"url": "https://localhost:$PORT_M/v1", "model": "gemma-4-tiny", $CA,
                                   "tls_cert_file": "$WORK/stranger.pem", "tls_key_file": "$WORK/stranger.key"}]},
  "https-named": {"backends": [{"url": "https://127.0.0.1:$PORT_N/v1", "model": "gemma-4-tiny", $CA, $NAME}]},
  "https-unnamed": {"backends": [{"url": "https://127.0.0.1:$PORT_N/v1", "model": "gemma-4-tiny", $CA}]},
  "grpcs-mtls": {$PROBE, "backends": [{"url": "grpcs://127.0.0.1:$G", "model": "gemma-4-tiny", $CA, $CLIENT, $NAME}]},
  "grpcs-no-cert": {"backends": [{"url": "grpcs://127.0.0.1:$G", "model": "gemma-4-tiny", $CA, $NAME}]},
  "grpcs-unnamed": {"backends": [{"url": "grpcs://127.0.0.1:$G", "model": "gemma-4-tiny", $CA, $CLIENT}]}}}
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
  && grep -q "the name checked: 127.0.0.1, the URL's host; set tls_server_name" "$WORK/body" \
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

# Mutual TLS: the client certificate is presented to a backend that requires one; without it
# the backend ends the handshake, and the chat is a 502 within seconds (no hang).
code=$(chat https-mtls)
[ "$code" = 200 ] && grep -q '"choices"' "$WORK/body" && ok "https:// requiring a client certificate: a chat with tls_cert_file" \
  || bad "https mtls: $code $(cat "$WORK/body") $(cat "$WORK/M.log")"
start=$SECONDS
code=$(chat https-no-cert)
[ "$code" = 502 ] && [ $((SECONDS - start)) -le 10 ] \
  && grep -q "(localhost:$PORT_M): tlsv13 alert certificate required (the backend requires a client certificate: set tls_cert_file and tls_key_file)" "$WORK/body" \
  && ok "https:// requiring a client certificate, none configured: a prompt 502 saying so" \
  || bad "https no cert: $code $(cat "$WORK/body")"
code=$(chat https-stranger)
[ "$code" = 502 ] && grep -q "the backend refused the client certificate in tls_cert_file $WORK/stranger.pem" "$WORK/body" \
  && ok "https:// refusing the client certificate configured: 502 naming it" \
  || bad "https stranger: $code $(cat "$WORK/body")"
code=$(chat grpcs-mtls)
[ "$code" = 200 ] && grep -q '"choices"' "$WORK/body" \
  && ok "grpcs:// to serve --grpc-tls-client-ca-file: a chat with tls_cert_file (and tls_server_name)" \
  || bad "grpcs mtls: $code $(cat "$WORK/body") $(cat "$WORK/R.log")"
code=$(chat grpcs-mtls true)
[ "$code" = 200 ] && tail -2 "$WORK/body" | grep -q '^data: \[DONE\]' && ok "a streamed chat over grpcs:// with mutual TLS" \
  || bad "grpcs mtls stream: $code $(head -c 600 "$WORK/body")"
start=$SECONDS
code=$(chat grpcs-no-cert)
[ "$code" = 502 ] && [ $((SECONDS - start)) -le 10 ] && grep -q "grpcs://127.0.0.1:$G: gRPC UNAVAILABLE" "$WORK/body" \
  && grep -q "does it require a client certificate (serve --grpc-tls-client-ca-file)? Set tls_cert_file" "$WORK/body" \
  && ok "grpcs:// requiring a client certificate, none configured: a prompt 502 asking for one" \
  || bad "grpcs no cert: $code $(cat "$WORK/body")"
# tls_server_name: the certificate names backend.test, the URL 127.0.0.1.
code=$(chat https-named)
[ "$code" = 200 ] && grep -q '"choices"' "$WORK/body" && ok "https:// at 127.0.0.1 with tls_server_name backend.test" \
  || bad "https named: $code $(cat "$WORK/body") $(cat "$WORK/N.log")"
code=$(chat https-unnamed)
[ "$code" = 502 ] && grep -q "IP address mismatch (the name checked: 127.0.0.1, the URL's host" "$WORK/body" \
  && ok "the same without tls_server_name: 502 naming the mismatch" || bad "https unnamed: $code $(cat "$WORK/body")"
code=$(chat grpcs-unnamed)
[ "$code" = 502 ] && grep -q "grpcs://127.0.0.1:$G: gRPC UNAVAILABLE" "$WORK/body" \
  && grep -q "does not hold the name checked, 127.0.0.1 (the URL's host); set tls_server_name" "$WORK/body" \
  && ok "grpcs:// at 127.0.0.1 without tls_server_name: 502 naming the name checked" \
  || bad "grpcs unnamed: $code $(cat "$WORK/body")"
# The health probes (every 0.5 s since the start) present the same certificate.
sleep 1
! grep -q "unhealthy" "$WORK/R.log" && [ "$(chat https-mtls)" = 200 ] && [ "$(chat grpcs-mtls)" = 200 ] \
  && ok "health probes of the mutual-TLS backends pass with the client certificate" \
  || bad "mtls probes: $(grep unhealthy "$WORK/R.log")"

router_exit bad '{"models": {"m": {"backends": [{"url": "https://localhost:1/v1", "tls_ca_file": "/nonexistent/ca.pem"}]}}}'
[ $RC -ne 0 ] && grep -q 'models\["m"\].backends\[0\].tls_ca_file: cannot load CA certificates from /nonexistent/ca.pem' \
  "$WORK/bad.out" && ! grep -q "listening" "$WORK/bad.out" \
  && ok "an unreadable tls_ca_file stops the router at start (exit $RC)" || bad "bad ca file: rc $RC $(cat "$WORK/bad.out")"
# start_refused NAME URL TLS_KEYS PATTERN: a router with one backend (URL and TLS_KEYS) stops at
# start with PATTERN in its output, before listening, and exits 1 (no crash on the way out).
start_refused() {
  router_exit "$1" "{\"models\": {\"m\": {\"backends\": [{\"url\": \"$2\", $3}]}}}"
  [ $RC -eq 1 ] && grep -q "$4" "$WORK/$1.out" && ! grep -q "listening" "$WORK/$1.out" \
    && ok "$1: the router stops at start (exit $RC)" || bad "$1: rc $RC $(cat "$WORK/$1.out")"
}
start_refused https-cert-unreadable "https://localhost:1/v1" \
  "\"tls_cert_file\": \"/nonexistent/client.pem\", \"tls_key_file\": \"$WORK/client.key\"" \
  'models\["m"\].backends\[0\].tls_cert_file: cannot read /nonexistent/client.pem'
start_refused grpcs-key-unreadable "grpcs://localhost:1" \
  "\"tls_cert_file\": \"$WORK/client.pem\", \"tls_key_file\": \"/nonexistent/client.key\"" \
  'models\["m"\].backends\[0\].tls_key_file: cannot read /nonexistent/client.key'
start_refused https-key-mismatch "https://localhost:1/v1" \
  "\"tls_cert_file\": \"$WORK/client.pem\", \"tls_key_file\": \"$WORK/server.key\"" \
  "models\\[\"m\"\\].backends\\[0\\].tls_key_file: $WORK/server.key is not the private key of the certificate in tls_cert_file $WORK/client.pem"
start_refused grpcs-key-mismatch "grpcs://localhost:1" \
  "\"tls_cert_file\": \"$WORK/client.pem\", \"tls_key_file\": \"$WORK/server.key\"" \
  "backends\\[0\\].tls_key_file: $WORK/server.key is not the private key of the certificate in tls_cert_file"
start_refused https-key-not-pem "https://localhost:1/v1" \
  "\"tls_cert_file\": \"$WORK/client.pem\", \"tls_key_file\": \"$WORK/client.pem\"" \
  "backends\\[0\\].tls_key_file: $WORK/client.pem holds no PEM private key"
finish
