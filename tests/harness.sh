# Sourced by the end-to-end shell tests (cli_test.sh, serve_test.sh, serve_signal_test.sh,
# tpbench_test.sh, client_conformance_test.sh, router_*test.sh): MPI settings for a 2-core CI
# machine, a scratch directory, PASS/FAIL counting, the ports a server got, and ending exactly
# the processes a test started; at the end, what the router tests share (their replicas, the
# router's start and stop, its /metrics) and the TLS tests' CAs and certificates.
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1
MPIRUN=(mpirun --oversubscribe --allow-run-as-root)
WORK=$(mktemp -d)
# long_stream_model FIXTURES_DIR TOKENIZER: sets LONG_MODEL, serve's model flags for tests that
# need streams to outlast any stall of their clients: the gemma4_text fixture's shape (64
# wide, 262144 positions) with a vocabulary the tokenizer fits in, dummy weights, at
# --max-model-len 65536, so that a stream of 60000 tokens runs for tens of seconds even on a
# fast CPU, where gemma-4-tiny's 4096 positions last ~2 s and a client kept off the CPU that
# long saw its stream finish.
long_stream_model() {
  mkdir -p "$WORK/long-stream-model"
  sed 's/"vocab_size\(_per_layer_input\)\{0,1\}": 512/"vocab_size\1": 2048/' "$1/models/gemma4_text/config.json" \
    >"$WORK/long-stream-model/config.json"
  LONG_MODEL=(--model "$WORK/long-stream-model" --load-format dummy --tokenizer "$2" --device cpu --max-model-len 65536)
}
pass=0
fail=0
ok() { echo "PASS: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
# The tally; the script's exit status when it is the last command.
finish() { echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; }

# poll SECONDS COMMAND...: runs COMMAND every 0.2 s until it succeeds or SECONDS pass.
poll() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.2
  done
}

# Servers bind port 0 (`tpserve serve --http-port 0 --grpc-port 0 --port-file FILE`) and
# say which ports they got: no test picks or guesses a port.
# wait_ports FILE PID: up to 2 minutes for FILE ({"http": P, "grpc": Q}, written whole by
# a rename once both APIs listen); sets HTTP and GRPC. Fails at once if PID has exited.
wait_ports() {
  local file=$1 pid=$2
  for _ in $(seq 1 240); do
    if [ -f "$file" ]; then
      HTTP=$(sed -n 's/.*"http": *\([0-9][0-9]*\).*/\1/p' "$file")
      GRPC=$(sed -n 's/.*"grpc": *\([0-9][0-9]*\).*/\1/p' "$file")
      [ -n "$HTTP" ] && [ -n "$GRPC" ] && return 0
      echo "wait_ports: $file: $(cat "$file")"
      return 1
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}
# wait_healthy PORT: up to 2 minutes for http://127.0.0.1:PORT/health to answer 200.
wait_healthy() {
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

# A server is started in a session of its own (`setsid CMD &`: not a process-group leader
# in a script without job control, so $! is the session's id). mpirun puts each rank in a
# process group of its own but leaves it in mpirun's session, so the session is what holds
# exactly what the test started; nothing outside it is signalled.
# session_pids SID: the processes still in session SID.
session_pids() {
  case $1 in '' | 0 | 1 | *[!0-9]*) return 1 ;; esac  # never "our own session" (pgrep -s 0)
  pgrep -s "$1"
}
# kill_session SIGNAL SID: SIGNAL to every process of session SID.
kill_session() {
  local pids
  pids=$(session_pids "$2") || return 0
  kill -"$1" $pids 2>/dev/null
  return 0
}
session_gone() { ! session_pids "$1" >/dev/null; }
# The sessions the EXIT trap kills (harness_cleanup); add each server's.
SESSIONS=()
harness_cleanup() {
  local s
  for s in "${SESSIONS[@]}"; do kill_session KILL "$s"; done
  rm -rf "$WORK"
}
trap harness_cleanup EXIT

# start_serve LIMIT_S SERVE_ARGS...: `$TPSERVE serve SERVE_ARGS` on 2 ranks in a session of its
# own on free ports, ended after LIMIT_S at the latest (a hang guard); sets SERVER, HTTP and
# GRPC; the log is $WORK/server.log. A server that is not ready fails the test, which ends.
start_serve() {
  local limit=$1
  shift
  setsid timeout -k 10 "$limit" "${MPIRUN[@]}" -np 2 "$TPSERVE" serve "$@" --host 127.0.0.1 --http-port 0 \
    --grpc-port 0 --port-file "$WORK/ports.json" >"$WORK/server.log" 2>&1 &
  SERVER=$!
  SESSIONS+=("$SERVER")
  if ! wait_ports "$WORK/ports.json" $SERVER || ! wait_healthy $HTTP; then
    bad "server not ready: $(cat "$WORK/server.log")"
    finish
    exit 1
  fi
}

# start_session NAME PORT_FILE CMD...: CMD in a session of its own (ended with the test), until
# it writes PORT_FILE (a JSON {"http": P} or a bare number); sets PORT_<NAME> and SID_<NAME>.
# A command that dies or writes nothing in a minute ends the test.
start_session() {
  local name=$1 file=$2
  shift 2
  rm -f "$file"
  setsid timeout -k 5 240 "$@" >"$WORK/$name.log" 2>&1 &
  local sid=$!
  SESSIONS+=("$sid")
  eval "SID_$name=$sid"
  for _ in $(seq 1 240); do
    if [ -f "$file" ]; then
      eval "PORT_$name=$(sed -n 's/.*"http": *\([0-9][0-9]*\).*/\1/p; t; s/^\([0-9][0-9]*\)$/\1/p' "$file")"
      return 0
    fi
    kill -0 $sid 2>/dev/null || break
    sleep 0.25
  done
  bad "$name did not start: $(cat "$WORK/$name.log")"
  finish
  exit 1
}

