#!/usr/bin/env bash
# The HTTP front end of `tpserve serve` under load, at reduced scale (bench/frontend_bench has
# the full-scale numbers): 256 concurrent streams from keep-alive connections (tpbench) all
# complete while 70 slow-header clients hold connections open, and those are dropped at
# --http-header-timeout; clients that disconnect mid-stream (rounds of 20 streams read for 5
# events, then closed) are cancelled every time, at 2 and at 4 ranks: each is counted as
# cancelled, none finishes by length, and the engine applies each cancel within one step of
# its arrival.
# Usage: serve_load_test.sh TPSERVE_BINARY TPBENCH_BINARY FIXTURES_DIR   (run by ctest)
set -u
TPSERVE=$1
TPBENCH=$2
FIX=$3
source "$(dirname "$0")/harness.sh"
TOK="$FIX/tokenizers/gemma/tokenizer.json"
MODEL=(--model gemma-4-tiny --load-format dummy --tokenizer "$TOK" --device cpu)
long_stream_model "$FIX" "$TOK"
ROUNDS=${DISCONNECT_ROUNDS:-10}
# Far more than a disconnected stream may run: tens of seconds, so that one whose client is
# kept off the CPU a while (40 clients and the ranks on two cores) still shows as not
# cancelled only if the server missed the close.
MAX_TOKENS=60000

# metric NAME [LABEL_FILTER]: a sample's value from /metrics on $http (0 when absent).
metric() {
  curl -s -m 10 "http://127.0.0.1:$http/metrics" | grep "^$1[{ ]" | grep -- "${2:-}" |
    awk '{s += $NF} END {printf "%d\n", s}'
}

none_running() { [ "$(metric vllm:num_requests_running)" = 0 ]; }

# start_server TAG NP MODEL_FLAGS... -- [ARGS...]: sets http and server.
start_server() {
  local tag=$1 np=$2 model=()
  shift 2
  while [ "$1" != -- ]; do
    model+=("$1")
    shift
  done
  shift
  setsid timeout -k 10 600 "${MPIRUN[@]}" -np "$np" "$TPSERVE" serve "${model[@]}" --host 127.0.0.1 --http-port 0 \
    --grpc-port 0 --port-file "$WORK/$tag.ports" --kv-cache-memory 256MiB "$@" >"$WORK/$tag.log" 2>&1 &
  server=$!
  SESSIONS+=("$server")
  if ! wait_ports "$WORK/$tag.ports" "$server" || ! wait_healthy "$HTTP"; then
    bad "$tag: server not ready: $(tail -20 "$WORK/$tag.log")"
    return 1
  fi
  http=$HTTP
}

stop_server() {
  kill_session TERM "$server"
  poll 30 session_gone "$server" || bad "$1: server did not stop: $(tail -5 "$WORK/$1.log")"
}

# read_events_and_close FIFO: POSTs the completion request read from FIFO, reads the
# stream until 5 events have come, and closes the connection.
read_events_and_close() {
  local body fd line n=0
  IFS= read -r body <"$1"
  exec {fd}<>"/dev/tcp/127.0.0.1/$http" || return
  printf 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
    "${#body}" "$body" >&"$fd"
  while [ $n -lt 5 ] && IFS= read -r -t 60 line <&"$fd"; do
    case $line in data:*) n=$((n + 1)) ;; esac
  done
  exec {fd}>&-
}

