#!/usr/bin/env bash
# The scaling suite: the same tpbench workload against `tpserve serve` in several parallel
# layouts, each on one node or across "nodes": network namespaces joined by veth links
# through a bridge (rate-limited with tc; delayed with netem where the kernel has it), the
# ranks talking MPI over TCP between nodes as separate hosts would (shared memory inside
# one). On a real cluster, --hostfile runs the multi-node layouts on those hosts instead.
# Ends with `tpbench report` over all runs (throughput, TTFT, TPOT, all-reduce and pipeline
# shares side by side) and, per emulated multi-node run, the bytes its links carried.
#
# A layout is tpT[xppP][@Nnodes]: T x P ranks (P pipeline stages of T tensor-parallel
# ranks), on one node, or on N nodes of T*P/N consecutive ranks each (so a stage of T ranks
# on each of P nodes when N = P). --tp L is the older form: TP t on one node and TP t with
# one rank per node, for each t in L (--modes picks the legs).
#
#   bench/scaling.sh              # defaults: gemma-4-1b, layouts tp2,tp4,tp4@2nodes,tp2xpp2@2nodes
#   bench/scaling.sh --model gemma-4-tiny --layouts tp1,tp2xpp2@2nodes --out /tmp/s -- --concurrency 1,4 --rounds 3
#   bench/scaling.sh --model gemma-4-tiny --tp 1,2 --out /tmp/s -- --concurrency 1,4 --rounds 3
#   bench/scaling.sh --hostfile hosts --model /data/gemma-4-31b --layouts tp8,tp16@2nodes,tp8xpp2@2nodes
#   bench/scaling.sh --layouts tp2xpp2@2nodes --server-args "--pipeline-micro-batches 1" --out /tmp/one-at-a-time
#
# Needs: build/launch/tpserve, build/bench/tpbench/tpbench, mpirun; root and iproute2 for
# emulated nodes (those layouts are skipped, with the reason, otherwise); jq for their
# link byte counts (skipped without it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TPSERVE=${TPSERVE:-$ROOT/build/launch/tpserve}
TPBENCH=${TPBENCH:-$ROOT/build/bench/tpbench/tpbench}

TP_LIST=""
LAYOUTS=""
DEFAULT_LAYOUTS=tp2,tp4,tp4@2nodes,tp2xpp2@2nodes
MODEL=gemma-4-1b
TOKENIZER=$ROOT/tests/fixtures/tokenizers/gemma/tokenizer.json
MODES=local,netns
HOSTFILE=""
LINK_RATE=10gbit
LINK_DELAY=""
KV=512MiB
OUT=$ROOT/results/scaling-$(date -u +%Y%m%d-%H%M%S)
BENCH_ARGS=()
SERVER_ARGS=()
usage() { sed -n '2,23p' "$0"; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --tp) TP_LIST=$2; shift 2 ;;
    --layouts) LAYOUTS=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --tokenizer) TOKENIZER=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --hostfile) HOSTFILE=$2; shift 2 ;;
    --link-rate) LINK_RATE=$2; shift 2 ;;  # tc rate per link, or none
    --link-delay) LINK_DELAY=$2; shift 2 ;;
    --kv-cache-memory) KV=$2; shift 2 ;;
    --server-args) read -r -a SERVER_ARGS <<< "$2"; shift 2 ;;  # more `tpserve serve` flags, every layout
    --out) OUT=$2; shift 2 ;;
    --) shift; BENCH_ARGS=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "scaling.sh: unknown option $1" >&2; usage ;;
  esac
