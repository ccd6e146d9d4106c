#!/usr/bin/env bash
# CPU peers: tpserve, PyTorch (CPU, bf16, torch.set_num_threads = tpserve's threads) and
# llama.cpp (llama-cpp-python, the same checkpoint converted to GGUF bf16 by llama.cpp's own
# converter) on the same random-weight checkpoints, batch 1: a prompt of 512 token ids, then
# 64 greedy decode steps. Engines alternate run by run (the order rotates each round, one
# process per run), and every round starts with a STREAM triad, so all numbers share the
# machine's state. Writes one JSON line per run (and per triad) to OUT/runs.jsonl and a
# summary (median and max, ratios, triad GB/s, peak RSS against the weights) to OUT/report.md.
# 10 rounds by default: on a VM a process's decode speed can be bimodal (the memory it is
# given decides it; docs/cpu_backend.md), and 5 rounds gave medians 0.83-0.97x where 10 gave
# 1.26-1.35x with the same kernels.
#
#   bench/cpu_peers.sh                                    # llama-3.2-1b and gemma-4-1b, 10 rounds
#   bench/cpu_peers.sh --models llama-3.2-1b --rounds 3 --engines tpserve,torch
#   PYTHON=/work/tools-venv/bin/python bench/cpu_peers.sh --out /tmp/peers
#   bench/cpu_peers.sh --engines tpserve,tpserve-sgemm,llamacpp   # + tpserve with --cpu-gemm sgemm
#
# Needs: build/launch/tpserve and build/bench/stream_bench; a Python with torch, transformers
# and sentencepiece ($PYTHON) to make the checkpoints (tools/make_bench_checkpoints.py, once,
# cached in $CACHE/bench-models), run PyTorch and convert to GGUF. llama.cpp: a venv at
# $CACHE/llama-venv with llama-cpp-python, built from source by pip the first time (library only, no
# examples or tools: about 15 minutes on the 2-core development VM with ccache cold; --engines
# without llamacpp skips it); its converter comes from the same
# release's source package (pip download), cached in $CACHE/llama-convert-VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TPSERVE=${TPSERVE:-$ROOT/build/launch/tpserve}
STREAM=${STREAM:-$ROOT/build/bench/stream_bench}
PYTHON=${PYTHON:-python3}
CACHE=${CACHE:-$HOME/.cache/tpserve}
LLAMA_CPP_VERSION=0.3.36

MODELS=llama-3.2-1b,gemma-4-1b
ENGINES=tpserve,torch,llamacpp
ROUNDS=10
THREADS=$(nproc)
PROMPT_LEN=512
DECODE=64
OUT=$ROOT/results/cpu-peers-$(date -u +%Y%m%d-%H%M%S)
usage() { sed -n '2,20p' "$0"; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --models) MODELS=$2; shift 2 ;;
    --engines) ENGINES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --prompt-len) PROMPT_LEN=$2; shift 2 ;;
    --decode) DECODE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "cpu_peers.sh: unknown option $1" >&2; usage ;;
  esac
done
[ -x "$TPSERVE" ] && [ -x "$STREAM" ] || {
  echo "cpu_peers.sh: build first: ninja -C build tpserve stream_bench" >&2; exit 1; }
"$PYTHON" -c 'import torch, transformers' 2>/dev/null || {
  echo "cpu_peers.sh: $PYTHON lacks torch/transformers (set PYTHON=/path/to/venv/bin/python)" >&2; exit 1; }
IFS=, read -r -a MODEL_LIST <<< "$MODELS"
IFS=, read -r -a ENGINE_LIST <<< "$ENGINES"
has_engine() { [[ ",$ENGINES," == *",$1,"* ]]; }
mkdir -p "$OUT" "$CACHE/bench-models"
RUNS=$OUT/runs.jsonl
LOG=$OUT/cpu_peers.log
: > "$RUNS"

# The checkpoints, once: written to NAME.tmp and renamed, so a cached one is whole.
for m in "${MODEL_LIST[@]}"; do
  dir=$CACHE/bench-models/$m
  if [ ! -f "$dir/config.json" ]; then
    echo "== making the $m checkpoint in $dir"
    rm -rf "$dir.tmp"
    "$PYTHON" tools/make_bench_checkpoints.py --shape "$m" --out "$dir.tmp" >>"$LOG" 2>&1
    mv "$dir.tmp" "$dir"
  fi
done

