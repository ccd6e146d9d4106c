#!/usr/bin/env bash
# The main job: `tpserve serve` under mpirun with 2 ranks on the real Gemma 3 270M (Q4_K_M GGUF,
# fetched once by tools/fetch_real_model.sh into ~/.cache/tpserve; its tokenizer from the
# file, Gemma 3's chat template, its published generation defaults), one streamed chat request
# over HTTP and one prompt over gRPC with `tpserve client`, then a clean drain on SIGTERM to
# the launcher (build/launch/tpserve-mpirun: mpirun on which SIGTERM drains).
# Offline, with the model not cached, it says so and serves the built-in gemma-4-tiny shape
# instead (Gemma 4 architecture, deterministic random weights: the text is noise, the
# machinery is real).
set -euo pipefail
cd "$(dirname "$0")/.."
PROMPT=${1:-Explain tensor parallelism in one sentence.}
HTTP_PORT=${HTTP_PORT:-8000}
GRPC_PORT=${GRPC_PORT:-50051}
MPI_FLAGS=(--oversubscribe)
if [ "$(id -u)" -eq 0 ]; then MPI_FLAGS+=(--allow-run-as-root); fi
export OMPI_MCA_btl_vader_single_copy_mechanism=none
fetch_rc=0
MODEL_DIR=$(bash tools/fetch_real_model.sh) || fetch_rc=$?
if [ $fetch_rc -eq 0 ]; then
  MODEL=(--model "$MODEL_DIR" --max-model-len 4096)
  NAME="Gemma 3 270M ($MODEL_DIR)"
else
  echo "demo: OFFLINE: the real model (Gemma 3 270M) is not cached and could not be downloaded;" >&2
  echo "demo: serving the built-in gemma-4-tiny shape with RANDOM weights instead: its answers are noise." >&2
  MODEL=(--model gemma-4-tiny --load-format dummy --tokenizer tests/fixtures/tokenizers/gemma/tokenizer.json)
  NAME="gemma-4-tiny (random weights)"
fi
LOG=$(mktemp)
echo "+ tpserve-mpirun -np 2 build/launch/tpserve serve ${MODEL[*]} ... ($NAME; log: $LOG)"
build/launch/tpserve-mpirun "${MPI_FLAGS[@]}" -np 2 build/launch/tpserve serve \
  "${MODEL[@]}" --kv-cache-memory 256MiB \
  --host 127.0.0.1 --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" >"$LOG" 2>&1 &
LAUNCHER_PID=$!
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$HTTP_PORT/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 $LAUNCHER_PID 2>/dev/null; then cat "$LOG"; echo "demo: the server exited" >&2; exit 1; fi
  sleep 0.5
done
echo "+ tpserve client --http http://127.0.0.1:$HTTP_PORT --chat --prompt \"$PROMPT\""
build/launch/tpserve client --http "http://127.0.0.1:$HTTP_PORT" --chat --prompt "$PROMPT" --max-tokens 32
echo "+ tpserve client --grpc 127.0.0.1:$GRPC_PORT --prompt \"$PROMPT\""
build/launch/tpserve client --grpc "127.0.0.1:$GRPC_PORT" --prompt "$PROMPT" --max-tokens 32
# Drain: SIGTERM to the launcher, as systemd or Kubernetes sends it. Rank 0 drains; the other
# ranks wait for its shutdown plan; every rank and the launcher exit 0.
echo "+ kill -TERM $LAUNCHER_PID  # tpserve-mpirun"
kill -TERM $LAUNCHER_PID
rc=0
wait $LAUNCHER_PID || rc=$?
echo "+ server log:"
cat "$LOG"
echo "demo: server exited with $rc"
exit $rc
