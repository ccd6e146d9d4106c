#!/usr/bin/env bash
# `tpserve serve` with 2 ranks under launch/tpserve-mpirun, stopped the way users and
# orchestrators stop it: SIGTERM to the launcher, then (second server) Ctrl-C, i.e. SIGINT to
# the launcher's process group. Each must drain: every accepted request, running or queued, ends
# with a finish reason (here: cut at --shutdown-timeout, an error event then [DONE]), a new
# request during the drain gets 503, rank 0 logs "drained", the launcher exits 0, and no
# rank is left. Servers bind free ports (port 0) and name them in --port-file.
# Usage: serve_signal_test.sh TPSERVE_BINARY FIXTURES_DIR TPSERVE_MPIRUN   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
LAUNCHER=$3
source "$(dirname "$0")/harness.sh"
TOK="$FIX/tokenizers/gemma/tokenizer.json"
MODEL=(--model gemma-4-tiny --load-format dummy --tokenizer "$TOK" --device cpu)
# --shutdown-timeout. Twenty-four 4000-token streams, one at a time (--max-num-seqs 1), are
# 96000 decode steps: longer than the 15 s drain below 6,400 steps/s (the tiny model ran about
# 2,400 a second at 2 ranks on the 2-core CI machine, 2026-12-01), so the drain runs to its
# end. The drain is long because the test must see it and send a new request inside it: CI
# runs two tests at once on two cores, and a 6 s drain once ended before the probe got CPU.
DRAIN_S=15
STREAMS=24
# The launcher runs in a process group of its own (job control, below); it starts mpirun in
# a session of its own (setsid), which the ranks stay in. Cleanup ends that group and the
# mpirun sessions (harness.sh SESSIONS), nothing else.
LPID=
LAUNCHERS=()
cleanup() {
  local l m
  for l in "${LAUNCHERS[@]}"; do
    m=$(pgrep -P "$l" -x mpirun) && SESSIONS+=("$m")
    kill -KILL -- -"$l" 2>/dev/null
  done
  harness_cleanup
}
trap cleanup EXIT

running() { for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }  # any of them
gone() { ! kill -0 "$1" 2>/dev/null; }
stream_started() { cat "$stream".* 2>/dev/null | grep -q '"text"'; }  # $stream: drain_case's
# Every stream admitted (running, waiting or already finished, from /metrics), so that none is
# still on its way in when the signal lands (it would get the drain's 503). Finished ones
# count: on a loaded machine the first stream can end before the last curl connects.
# $http: drain_case's.
all_admitted() {
  [ "$(curl -s -m 5 "http://127.0.0.1:$http/metrics" |
       awk '/^vllm:(num_requests_(running|waiting)|request_success_total)[ {]/ {s += $NF} END {print s + 0}')" \
    -ge "$STREAMS" ]
}
# The server itself says it is draining (/health is 503 "draining"): rank 0's log line reaches
# the log through mpirun's output forwarding, which a loaded machine can delay by seconds.
# Each probe's time, HTTP status, curl exit and body go to $health_log (printed when the drain
# was slow to show).
draining() {
  local out
  out=$(curl -s -m 5 -w ' [%{http_code}, curl exit %{exitcode}, %{time_total} s]' "http://127.0.0.1:$http/health")
  echo "$((SECONDS - t0)) s: $out" >>"$health_log"
  grep -q draining <<<"$out"
}

