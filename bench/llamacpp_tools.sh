#!/usr/bin/env bash
# llama.cpp's own tools (llama-perplexity, llama-bench, llama-quantize) as a peer for
# benchmarks and quality comparisons, plus the GGUF files they run on. Idempotent: each step
# is skipped when its output is cached under $CACHE (default ${TPSERVE_CACHE:-~/.cache/tpserve});
# outputs are written to NAME.tmp and renamed, so a cached file is whole.
#
#   bench/llamacpp_tools.sh            # make whatever is missing (first run: ~30 min on 2 cores)
#   TPSERVE_CACHE=/other/dir bench/llamacpp_tools.sh
#
# Makes:
#   $CACHE/llama.cpp-src        vendor/llama.cpp of the llama-cpp-python $LLAMA_CPP_VERSION sdist
#   $CACHE/llama.cpp-build/bin  llama-perplexity llama-bench llama-quantize (explicit AVX-512
#                               flags, no AMX, no -march=native: the native build has died with
#                               SIGILL on the development VMs)
#   $CACHE/gemma270m-f32.gguf   models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf dequantized to F32
#                               (same metadata and tokenizer), the base for --kl-divergence
#   $CACHE/bench-models/llama-3.2-1b{,.bf16.gguf,.q8_0.gguf,.q4_k_m.gguf}
# Needs: cmake, ninja, a C++ compiler with OpenMP, python3 -m venv (for pip download), and
# $PYTHON with torch, transformers, tokenizers, numpy (default /work/tools-venv/bin/python).
# The build runs under nice -n 15 with -j2 ($JOBS), so it stays out of a benchmark's way.
#
# Then, e.g. (the KL base file is written by the first command, read by the second):
#   B=$CACHE/llama.cpp-build/bin
#   $B/llama-perplexity -m $CACHE/gemma270m-f32.gguf -f /usr/share/common-licenses/GPL-3 -c 512 -t 2 \
#       --kl-divergence-base $CACHE/gemma270m-f32.kld
#   $B/llama-perplexity -m Q4_K_M.gguf -f /usr/share/common-licenses/GPL-3 -c 512 -t 2 \
#       --kl-divergence-base $CACHE/gemma270m-f32.kld --kl-divergence
#   $B/llama-bench -m FILE.gguf -t 2 -p 512 -n 64 -r 5 -o json
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${CACHE:-${TPSERVE_CACHE:-$HOME/.cache/tpserve}}
PYTHON=${PYTHON:-/work/tools-venv/bin/python}
JOBS=${JOBS:-2}
LLAMA_CPP_VERSION=0.3.36  # the same as bench/cpu_peers.sh
SRC=$CACHE/llama.cpp-src
BUILD=$CACHE/llama.cpp-build
BIN=$BUILD/bin
GEMMA_Q4=$CACHE/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf
GEMMA_F32=$CACHE/gemma270m-f32.gguf
BM=$CACHE/bench-models/llama-3.2-1b
mkdir -p "$CACHE/bench-models"

# 1. The source tree, from the llama-cpp-python source package.
if [ ! -f "$SRC/convert_hf_to_gguf.py" ]; then
  echo "== fetching llama-cpp-python $LLAMA_CPP_VERSION source package -> $SRC"
  [ -x "$CACHE/llama-venv/bin/pip" ] || python3 -m venv "$CACHE/llama-venv"
  tmp=$(mktemp -d)
  "$CACHE/llama-venv/bin/pip" download -q --no-deps --no-binary :all: \
    "llama-cpp-python==$LLAMA_CPP_VERSION" -d "$tmp"
  tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
  rm -rf "$SRC.tmp" "$SRC"
  cp -a "$tmp"/llama_cpp_python-*/vendor/llama.cpp "$SRC.tmp"
  mv "$SRC.tmp" "$SRC"
  rm -rf "$tmp"
fi

