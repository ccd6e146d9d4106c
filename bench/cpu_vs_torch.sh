#!/usr/bin/env bash
# cpu::Linear beside PyTorch's linear on the same model shapes, in one run (same load):
# kernels_bench --models (STREAM triad, decode GEMV GB/s, prefill GFLOP/s per GEMM path),
# then bench/torch_linear_bench.py. Usage:
#   bench/cpu_vs_torch.sh [BUILD_DIR] [PYTHON]   (defaults: build, python3; PYTHON needs torch)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
python=${2:-python3}
threads=${THREADS:-2}
models=${MODELS:-gemma-4-1b,llama-3.2-1b}
"$build/bench/kernels_bench" --threads "$threads" --models "$models"
OMP_NUM_THREADS=$threads "$python" bench/torch_linear_bench.py --threads "$threads" --models "$models"