done
[ -x "$TPSERVE" ] && [ -x "$TPBENCH" ] || { echo "scaling.sh: build first (bash tools/setup.sh)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "scaling.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }
[ -n "$TP_LIST" ] && [ -n "$LAYOUTS" ] && { echo "scaling.sh: give --tp or --layouts, not both" >&2; exit 2; }
[ ${#BENCH_ARGS[@]} -gt 0 ] || BENCH_ARGS=(--input-len 128 --output-len 64 --ignore-eos --concurrency 1,2,4,8,16 --rounds 10)
MODEL_ARGS=(--model "$MODEL")
[ -d "$MODEL" ] || MODEL_ARGS+=(--load-format dummy)
[ -n "$TOKENIZER" ] && MODEL_ARGS+=(--tokenizer "$TOKENIZER")

# --tp L (--modes M): TP t on one node, then TP t with one rank per node, as before layouts.
if [ -n "$TP_LIST" ]; then
  IFS=, read -r -a TPS <<< "$TP_LIST"
  IFS=, read -r -a MODE_LIST <<< "$MODES"
  for mode in "${MODE_LIST[@]}"; do
    for tp in "${TPS[@]}"; do
      case $mode in
        local) LAYOUTS+=",tp$tp" ;;
        netns|hostfile) LAYOUTS+=",tp$tp@${tp}nodes" ;;
        *) echo "scaling.sh: unknown mode $mode (local, netns)" >&2; exit 2 ;;
      esac
    done
  done
  LAYOUTS=${LAYOUTS#,}
fi
[ -n "$LAYOUTS" ] || LAYOUTS=$DEFAULT_LAYOUTS
IFS=, read -r -a LAYOUT_LIST <<< "$LAYOUTS"
# Parsed layouts: "T P N" (N = 0: one node, shared memory; N > 0: N emulated or listed nodes).
PARSED=()
MAX_NODES=0
for l in "${LAYOUT_LIST[@]}"; do
  if [[ ! $l =~ ^tp([0-9]+)(xpp([0-9]+))?(@([0-9]+)nodes?)?$ ]]; then
    echo "scaling.sh: layout \"$l\" is not tpT[xppP][@Nnodes] (e.g. tp4, tp2xpp2@2nodes)" >&2; exit 2
  fi
  t=${BASH_REMATCH[1]} p=${BASH_REMATCH[3]:-1} n=${BASH_REMATCH[5]:-0}
  [ "$t" -ge 1 ] && [ "$p" -ge 1 ] || { echo "scaling.sh: layout $l: sizes must be at least 1" >&2; exit 2; }
  if [ "$n" -gt 0 ] && [ $(( t * p % n )) != 0 ]; then
    echo "scaling.sh: layout $l: $(( t * p )) ranks do not split evenly over $n nodes" >&2; exit 2
  fi
  PARSED+=("$t $p $n")
  [ "$n" -gt $MAX_NODES ] && MAX_NODES=$n
done

mkdir -p "$OUT"
CORES=$(nproc)
HTTP=18000
GRPC=18001
# Ranks yield while they wait for MPI messages, on one node as across emulated ones (so the
# two compare): emulated nodes share this machine's cores, and a rank busy-polling for MPI
# messages would starve the kernel's packet processing for the veth links (6 ms per
# 16-float all-reduce here, 50 us with yielding). Real nodes do not share cores.
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
RUNS=()
NETNS_MADE=0
NETNS_SKIP=""
LINK_SUMMARY=()

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
  for ns in $(ip netns list 2>/dev/null | awk '/^tpn[0-9]/ {print $1}'); do
    ip netns del "$ns" 2>/dev/null || true
    rm -f "/etc/netns/$ns/hosts"; rmdir "/etc/netns/$ns" 2>/dev/null || true
  done
  rmdir /etc/netns 2>/dev/null || true  # only when nothing else is there
  ip link del tpbr0 2>/dev/null || true
}
cleanup() { stop_server; teardown_netns; }
trap cleanup EXIT

