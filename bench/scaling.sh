#!/usr/bin/env bash
# The scaling suite: the same tpbench workload against `tpserve serve` at TP = 1, 2, 4 with
# every rank on one node, and again with every rank on its own "node": network
# namespaces joined by veth links through a bridge (rate-limited with tc; delayed with
# netem where the kernel has it), the ranks talking MPI over TCP as separate hosts would.
# On a real cluster, --hostfile runs the multi-node leg on those hosts instead. Ends with
# `tpbench report` over all runs (throughput, TTFT, TPOT, all-reduce share side by side).
#
#   bench/scaling.sh                                   # defaults: gemma-4-1b, TP 1,2,4, local + netns
#   bench/scaling.sh --model gemma-4-tiny --tp 1,2 --out /tmp/s -- --concurrency 1,4 --rounds 3
#   bench/scaling.sh --hostfile hosts --model /data/gemma-4-31b --tp 2,4,8
#
# Needs: build/launch/tpserve, build/bench/tpbench/tpbench, mpirun; root and iproute2 for
# the netns leg (skipped, with the reason, otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TPSERVE=${TPSERVE:-$ROOT/build/launch/tpserve}
TPBENCH=${TPBENCH:-$ROOT/build/bench/tpbench/tpbench}

TP_LIST=1,2,4
MODEL=gemma-4-1b
TOKENIZER=$ROOT/tests/fixtures/tokenizers/gemma/tokenizer.json
MODES=local,netns
HOSTFILE=""
LINK_RATE=10gbit
LINK_DELAY=""
KV=512MiB
OUT=$ROOT/results/scaling-$(date -u +%Y%m%d-%H%M%S)
BENCH_ARGS=()
usage() { sed -n '2,16p' "$0"; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --tp) TP_LIST=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --tokenizer) TOKENIZER=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --hostfile) HOSTFILE=$2; MODES=local,hostfile; shift 2 ;;
    --link-rate) LINK_RATE=$2; shift 2 ;;  # tc rate per link, or none
    --link-delay) LINK_DELAY=$2; shift 2 ;;
    --kv-cache-memory) KV=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --) shift; BENCH_ARGS=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "scaling.sh: unknown option $1" >&2; usage ;;
  esac