# 1b. The tools. ninja is a no-op when they are up to date.
TOOLS=(llama-perplexity llama-bench llama-quantize)
need_build=0
for t in "${TOOLS[@]}"; do [ -x "$BIN/$t" ] || need_build=1; done
if [ $need_build = 1 ]; then
  echo "== building ${TOOLS[*]} in $BUILD (log: $BUILD/build.log)"
  mkdir -p "$BUILD"
  nice -n 15 cmake -G Ninja -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX512_VBMI=ON \
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_OPENMP=ON \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    > "$BUILD/cmake.log" 2>&1 || { echo "cmake failed, see $BUILD/cmake.log" >&2; exit 1; }
  nice -n 15 ninja -C "$BUILD" -j"$JOBS" "${TOOLS[@]}" > "$BUILD/build.log" 2>&1 ||
    { echo "build failed, see $BUILD/build.log" >&2; exit 1; }
fi

# 2. Gemma 3 270M Q4_K_M dequantized to F32 with gguf-py: the same metadata and tokenizer,
# every tensor F32 (llama.cpp then runs exactly the dequantized weights).
if [ -f "$GEMMA_Q4" ] && [ ! -f "$GEMMA_F32" ]; then
  echo "== dequantizing $GEMMA_Q4 -> $GEMMA_F32"
  PYTHONPATH=$SRC/gguf-py nice -n 15 "$PYTHON" - "$GEMMA_Q4" "$GEMMA_F32.tmp" <<'EOF'
import sys
import numpy as np
import gguf
from gguf.quants import dequantize

src, dst = sys.argv[1], sys.argv[2]
r = gguf.GGUFReader(src)
arch = r.fields[gguf.Keys.General.ARCHITECTURE].contents()
w = gguf.GGUFWriter(dst, arch)
for f in r.fields.values():
    if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
        continue
    if f.name == gguf.Keys.General.FILE_TYPE:
        w.add_file_type(gguf.LlamaFileType.ALL_F32)
        continue
    t = f.types[0]
    sub = f.types[-1] if t == gguf.GGUFValueType.ARRAY else None
    w.add_key_value(f.name, f.contents(), t, sub_type=sub)
for t in r.tensors:
    a = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
    a = a.reshape(tuple(int(x) for x in reversed(t.shape)))
    w.add_tensor(t.name, a)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
EOF
  mv "$GEMMA_F32.tmp" "$GEMMA_F32"
elif [ ! -f "$GEMMA_Q4" ]; then
  echo "== $GEMMA_Q4 missing: skipping its F32 copy" >&2
fi

# 4. The Llama-3.2-1B-shaped bench checkpoint (as bench/cpu_peers.sh makes it), its bf16
# GGUF (llama.cpp's converter; the checkpoint carries its own tokenizer) and Q8_0 / Q4_K_M.
if [ ! -f "$BM/config.json" ]; then
  echo "== making the llama-3.2-1b bench checkpoint in $BM"
  rm -rf "$BM.tmp"
  nice -n 15 "$PYTHON" tools/make_bench_checkpoints.py --shape llama-3.2-1b --out "$BM.tmp"
  mv "$BM.tmp" "$BM"
fi
if [ ! -f "$BM.bf16.gguf" ]; then
  echo "== converting $BM to $BM.bf16.gguf"
  PYTHONPATH=$SRC/gguf-py nice -n 15 "$PYTHON" "$SRC/convert_hf_to_gguf.py" "$BM" \
    --outtype bf16 --outfile "$BM.bf16.gguf.tmp"
  mv "$BM.bf16.gguf.tmp" "$BM.bf16.gguf"
fi
for q in Q8_0 Q4_K_M; do
  out=$BM.${q,,}.gguf
  if [ ! -f "$out" ]; then
    echo "== quantizing $BM.bf16.gguf -> $out"
    nice -n 15 "$BIN/llama-quantize" "$BM.bf16.gguf" "$out.tmp" "$q" "$(nproc)" > "$out.log" 2>&1 ||
      { echo "llama-quantize failed, see $out.log" >&2; exit 1; }
    mv "$out.tmp" "$out"
  fi
done
echo "llama.cpp tools: $BIN (${TOOLS[*]})"
echo "files: $GEMMA_F32 $BM.bf16.gguf $BM.q8_0.gguf $BM.q4_k_m.gguf"