# disconnect_rounds NAME: ROUNDS rounds of 20 streams, each read for 5 events and closed;
# none may run to max_tokens.
disconnect_rounds() {
  local name=$1 r i
  local cancelled0 length0 tokens0 aborts0 delay0 lengths
  poll 60 none_running || bad "$name: requests still running before the rounds"
  cancelled0=$(metric vllm:request_success_total 'finished_reason="abort"')
  length0=$(metric vllm:request_success_total 'finished_reason="length"')
  tokens0=$(metric vllm:generation_tokens_total)
  aborts0=$(metric tpserve_engine_aborts_total)
  delay0=$(metric tpserve_engine_abort_delay_steps_total)
  for r in $(seq 1 "$ROUNDS"); do
    local clients=()
    for i in $(seq 1 20); do
      # logprobs: every token is an event, also one whose text the detokenizer holds back
      # (random weights emit byte pieces and special tokens that add no text). Each client
      # waits for its body on a FIFO, so that all 20 are running before any request starts,
      # and reads and closes its socket itself (no curl | head, whose close waits for two
      # processes and a SIGPIPE to be scheduled): a request sent while the rest were still
      # being forked once ran alone, at a fast CPU's ~2600 tokens/s, to its max_tokens before
      # its reader got the CPU to close.
      mkfifo "$WORK/body-${name// /}-$r-$i"
      (read_events_and_close "$WORK/body-${name// /}-$r-$i") &
      clients+=($!)
    done
    for i in $(seq 1 20); do
      printf '%s\n' "{\"prompt\":[2,$r,$((100 + i))],\"max_tokens\":$MAX_TOKENS,\"ignore_eos\":true,\"stream\":true,\"logprobs\":1}" \
        >"$WORK/body-${name// /}-$r-$i"
    done
    wait "${clients[@]}"
    lengths=$(metric vllm:request_success_total 'finished_reason="length"')
    [ "$lengths" = "$length0" ] || echo "  $name: round $r: finished by length $length0 -> $lengths"
  done
  local n=$((ROUNDS * 20))
  poll 60 none_running || bad "$name: requests still running"
  local cancelled length tokens
  cancelled=$(($(metric vllm:request_success_total 'finished_reason="abort"') - cancelled0))
  length=$(($(metric vllm:request_success_total 'finished_reason="length"') - length0))
  tokens=$(($(metric vllm:generation_tokens_total) - tokens0))
  [ "$cancelled" = "$n" ] && [ "$length" = 0 ] \
    && ok "$name: $cancelled of $n disconnected streams cancelled, none finished by length" \
    || bad "$name: of $n disconnected streams $cancelled cancelled, $length finished by length"
  # When a disconnect became visible, the front end cancelled the stream, and the engine
  # applied it at its next step boundary: the engine counts the steps completed between a
  # cancel's arrival and its application. (Tokens generated past the 5 read measured this
  # before, as time at the engine's speed, and with it the clients' own scheduling: on two
  # cores shared with the ranks a client may read its events seconds after they were sent.)
  local aborts delay most
  aborts=$(($(metric tpserve_engine_aborts_total) - aborts0))
  delay=$(($(metric tpserve_engine_abort_delay_steps_total) - delay0))
  most=$(metric tpserve_engine_abort_delay_steps_max)
  [ "$aborts" = "$n" ] && [ "$most" -le 1 ] \
    && ok "$name: the engine applied all $n cancels within a step of their arrival ($delay steps in all, at most $most)" \
    || bad "$name: the engine applied $aborts of $n cancels, $delay steps late in all, up to $most for one"
  echo "  $name: $tokens tokens generated for $n streams read for 5 tokens each"
}

# 1. Two ranks: load with slow-header clients connected.
if start_server load 2 "${MODEL[@]}" -- --max-num-seqs 256 --http-header-timeout 3; then
  slow=()
  for i in $(seq 1 70); do
    exec {fd}<>"/dev/tcp/127.0.0.1/$http" && printf 'POST /v1/completions HTTP/1.1\r\nX-Slow: ' >&"$fd" && slow+=("$fd")
  done
  [ ${#slow[@]} = 70 ] && ok "70 slow-header clients connected" || bad "only ${#slow[@]} slow clients connected"
  if "$TPBENCH" run --target "http://127.0.0.1:$http/v1" --tokenizer "$TOK" --input-len 16 --output-len 16 \
       --ignore-eos --concurrency 256 --rounds 2 --warmup 0 --timeout 120 --progress=false --num-prompts 64 \
       --fail-on-error --out "$WORK/load" >"$WORK/load.out" 2>&1; then
    n=$(grep -c '"success":true' "$WORK/load/requests.jsonl")
    [ "$n" = 512 ] && ok "256 concurrent keep-alive streams x 2 rounds: all 512 complete" \
      || bad "load: $n/512 succeeded"
  else
    bad "load: tpbench failed: $(tail -5 "$WORK/load.out")"
  fi
  dropped=0
  for fd in "${slow[@]}"; do
    # The server answers them 408 and closes them at --http-header-timeout (3 s): reading sees the end at once.
    timeout 10 cat <&"$fd" >/dev/null && dropped=$((dropped + 1))
    exec {fd}>&-
  done
  [ $dropped = 70 ] && ok "the 70 slow-header clients were dropped at --http-header-timeout" \
    || bad "$dropped/70 slow-header clients dropped"
  stop_server load
fi

# 2. Clients that disconnect, at two ranks and at four (two a core), with streams that would
# run for tens of seconds.
for np in 2 4; do
  if start_server "np$np" "$np" "${LONG_MODEL[@]}" -- --max-num-seqs 64; then
    disconnect_rounds "$np ranks"
    stop_server "np$np"
  fi
done

finish