done
[ -x "$TPSERVE" ] && [ -x "$TPBENCH" ] || { echo "scaling.sh: build first (bash tools/setup.sh)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "scaling.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }
[ ${#BENCH_ARGS[@]} -gt 0 ] || BENCH_ARGS=(--input-len 128 --output-len 64 --ignore-eos --concurrency 1,2,4,8,16 --rounds 10)
MODEL_ARGS=(--model "$MODEL")
[ -d "$MODEL" ] || MODEL_ARGS+=(--load-format dummy)
[ -n "$TOKENIZER" ] && MODEL_ARGS+=(--tokenizer "$TOKENIZER")
mkdir -p "$OUT"
CORES=$(nproc)
HTTP=18000
GRPC=18001
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1
RUNS=()
NETNS_MADE=0

# The server's mpirun runs in a session of its own (setsid; $! is its pid and the session's
# id); its local ranks, and the netns leg's agents and daemons, stay in that session.
SERVER=""
# stop_server: SIGUSR1 to that mpirun, which forwards it to every rank (local or remote):
# they drain and exit. Up to 30 s, then SIGTERM (Open MPI ends the job), then SIGKILL to
# whatever is left in the session. Nothing else on the machine is signalled.
stop_server() {
  [ -n "$SERVER" ] || return 0
  kill -USR1 "$SERVER" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$SERVER" 2>/dev/null; then
    kill -TERM "$SERVER" 2>/dev/null || true
    for _ in $(seq 1 10); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.5; done
  fi
  local left
  left=$(pgrep -s "$SERVER" || true)
  [ -z "$left" ] || kill -KILL $left 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
  SERVER=""
}
teardown_netns() {
  [ $NETNS_MADE = 1 ] || return 0
  for ns in $(ip netns list 2>/dev/null | awk '/^tpn[0-9]/ {print $1}'); do ip netns del "$ns" 2>/dev/null || true; done
  ip link del tpbr0 2>/dev/null || true
}
cleanup() { stop_server; teardown_netns; }
trap cleanup EXIT

# One server start + one tpbench run. $1 mode, $2 tp, $3 address tpbench connects to,
# rest: the mpirun command prefix.
run_one() {
  local mode=$1 tp=$2 addr=$3; shift 3
  local name="$mode-tp$tp" threads=$(( CORES / tp > 0 ? CORES / tp : 1 ))
  local log="$OUT/$name.server.log"
  echo "== $name: starting $tp rank(s) ($threads thread(s) each)"
  local t0; t0=$(date +%s.%N)
  setsid "$@" "$TPSERVE" serve "${MODEL_ARGS[@]}" --threads $threads --kv-cache-memory "$KV" --host 0.0.0.0 \
    --http-port $HTTP --grpc-port $GRPC >"$log" 2>&1 &
  SERVER=$!
  local ready=0
  for _ in $(seq 1 1200); do
    if curl -sf "http://$addr:$HTTP/health" >/dev/null 2>&1; then ready=1; break; fi
    kill -0 $SERVER 2>/dev/null || break
    sleep 0.5
  done
  if [ $ready = 0 ]; then
    echo "   server did not become ready; last lines of $log:"; tail -5 "$log"; stop_server; return 1
  fi
  local load_s; load_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  echo "   ready after ${load_s}s; benchmarking"
  local nodes=1
  [ "$mode" != local ] && nodes=$tp
  "$TPBENCH" run --target "grpc://$addr:$GRPC" --tokenizer "$TOKENIZER" --load-time-s "$load_s" \
    --label "$name" --nodes $nodes --meta "mode=$mode,link=$LINK" --out "$OUT/$name" \
    --progress=false "${BENCH_ARGS[@]}" || echo "   tpbench failed (records so far are kept)"
  RUNS+=("$OUT/$name")
  stop_server
}

IFS=, read -r -a TPS <<< "$TP_LIST"
IFS=, read -r -a MODE_LIST <<< "$MODES"
for mode in "${MODE_LIST[@]}"; do
  case $mode in
  local)
    export OMPI_MCA_mpi_yield_when_idle=1  # as in the netns leg, so the two compare
    LINK="shared memory (one node)"
    for tp in "${TPS[@]}"; do
      run_one local "$tp" 127.0.0.1 mpirun --oversubscribe --allow-run-as-root -np "$tp" || true
    done ;;
  netns)
    # The emulated nodes share this machine's cores: a rank busy-polling for MPI messages
    # would starve the kernel's packet processing for the veth links (6 ms per 16-float
    # all-reduce here, 50 us with yielding). Real nodes do not share cores; yield.
    export OMPI_MCA_mpi_yield_when_idle=1
    if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1; then
      echo "== netns: skipped (needs root and iproute2 network namespaces)"; continue
    fi
    max_tp=0; for tp in "${TPS[@]}"; do [ "$tp" -gt $max_tp ] && max_tp=$tp; done
    NETNS_MADE=1
    teardown_netns  # leftovers of an interrupted run
    ip link add tpbr0 type bridge
    ip addr add 10.77.0.254/24 dev tpbr0
    ip link set tpbr0 up
    shaping="tbf rate $LINK_RATE burst 256kb latency 50ms"
    [ -n "$LINK_DELAY" ] && shaping="netem delay $LINK_DELAY rate $LINK_RATE"
    [ "$LINK_RATE" = none ] && shaping=""
    LINK="veth+bridge; ${shaping:+tc }${shaping:-unshaped}"
    for i in $(seq 1 $max_tp); do
      ip netns add tpn$i
      ip link add tpv$i type veth peer name eth0 netns tpn$i
      ip link set tpv$i master tpbr0 up
      ip -n tpn$i addr add 10.77.0.$i/24 dev eth0
      ip -n tpn$i link set eth0 up
      ip -n tpn$i link set lo up
      # Shape both directions: the root side (toward the namespace) and inside it.
      [ -z "$shaping" ] && continue
      if ! tc qdisc add dev tpv$i root $shaping 2>/dev/null || ! tc -n tpn$i qdisc add dev eth0 root $shaping 2>/dev/null; then
        echo "== netns: this kernel refuses 'tc qdisc ... $shaping'"
        [ -n "$LINK_DELAY" ] && echo "   (no sch_netem: rerun without --link-delay for rate limiting only)"
        LINK="veth+bridge; unshaped"
      fi
    done
    AGENT=$OUT/netns-agent.sh
    cat > "$AGENT" <<'AGENT_EOF'
#!/bin/sh
# Open MPI's rsh agent for the netns "nodes": host 10.77.0.N runs in namespace tpnN.
host=$1; shift
exec ip netns exec "tpn${host##*.}" sh -c "$*"
AGENT_EOF
    chmod +x "$AGENT"
    for tp in "${TPS[@]}"; do
      hosts=$OUT/hosts.netns.$tp
      : > "$hosts"
      for i in $(seq 1 "$tp"); do echo "10.77.0.$i slots=1" >> "$hosts"; done
      run_one netns "$tp" 10.77.0.1 mpirun --allow-run-as-root -np "$tp" --hostfile "$hosts" \
        --mca plm_rsh_agent "$AGENT" --mca oob_tcp_if_include 10.77.0.0/24 \
        --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 || true
    done
    teardown_netns
    NETNS_MADE=0 ;;
  hostfile)
    LINK="cluster network ($HOSTFILE)"
    first=$(awk 'NF && $1 !~ /^#/ {print $1; exit}' "$HOSTFILE")
    for tp in "${TPS[@]}"; do
      run_one hostfile "$tp" "$first" mpirun -np "$tp" --hostfile "$HOSTFILE" --map-by node || true
    done ;;
  *) echo "scaling.sh: unknown mode $mode" >&2; exit 2 ;;
  esac
done

[ ${#RUNS[@]} -gt 0 ] || { echo "scaling.sh: no run completed" >&2; exit 1; }
"$TPBENCH" report "${RUNS[@]}" --baselines "$ROOT/bench/baselines/cloud.json" --out "$OUT/report"
echo "scaling.sh: $OUT/report/report.md"