LLAMA_PY=$CACHE/llama-venv/bin/python
if has_engine llamacpp; then
  if ! "$LLAMA_PY" -c 'import llama_cpp' 2>/dev/null; then
    echo "== building llama-cpp-python $LLAMA_CPP_VERSION from source into $CACHE/llama-venv (log: $LOG)"
    python3 -m venv "$CACHE/llama-venv"
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
      "$CACHE/llama-venv/bin/pip" install "llama-cpp-python==$LLAMA_CPP_VERSION" numpy >>"$LOG" 2>&1 || {
      echo "cpu_peers.sh: llama-cpp-python did not build (see $LOG); run with --engines tpserve,torch" >&2; exit 1; }
  fi
  CONVERT=$CACHE/llama-convert-$LLAMA_CPP_VERSION
  if [ ! -f "$CONVERT/convert_hf_to_gguf.py" ]; then
    echo "== fetching llama.cpp's converter (llama-cpp-python $LLAMA_CPP_VERSION source package)"
    tmp=$(mktemp -d)
    "$CACHE/llama-venv/bin/pip" download --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_VERSION" \
      -d "$tmp" >>"$LOG" 2>&1
    tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
    src=$(echo "$tmp"/llama_cpp_python-*/vendor/llama.cpp)
    mkdir -p "$CONVERT.tmp"
    cp -r "$src/convert_hf_to_gguf.py" "$src/conversion" "$src/gguf-py" "$CONVERT.tmp/"
    rm -rf "$tmp" "$CONVERT"
    mv "$CONVERT.tmp" "$CONVERT"
  fi
  for m in "${MODEL_LIST[@]}"; do
    gguf=$CACHE/bench-models/$m.bf16.gguf
    if [ ! -f "$gguf" ]; then
      echo "== converting $m to GGUF bf16 with llama.cpp's convert_hf_to_gguf.py"
      PYTHONPATH=$CONVERT/gguf-py "$PYTHON" "$CONVERT/convert_hf_to_gguf.py" "$CACHE/bench-models/$m" \
        --outtype bf16 --outfile "$gguf.tmp" >>"$LOG" 2>&1
      mv "$gguf.tmp" "$gguf"
    fi
  done
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "tpserve: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "torch: $("$PYTHON" -c 'import torch; print(torch.__version__)')"
  echo "transformers: $("$PYTHON" -c 'import transformers; print(transformers.__version__)')"
  has_engine llamacpp && echo "llama-cpp-python: $("$LLAMA_PY" -c 'import llama_cpp; print(llama_cpp.__version__)')"
  echo "threads: $THREADS; prompt $PROMPT_LEN tokens, decode $DECODE steps; rounds $ROUNDS"
  echo "command: bench/cpu_peers.sh --models $MODELS --engines $ENGINES --rounds $ROUNDS --threads $THREADS"
} > "$OUT/env.txt"
cat "$OUT/env.txt"

for round in $(seq 1 "$ROUNDS"); do
  "$STREAM" "$THREADS" | sed "s/}\$/, \"round\": $round}/" >> "$RUNS"
  echo "== round $round/$ROUNDS: triad $(tail -1 "$RUNS" | grep -o '"triad_gbs": [0-9.]*' | cut -d' ' -f2) GB/s"
  n=${#ENGINE_LIST[@]}
  for m in "${MODEL_LIST[@]}"; do
    for k in $(seq 0 $((n - 1))); do
      e=${ENGINE_LIST[$(( (k + round - 1) % n ))]}  # the order rotates each round
      py=$PYTHON
      args=(--engine "$e" --model "$CACHE/bench-models/$m" --threads "$THREADS" --prompt-len "$PROMPT_LEN"
            --decode "$DECODE" --seed "$round" --label "round $round" --tpserve "$TPSERVE")
      if [ "$e" = llamacpp ]; then py=$LLAMA_PY; args+=(--gguf "$CACHE/bench-models/$m.bf16.gguf"); fi
      if line=$("$py" bench/cpu_peers.py run "${args[@]}" 2>>"$LOG"); then
        echo "$line" >> "$RUNS"
        echo "   $m $e: $(echo "$line" | "$PYTHON" bench/cpu_peers.py brief)"
      else
        echo "   $m $e: failed (see $LOG)"
      fi
    done
  done
done
"$PYTHON" bench/cpu_peers.py report "$RUNS" | tee "$OUT/report.md"
echo "records: $RUNS; environment: $OUT/env.txt"
