#!/usr/bin/env bash
# `tpserve router`'s active health probes with real processes: two `tpserve serve` replicas
# (gemma-4-tiny, dummy weights) behind a round_robin model with "health_check" (interval 1 s,
# timeout 2 s: a loaded 2-core CI machine must not fail a probe of a live replica). One replica stopped (SIGSTOP: it still accepts connections, never answers) is
# marked unhealthy in /metrics within about two intervals, logged once, and every request goes
# to the other; continued (SIGCONT), it is healthy again, logged once, and takes requests.
# Usage: router_health_test.sh TPSERVE_BINARY FIXTURES_DIR   (run by ctest)
set -u
TPSERVE=$1
FIX=$2
source "$(dirname "$0")/harness.sh"
replica_model "$FIX"

start_http P1 serve "${MODEL[@]}" --grpc-port -1
start_http P2 serve "${MODEL[@]}" --grpc-port -1
wait_replicas P1 P2
P1="http://127.0.0.1:$PORT_P1/v1"
P2="http://127.0.0.1:$PORT_P2/v1"
cat >"$WORK/router.json" <<JSON
{"models": {"gemma-4-tiny": {"policy": "round_robin", "health_check": {"interval_s": 1, "timeout_s": 2},
                             "backends": ["$P1", "$P2"]}}}
JSON
start_http R router --config "$WORK/router.json"
R="http://127.0.0.1:$PORT_R"

# backends N: N completions through the router; prints each "STATUS BACKEND", sorted, counted.
backends() {
  for _ in $(seq 1 "$1"); do
    curl -s -m 30 -D "$WORK/h" -o /dev/null -w '%{http_code} ' "$R/v1/completions" -H 'Content-Type: application/json' \
      -d '{"model":"gemma-4-tiny","prompt":"Hello","max_tokens":2}'
    backend_of "$WORK/h"
  done | sort | uniq -c | awk '{ printf "%s %s %s|", $1, $2, $3 }'
}
# Both replicas twice, as `backends 4` prints them (sorted by URL: the ports decide the order).
BOTH=$(printf '200 %s\n' "$P1" "$P1" "$P2" "$P2" | sort | uniq -c | awk '{ printf "%s %s %s|", $1, $2, $3 }')
# healthy URL: the backend's health gauge now.
healthy() {
  curl -s "$R/metrics" | metric "tpserve_router_backend_healthy{model=\"gemma-4-tiny\",backend=\"$1\"}" -
}
is_health() { [ "$(healthy "$1")" = "$2" ]; }

poll 10 is_health "$P1" 1 && poll 10 is_health "$P2" 1  # the first probe round passed
seen=$(backends 4)
[ "$seen" = "$BOTH" ] && is_health "$P1" 1 && is_health "$P2" 1 \
  && ok "probes pass: both replicas healthy and taking requests" || bad "before: $seen $(cat "$WORK/R.log")"

kill_session STOP "$SID_P1"
stopped_at=$SECONDS
poll 8 is_health "$P1" 0 && ok "a stopped replica is unhealthy in /metrics within $((SECONDS - stopped_at)) s (interval 1 s, timeout 2 s)" \
  || bad "stopped replica still healthy: $(curl -s "$R/metrics" | grep '^tpserve_router_backend_healthy') $(cat "$WORK/R.log")"
seen=$(backends 4)
[ "$seen" = "4 200 $P2|" ] && ok "every request goes to the other replica" || bad "while stopped: $seen"
# The probe times out: on a fresh connection "no whole answer within 2s", on a pooled one the
# read's own timeout.
grep -qE "backend $P1 \(model gemma-4-tiny\) is unhealthy, out of routing until a probe passes: GET http://127.0.0.1:$PORT_P1/health: (no whole answer within 2s|.*timeout)" \
  "$WORK/R.log" && ok "the change is logged, naming the probe and why" || bad "log: $(cat "$WORK/R.log")"

kill_session CONT "$SID_P1"
poll 8 is_health "$P1" 1 && ok "continued, the replica is healthy again" \
  || bad "continued replica not healthy: $(curl -s "$R/metrics" | grep '^tpserve_router_backend_healthy') $(cat "$WORK/R.log")"
seen=$(backends 4)
[ "$seen" = "$BOTH" ] && ok "and takes requests again" || bad "after: $seen"
sleep 2  # more probe rounds: a state that holds is not logged again
down=$(grep -c "is unhealthy" "$WORK/R.log")
up=$(grep -c "backend $P1 (model gemma-4-tiny) is healthy again: GET http://127.0.0.1:$PORT_P1/health answered HTTP 200" "$WORK/R.log")
[ "$down" = 1 ] && [ "$up" = 1 ] && ok "one log line per change" || bad "log lines: $down down, $up up: $(cat "$WORK/R.log")"
finish