# drain_case TAG NAME SIGNAL TARGET [ENV...]: TARGET "pid" signals the launcher, "group" its
# process group; ENV: `env` arguments for the launcher (and so the ranks).
drain_case() {
  local tag=$1 name=$2 sig=$3 target=$4 HTTP GRPC
  shift 4
  local environment=("$@")
  local log="$WORK/$tag.log" stream="$WORK/$tag.stream" health_log="$WORK/$tag.health" i
  # Job control: the launcher gets its own process group, as a terminal's foreground job does,
  # and SIGINT is not ignored in it.
  set -m
  env "${environment[@]}" "$LAUNCHER" "${MPIRUN[@]:1}" -np 2 "$TPSERVE" serve "${MODEL[@]}" --host 127.0.0.1 --http-port 0 \
    --grpc-port 0 --port-file "$WORK/$tag.ports" --kv-cache-memory 128MiB --max-num-seqs 1 \
    --shutdown-timeout $DRAIN_S >"$log" 2>&1 &
  LPID=$!
  LAUNCHERS+=("$LPID")
  set +m
  if ! wait_ports "$WORK/$tag.ports" "$LPID"; then
    bad "$name: no port file: $(cat "$log")"
    return
  fi
  local http=$HTTP
  # mpirun, in the session tpserve-mpirun gave it: the session holds the ranks too.
  local mpirun_pid
  mpirun_pid=$(pgrep -P "$LPID" -x mpirun)
  [ -n "$mpirun_pid" ] && SESSIONS+=("$mpirun_pid")
  if ! wait_healthy $http; then
    bad "$name: server not ready: $(cat "$log")"
    return
  fi

  local curl_pids=()
  for i in $(seq 1 $STREAMS); do
    curl -s -N -m 120 "http://127.0.0.1:$http/v1/completions" \
      -d '{"prompt":"Hello","max_tokens":4000,"ignore_eos":true,"stream":true}' >"$stream.$i" &
    curl_pids+=($!)
  done
  if ! poll 60 stream_started; then
    bad "$name: no stream started: $(head -c 300 "$stream".*)"
    return
  fi
  if ! poll 30 all_admitted; then
    bad "$name: not all $STREAMS streams were admitted: $(curl -s "http://127.0.0.1:$http/metrics" | grep num_requests)"
    return
  fi

  local t0=$SECONDS
  if [ "$target" = group ]; then kill -"$sig" -- -"$LPID"; else kill -"$sig" "$LPID"; fi
  if poll 30 draining; then
    echo "  $name: /health said draining $((SECONDS - t0)) s after the signal"
    [ $((SECONDS - t0)) -ge 3 ] && echo "  the probes of /health: $(tail -20 "$health_log")"
  else
    bad "$name: rank 0 did not start draining within 30 s of the signal: $(cat "$log")"
  fi
  if running "${curl_pids[@]}"; then
    local code
    code=$(curl -s -m 30 -o "$WORK/$tag.refused" -w '%{http_code} (curl exit %{exitcode}: %{errormsg})' \
      "http://127.0.0.1:$http/v1/completions" -d '{"prompt":"Hi","max_tokens":3}')
    [ "${code%% *}" = 503 ] && grep -q "shutting down" "$WORK/$tag.refused" \
      && ok "$name: a new request during the drain gets 503 \"the server is shutting down\"" \
      || bad "$name: a request during the drain got $code $(cat "$WORK/$tag.refused" 2>/dev/null); log: $(tail -5 "$log")"
  else
    bad "$name: the streams ended before the drain could be probed ($((SECONDS - t0)) s after the signal): $(tail -c 300 "$stream".1)"
  fi

  # A hang guard, not a speed check: the drain ends at --shutdown-timeout, and the launcher's
  # own watchdog stops the job (exit status 1) at --shutdown-timeout + 30 s.
  poll $((DRAIN_S + 60)) gone "$LPID"
  local rc=0
  wait "$LPID" || rc=$?
  LPID=
  [ $rc -eq 0 ] && ok "$name: the launcher exits 0 ($((SECONDS - t0)) s after the signal, --shutdown-timeout $DRAIN_S)" \
    || bad "$name: launcher rc=$rc: $(tail -8 "$log")"
  wait "${curl_pids[@]}"
  local ended=0 cut=0
  for i in $(seq 1 $STREAMS); do
    if tail -n 3 "$stream.$i" | grep -q "data: \[DONE\]" \
      && grep -q -e "the server shut down before the request finished" -e '"finish_reason":"length"' "$stream.$i"; then
      ended=$((ended + 1))
    else
      echo "  stream $i: $(tail -c 400 "$stream.$i")"
    fi
    grep -q "the server shut down before the request finished" "$stream.$i" && cut=$((cut + 1))
  done
  [ $ended -eq $STREAMS ] && ok "$name: all $STREAMS streams (running and queued) end with a reason and [DONE]" \
    || bad "$name: only $ended/$STREAMS streams ended with a reason"
  # 96000 tokens one stream at a time outlast the drain: --shutdown-timeout must cut some.
  [ $cut -ge 1 ] && ok "$name: --shutdown-timeout cut $cut of $STREAMS streams" \
    || bad "$name: no stream was cut by --shutdown-timeout"
  grep -q "SIGUSR1: draining" "$log" && grep -q "drained; shutting down" "$log" \
    && ok "$name: rank 0 drained" || bad "$name: log: $(cat "$log")"
  [ -n "$mpirun_pid" ] && poll 15 session_gone "$mpirun_pid" && ok "$name: no rank and no mpirun left" \
    || bad "$name: left in mpirun's session: $(ps -o pid,args -s "$mpirun_pid")"
}

# Without harness.sh's OMP_NUM_THREADS=1, as users run it: OpenBLAS then starts its thread
# pool before main() can block the drain signals, and mpirun's SIGUSR1 once landed on one of
# those threads and killed both ranks (no drain, every stream cut without a reason).
drain_case term "SIGTERM to tpserve-mpirun" TERM pid -u OMP_NUM_THREADS
drain_case ctrl_c "Ctrl-C (SIGINT to the launcher's process group)" INT group

finish