# start_http NAME ARGS...: `$TPSERVE ARGS` (serve or router) on a free loopback HTTP port (or
# $ON_PORT), through start_session.
start_http() {
  local name=$1
  shift
  start_session "$name" "$WORK/$name.port" "$TPSERVE" "$@" --host 127.0.0.1 --http-port "${ON_PORT:-0}" \
    --port-file "$WORK/$name.port"
}

# The router tests (router_test.sh, router_grpc_test.sh, router_grpc_front_test.sh,
# router_health_test.sh, router_tls_test.sh): `tpserve serve` replicas and routers started with
# start_http, one session each.
# replica_model FIXTURES_DIR: sets TOK, the gemma tokenizer, and MODEL, a replica's serve flags:
# gemma-4-tiny with dummy weights on one CPU thread and a 64 MiB KV cache.
replica_model() {
  TOK="$1/tokenizers/gemma/tokenizer.json"
  MODEL=(--model gemma-4-tiny --load-format dummy --tokenizer "$TOK" --device cpu --kv-cache-memory 64MiB --threads 1)
}
# wait_replicas NAME...: up to 2 minutes each for the replicas started as NAME (start_http NAME
# serve ...) to load, their /health answering 200; one that does not is a FAIL (the test goes on).
wait_replicas() {
  local name port
  for name in "$@"; do
    eval "port=\$PORT_$name"
    wait_healthy "$port" || bad "replica on $port not healthy"
  done
}
# grpc_port NAME: the gRPC port in NAME's port file (start_http NAME ... --grpc-port 0).
grpc_port() { sed -n 's/.*"grpc": *\([0-9][0-9]*\).*/\1/p' "$WORK/$1.port"; }
# end_session NAME: SIGKILL to the session started as NAME (start_session, start_http), and up to
# 10 s for it to be gone.
end_session() {
  local sid
  eval "sid=\$SID_$1"
  kill_session KILL "$sid"
  poll 10 session_gone "$sid"
}
# backend_of HEADERS_FILE: the router's x-tpserve-backend header in a response's headers (curl -D).
backend_of() { sed -n 's/^x-tpserve-backend: *\([^[:space:]]*\).*/\1/ip' "$1"; }
# router_exit NAME CONFIG_JSON [ARGS...]: `$TPSERVE router` with CONFIG_JSON (written to
# $WORK/NAME.json) and ARGS on a free HTTP port, run to its exit (30 s at most): for a router
# that must refuse its start. Sets RC, its exit status; its output is in $WORK/NAME.out.
router_exit() {
  local name=$1
  echo "$2" >"$WORK/$name.json"
  shift 2
  timeout 30 "$TPSERVE" router --config "$WORK/$name.json" --http-port 0 "$@" >"$WORK/$name.out" 2>&1
  RC=$?
}
# router_stops NAME: SIGTERM to the router started as NAME; a PASS when it is gone within 10 s,
# having logged "router: stopping".
router_stops() {
  local sid
  eval "sid=\$SID_$1"
  kill_session TERM "$sid"
  poll 10 session_gone "$sid" && grep -q "router: stopping" "$WORK/$1.log" && ok "SIGTERM stops the router" \
    || bad "router stop: $(cat "$WORK/$1.log")"
}
# metric SERIES [FILE]: the value of SERIES (its exact name{labels}) in a /metrics scrape, FILE
# ($WORK/metrics, or - for stdin); sum PREFIX [FILE]: the sum of every series whose
# name{labels} starts with PREFIX.
metric() { awk -v s="$1" 'index($0, s " ") == 1 { print $2 }' "${2:-$WORK/metrics}"; }
sum() { awk -v p="$1" 'index($0, p) == 1 { t += $2 } END { print t + 0 }' "${2:-$WORK/metrics}"; }

# TLS material for the TLS tests (router_tls_test.sh, grpc_tls_test.sh), made in $WORK with
# openssl. pki ARGS...: `openssl ARGS`; a failure ends the test.
pki() { openssl "$@" >>"$WORK/openssl.log" 2>&1 || { bad "openssl $1 failed: $(cat "$WORK/openssl.log")"; finish; exit 1; }; }
# make_ca NAME: a CA, $WORK/NAME.pem and its key $WORK/NAME.key.
make_ca() {
  pki req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1 test CA" -keyout "$WORK/$1.key" -out "$WORK/$1.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign"
}
# make_cert NAME CA USAGE [SAN]: a certificate signed by CA ($WORK/NAME.pem, its key
# $WORK/NAME.key) for USAGE (extendedKeyUsage: serverAuth, clientAuth) holding the names SAN
# (subjectAltName; default DNS:localhost).
make_cert() {
  pki req -newkey rsa:2048 -nodes -subj "/CN=$1" -keyout "$WORK/$1.key" -out "$WORK/$1.csr"
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "${4:-DNS:localhost}" "$3" >"$WORK/$1.ext"
  pki x509 -req -in "$WORK/$1.csr" -CA "$WORK/$2.pem" -CAkey "$WORK/$2.key" -CAcreateserial -days 2 \
    -extfile "$WORK/$1.ext" -out "$WORK/$1.pem"
}
