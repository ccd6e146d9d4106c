#!/usr/bin/env bash
# `tpserve serve` with 2 ranks under launch/tpserve-mpirun, and rank 1 killed with SIGKILL
# while 4 streams run (issue 16 item 5): rank 0 learns it at once (launch/rank_liveness.h),
# every stream ends with an error event naming rank 1 and then [DONE], /health turns 503 (or
# the port closes), a new request gets 503 or a refused connection (never a hang), rank 0
# logs the loss, and the job exits non-zero with nothing left in mpirun's session.
# Prints the timings: kill -> every stream ended, kill -> the launcher exited.
# LAYOUT (optional, e.g. "--pipeline-parallel-size 2"): the 2 ranks as pipeline stages, so
# that the rank killed is the last stage, which rank 0 waits for point to point (issue 19
# item 5) rather than in a collective.
# Usage: serve_rank_death_test.sh TPSERVE_BINARY FIXTURES_DIR TPSERVE_MPIRUN [LAYOUT]   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
LAUNCHER=$3
read -r -a LAYOUT <<<"${4:-}"
source "$(dirname "$0")/harness.sh"
TOK="$FIX/tokenizers/gemma/tokenizer.json"
long_stream_model "$FIX" "$TOK"
STREAMS=4
LOG="$WORK/server.log"
LPID=
cleanup() {
  if [ -n "$LPID" ]; then
    local m
    m=$(pgrep -P "$LPID" -x mpirun) && SESSIONS+=("$m")
    kill -KILL -- -"$LPID" 2>/dev/null
  fi
  harness_cleanup
}
trap cleanup EXIT
now_ms() { echo $(($(date +%s%N) / 1000000)); }
gone() { ! kill -0 "$1" 2>/dev/null; }

# The launcher in a process group of its own (as in serve_signal_test.sh); it starts mpirun
# in a session of its own, which the ranks stay in.
set -m
"$LAUNCHER" "${MPIRUN[@]:1}" -np 2 "$TPSERVE" serve "${LONG_MODEL[@]}" --host 127.0.0.1 --http-port 0 --grpc-port 0 \
  --port-file "$WORK/ports.json" --kv-cache-memory 256MiB "${LAYOUT[@]}" >"$LOG" 2>&1 &
LPID=$!
set +m
if ! wait_ports "$WORK/ports.json" "$LPID"; then
  bad "no port file: $(cat "$LOG")"
  finish
  exit 1
fi
MPIRUN_PID=$(pgrep -P "$LPID" -x mpirun)
[ -n "$MPIRUN_PID" ] && SESSIONS+=("$MPIRUN_PID")
if ! wait_healthy "$HTTP"; then
  bad "server not ready: $(cat "$LOG")"
  finish
  exit 1
fi
# Each rank logs its pid at start-up; rank 1's must be a process of mpirun's session.
poll 30 grep -q '^tpserve\[rank 1\]: pid [0-9]' "$LOG"
RANK1=$(sed -n 's/^tpserve\[rank 1\]: pid \([0-9][0-9]*\) .*/\1/p' "$LOG" | head -1)
if [ -z "$RANK1" ] || ! session_pids "$MPIRUN_PID" | grep -qx "$RANK1"; then
  bad "rank 1's pid (\"$RANK1\") is not in mpirun's session: $(cat "$LOG")"
  finish
  exit 1