# Emulated nodes tpn1..$1: namespaces on a bridge, each link shaped with tc. Sets
# NETNS_LINK (what the links are) and AGENT (Open MPI's way into a namespace).
setup_netns() {
  local nodes=$1
  NETNS_MADE=1
  teardown_netns  # leftovers of an interrupted run
  ip link add tpbr0 type bridge
  ip addr add 10.77.0.254/24 dev tpbr0
  ip link set tpbr0 up
  local shaping="tbf rate $LINK_RATE burst 256kb latency 50ms"
  [ -n "$LINK_DELAY" ] && shaping="netem delay $LINK_DELAY rate $LINK_RATE"
  [ "$LINK_RATE" = none ] && shaping=""
  NETNS_LINK="veth+bridge; ${shaping:+tc }${shaping:-unshaped}"
  for i in $(seq 1 "$nodes"); do
    ip netns add tpn$i
    ip link add tpv$i type veth peer name eth0 netns tpn$i
    ip link set tpv$i master tpbr0 up
    ip -n tpn$i addr add 10.77.0.$i/24 dev eth0
    ip -n tpn$i link set eth0 up
    ip -n tpn$i link set lo up
    # Each node resolves the others' hostnames (ip netns exec binds /etc/netns/NS/hosts
    # over /etc/hosts), as hosts of a cluster do: tpserve's rank liveness needs rank 0's.
    mkdir -p /etc/netns/tpn$i
    { echo "127.0.0.1 localhost"; for j in $(seq 1 "$nodes"); do echo "10.77.0.$j tpn$j"; done; } > /etc/netns/tpn$i/hosts
    # Shape both directions: the root side (toward the namespace) and inside it.
    [ -z "$shaping" ] && continue
    if ! tc qdisc add dev tpv$i root $shaping 2>/dev/null || ! tc -n tpn$i qdisc add dev eth0 root $shaping 2>/dev/null; then
      echo "== netns: this kernel refuses 'tc qdisc ... $shaping'"
      [ -n "$LINK_DELAY" ] && echo "   (no sch_netem: rerun without --link-delay for rate limiting only)"
      NETNS_LINK="veth+bridge; unshaped"
    fi
  done
  AGENT=$OUT/netns-agent.sh
  cat > "$AGENT" <<'AGENT_EOF'
#!/bin/sh
# Open MPI's rsh agent for the netns "nodes": host 10.77.0.N runs in namespace tpnN, with a
# hostname of its own (tpnN), as a separate host has: Open MPI tells nodes apart by it (and
# names its shared-memory segments after it), and so does tpserve's default layout.
host=$1; shift
node=tpn${host##*.}
exec ip netns exec "$node" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$node" "$*"
AGENT_EOF
  chmod +x "$AGENT"
}

# Bytes each emulated node's link has carried so far: "rx tx" per node 1..$1, one line each
# (rx: what the node sent, tx: what it received, as the bridge side of its veth counts them).
link_counters() {
  for i in $(seq 1 "$1"); do
    echo "$(cat /sys/class/net/tpv$i/statistics/rx_bytes) $(cat /sys/class/net/tpv$i/statistics/tx_bytes)"
  done
}

# Writes $1/link.json: the bytes on each node's link during the tpbench run (warm-up
# included) and the tokens the run's successful requests put through the model: prompt
# and generated tokens, less each request's last one (returned, never fed back). Node 1
# also carries the client's gRPC traffic; with 2 nodes, node 2's link carries exactly the
# traffic between the nodes (MPI's, plus Open MPI's daemons' few bytes).
write_link_record() {
  local dir=$1 nodes=$2 before=$3 after=$4
  local tokens
  tokens=$(jq -s 'map(select(.success))
    | {requests: length, prompt_tokens: (map(.prompt_tokens | if . < 0 then 0 else . end) | add // 0),
       completion_tokens: (map(.completion_tokens) | add // 0)}
    | .forward_tokens = .prompt_tokens + .completion_tokens - .requests' "$dir/requests.jsonl")
  paste -d' ' <(echo "$before") <(echo "$after") | awk -v n="$nodes" -v link="$LINK" -v tokens="$tokens" '
    { rx[NR] = $3 - $1; tx[NR] = $4 - $2 }
    END {
      printf "{\"nodes\": %d, \"link\": \"%s\", \"tokens\": %s, \"links\": [", n, link, tokens
      for (i = 1; i <= n; i++) printf "%s{\"node\": %d, \"sent_bytes\": %d, \"received_bytes\": %d}", (i > 1 ? ", " : ""), i, rx[i], tx[i]
      printf "]}\n"
    }' | jq . > "$dir/link.json"
  if [ "$nodes" = 2 ]; then
    jq -r --arg name "$(basename "$dir")" '(.links[1].sent_bytes + .links[1].received_bytes) as $b
      | .tokens.forward_tokens as $t
      | "| \($name) | \($b) | \($t) | \(if $t > 0 then ($b / $t | floor) else "-" end) |"' "$dir/link.json"
  fi
}

# One server start + one tpbench run. $1 mode (local | netns | hostfile), $2 T, $3 P, $4
# nodes (0 = one node), $5 the address tpbench connects to; the rest: the mpirun command.
run_one() {
  local mode=$1 tp=$2 pp=$3 nodes=$4 addr=$5; shift 5
  local world=$(( tp * pp ))
  local name="$mode-tp$tp" threads=$(( CORES / world > 0 ? CORES / world : 1 ))
  [ "$pp" -gt 1 ] && name+="xpp$pp"
  [ "$nodes" -gt 0 ] && name+="-${nodes}nodes"
  local log="$OUT/$name.server.log"
  echo "== $name: starting $world rank(s) ($threads thread(s) each), TP $tp x PP $pp"
  local t0; t0=$(date +%s.%N)
  setsid "$@" "$TPSERVE" serve "${MODEL_ARGS[@]}" --tensor-parallel-size "$tp" --pipeline-parallel-size "$pp" \
    --threads $threads --kv-cache-memory "$KV" --host 0.0.0.0 "${SERVER_ARGS[@]}" \
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
  local before=""
  [ "$mode" = netns ] && before=$(link_counters "$nodes")
  local layout="tp$tp"
  [ "$pp" -gt 1 ] && layout+="xpp$pp"
  [ "$nodes" -gt 0 ] && layout+="@${nodes}nodes"
  "$TPBENCH" run --target "grpc://$addr:$GRPC" --tokenizer "$TOKENIZER" --load-time-s "$load_s" \
    --label "$name${SERVER_ARGS[*]:+ ${SERVER_ARGS[*]}}" --nodes $(( nodes > 0 ? nodes : 1 )) --meta "mode=$mode,layout=$layout,link=$LINK" \
    --out "$OUT/$name" --progress=false "${BENCH_ARGS[@]}" || echo "   tpbench failed (records so far are kept)"
  if [ "$mode" = netns ] && [ -f "$OUT/$name/requests.jsonl" ] && command -v jq >/dev/null; then
    local row; row=$(write_link_record "$OUT/$name" "$nodes" "$before" "$(link_counters "$nodes")")
    [ -n "$row" ] && LINK_SUMMARY+=("$row")
  fi
  RUNS+=("$OUT/$name")
  stop_server
}

for spec in "${PARSED[@]}"; do
  read -r tp pp nodes <<< "$spec"
  world=$(( tp * pp ))
  if [ "$nodes" = 0 ]; then
    LINK="shared memory (one node)"
    run_one local "$tp" "$pp" 0 127.0.0.1 mpirun --oversubscribe --allow-run-as-root -np "$world" || true
  elif [ -n "$HOSTFILE" ]; then
    LINK="cluster network ($HOSTFILE)"
    first=$(awk 'NF && $1 !~ /^#/ {print $1; exit}' "$HOSTFILE")
    run_one hostfile "$tp" "$pp" "$nodes" "$first" mpirun -np "$world" --hostfile "$HOSTFILE" \
      --map-by "ppr:$(( world / nodes )):node" || true
  else
    if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1; then
      [ -z "$NETNS_SKIP" ] && echo "== netns: skipped (needs root and iproute2 network namespaces)"
      NETNS_SKIP=1; continue
    fi
    [ $NETNS_MADE = 1 ] || setup_netns "$MAX_NODES"
    LINK=$NETNS_LINK
    hosts=$OUT/hosts.netns.$nodes
    : > "$hosts"
    for i in $(seq 1 "$nodes"); do echo "10.77.0.$i slots=$(( world / nodes ))" >> "$hosts"; done
    # Consecutive ranks fill a node (stage s on node s when nodes = stages). Between nodes
    # MPI talks TCP over the shaped links; inside one, shared memory (vader), as on hosts.
    run_one netns "$tp" "$pp" "$nodes" 10.77.0.1 mpirun --allow-run-as-root -np "$world" --hostfile "$hosts" \
      --map-by slot --mca plm_rsh_agent "$AGENT" --mca oob_tcp_if_include 10.77.0.0/24 \
      --mca btl tcp,vader,self --mca btl_tcp_if_include 10.77.0.0/24 || true
  fi
done
teardown_netns
NETNS_MADE=0

[ ${#RUNS[@]} -gt 0 ] || { echo "scaling.sh: no run completed" >&2; exit 1; }
"$TPBENCH" report "${RUNS[@]}" --baselines "$ROOT/bench/baselines/cloud.json" --out "$OUT/report"
if [ ${#LINK_SUMMARY[@]} -gt 0 ]; then
  {
    echo "Bytes on the link between the 2 emulated nodes during each run (warm-up included; MPI's"
    echo "payload and headers, TCP/IP and Ethernet framing), per token through the model (the"
    echo "successful requests' prompt and generated tokens, less each one's last, never fed back):"
    echo
    echo "| run | bytes between nodes | tokens through the model | bytes per token |"
    echo "|---|---:|---:|---:|"
    printf '%s\n' "${LINK_SUMMARY[@]}"
  } > "$OUT/report/link_bytes.md"
  cat "$OUT/report/link_bytes.md"
fi
echo "scaling.sh: $OUT/report/report.md"