fi
ok "rank 1 logged its pid ($RANK1)"
if [ ${#LAYOUT[@]} -gt 0 ]; then
  grep -q "pp=2" "$LOG" && ok "the ranks are pipeline stages (${LAYOUT[*]})" || bad "no pp=2 in the log: $(cat "$LOG")"
fi

# Streams far longer than the test (60000 tokens: tens of seconds); logprobs: every token is
# an event, so a started stream shows at once.
curl_pids=()
for i in $(seq 1 $STREAMS); do
  curl -s -N -m 120 "http://127.0.0.1:$HTTP/v1/completions" \
    -d '{"prompt":[2,100,200],"max_tokens":60000,"ignore_eos":true,"stream":true,"logprobs":1}' >"$WORK/stream.$i" &
  curl_pids+=($!)
done
all_streaming() {
  local i
  for i in $(seq 1 $STREAMS); do grep -q '"text"' "$WORK/stream.$i" 2>/dev/null || return 1; done
}
if ! poll 60 all_streaming; then
  bad "not every stream started: $(head -c 300 "$WORK"/stream.*)"
  finish
  exit 1
fi

t_kill=$(now_ms)
kill -KILL "$RANK1"
# Watch, every 0.1 s for up to 15 s: /health, the streams, the launcher.
health_seen=
late=
t_streams=
t_exit=
while [ $(($(now_ms) - t_kill)) -lt 15000 ]; do
  if [ -z "$health_seen" ]; then
    code=$(curl -s -o "$WORK/health" -m 2 -w '%{http_code}' "http://127.0.0.1:$HTTP/health")
    case $code in
      503) grep -q "rank 1 of 2" "$WORK/health" && health_seen="503 naming rank 1" \
             || health_seen="503 without the rank: $(cat "$WORK/health")" ;;
      000) health_seen="refused" ;;
    esac
  fi
  # A new request once the loss shows: 503 (naming the rank) or a refused connection, never
  # a hang (curl exit 28).
  if [ -n "$health_seen" ] && [ -z "$late" ]; then
    late=$(curl -s -m 10 -o "$WORK/late" -w '%{http_code} %{exitcode}' "http://127.0.0.1:$HTTP/v1/completions" \
      -d '{"prompt":[2,100],"max_tokens":3}')
  fi
  if [ -z "$t_streams" ]; then
    running=0
    for p in "${curl_pids[@]}"; do kill -0 "$p" 2>/dev/null && running=1; done
    [ $running -eq 0 ] && t_streams=$(($(now_ms) - t_kill))
  fi
  if gone "$LPID"; then
    t_exit=$(($(now_ms) - t_kill))
    break
  fi
  sleep 0.1
done
echo "timings: kill -> every stream ended ${t_streams:-never} ms; kill -> the launcher exited ${t_exit:-never} ms"

case $health_seen in
  "503 naming rank 1" | refused) ok "/health after the loss: $health_seen" ;;
  "") bad "/health never turned 503 nor closed" ;;
  *) bad "/health after the loss: $health_seen" ;;
esac
touch "$WORK/late"
case $late in
  "503 "* | "000 7") ok "a new request after the loss: $late $(head -c 200 "$WORK/late")" ;;
  *) bad "a new request after the loss got \"$late\" (curl exit 28: it hung): $(cat "$WORK/late")" ;;
esac

ended=0
for i in $(seq 1 $STREAMS); do
  # The last two payloads: an error naming rank 1, then [DONE].
  last=$(grep '^data: ' "$WORK/stream.$i" | tail -n 2)
  if [ "$(echo "$last" | tail -n 1)" = "data: [DONE]" ] \
    && echo "$last" | head -n 1 | grep -q '"error":{"message":"rank 1 of 2 (host [^)]*) is gone'; then
    ended=$((ended + 1))
  else
    echo "  stream $i: $(tail -c 400 "$WORK/stream.$i")"
  fi
done
[ $ended -eq $STREAMS ] && ok "all $STREAMS streams end with an error naming rank 1, then [DONE] (${t_streams:-?} ms after the kill)" \
  || bad "only $ended/$STREAMS streams ended with the error and [DONE]"
[ -n "$t_streams" ] && [ "$t_streams" -le 5000 ] && ok "the streams ended within 5 s of the kill" \
  || bad "the streams did not end within 5 s (${t_streams:-never} ms)"

grep -q "rank 1 of 2 (host .*) is gone" "$LOG" && grep -q "rank 1 is gone; exiting" "$LOG" \
  && ok "rank 0 logged the loss and its exit" || bad "rank 0's log: $(cat "$LOG")"

if [ -n "$t_exit" ]; then
  rc=0
  wait "$LPID" || rc=$?
  LPID=
  [ $rc -ne 0 ] && ok "the launcher exits non-zero ($rc) ${t_exit} ms after the kill" \
    || bad "the launcher exited 0 after a rank died"
  [ "$t_exit" -le 10000 ] && ok "the job is gone within 10 s" || bad "the job took ${t_exit} ms"
else
  bad "the launcher is still running 15 s after the kill: $(tail -5 "$LOG")"
fi
[ -n "$MPIRUN_PID" ] && poll 10 session_gone "$MPIRUN_PID" && ok "no rank and no mpirun left" \
  || bad "left in mpirun's session: $(ps -o pid,args -s "$MPIRUN_PID")"
wait "${curl_pids[@]}" 2>/dev/null

finish
