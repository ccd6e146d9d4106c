#!/usr/bin/env bash
# The GPU check in one command, for a bare GPU machine (CUDA toolkit, CMake, ninja,
# Python; no MPI, gRPC or network): configures and builds the engine with
# -DTPSERVE_CUDA=ON against the dependency bundle, runs `ctest -L gpu`, runs the CUDA
# kernel micro-benchmark and the engine benchmark on dummy gemma-4-31b weights
# (engine_bench --backend cuda: copy bandwidth, cuBLAS GEMM, prefill TFLOP/s, decode at
# batch 1/8/64/256 over 1024 tokens, peak memory, KV blocks at --gpu-memory-utilization
# 0.9, and one batch-1 decode step timed op by op), checks that `tpserve generate --device cuda` gives the CPU backend's greedy tokens
# on a tiny checkpoint (1 rank, and 2 thread ranks sharing the GPU), and prints one summary
# table, after what the benchmarks' sweeps say to change (tools/gpu_check_summary.py: each
# production kernel choice beside the fastest one). Budget: under 8 minutes on one H200; when the steps before the engine benchmark
# leave too little time for the 31B model's 62 GB of dummy weights, it runs its first 12
# layers and says so.
#
#   tools/make_gpu_deps_bundle.sh      # once, on a Debian 12 dev machine: fills .gpu_deps/
#   bash bench/gpu_check.sh            # on the GPU machine, from the repository root
#   bash bench/gpu_check.sh --build-only   # configure and build, run nothing
#
# Environment (all optional): TPSERVE_GPU_DEPS (bundle, default .gpu_deps),
# TPSERVE_GPU_BUILD (build dir, default build-gpu), TPSERVE_CUDA_ARCHS (default 90),
# ENGINE_BENCH_ARGS (replaces the engine benchmark's default arguments),
# TPSERVE_GPU_CHECK_BUDGET_S (default 480: the whole script's time budget).
# Exits non-zero if the build or any GPU test fails. Without a GPU the tests skip.
set -uo pipefail
build_only=0
case "${1:-}" in
  "") ;;
  --build-only) build_only=1 ;;
  *) echo "usage: bash bench/gpu_check.sh [--build-only]" >&2; exit 2 ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
deps=${TPSERVE_GPU_DEPS:-$root/.gpu_deps}
build=${TPSERVE_GPU_BUILD:-$root/build-gpu}
archs=${TPSERVE_CUDA_ARCHS:-90}
jobs=$(nproc)
arch_lib=usr/lib/x86_64-linux-gnu
t_start=$(date +%s)
budget_s=${TPSERVE_GPU_CHECK_BUDGET_S:-480}
rows=()   # summary table rows: "step|result|seconds"
failed=0

log() { echo "gpu_check: $*"; }
elapsed() { echo $(( $(date +%s) - $1 )); }
row() { rows+=("$1|$2|$3"); }

# ---- 1. Dependencies: the bundle (if present) ahead of whatever the machine has. ----
cmake_deps=()
if [[ -d $deps/usr ]]; then
  # Unpack the files the bundle stores xz-compressed (once).
  if [[ -f $deps/COMPRESSED ]]; then
    while IFS= read -r f; do
      [[ -z $f || -e $deps/$f ]] && continue
      python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$deps/$f.xz" "$deps/$f" || { log "cannot unpack $f.xz"; exit 1; }
    done < "$deps/COMPRESSED"
  fi
  # ... and drop the unpacked copies on exit, so the bundle stays small enough to carry.
  trap 'while IFS= read -r f; do [[ -n $f && -e $deps/$f.xz ]] && rm -f "$deps/$f"; done < "$deps/COMPRESSED"' EXIT
  export CMAKE_PREFIX_PATH="$deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_PATH="$deps/$arch_lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$deps/$arch_lib:$deps/$arch_lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  command -v pkg-config > /dev/null || export PATH="$PATH:$deps/usr/bin"
  # Debian 12's libraries need GLIBCXX_3.4.30 (GCC 12); older systems get its libstdc++.
  sys_stdcxx=$(g++ -print-file-name=libstdc++.so.6 2> /dev/null || true)
  if [[ -z $sys_stdcxx || ! -e $sys_stdcxx ]] || ! grep -q GLIBCXX_3.4.30 "$sys_stdcxx"; then
    export LD_LIBRARY_PATH="$deps/compat:$LD_LIBRARY_PATH"
  fi
  cmake_deps=(-Dabsl_DIR="$deps/$arch_lib/cmake/absl" -DGTest_DIR="$deps/$arch_lib/cmake/GTest"
              -Dnlohmann_json_DIR="$deps/usr/share/cmake/nlohmann_json" -DICU_ROOT="$deps/usr")
  log "dependencies from $deps"
else
  log "no bundle at $deps: using the machine's packages (tools/make_gpu_deps_bundle.sh makes one)"
fi

# ---- 2. CUDA compiler and NCCL (toolkit, else the pip package beside PyTorch). ----
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[[ -x $nvcc ]] || { log "no nvcc on PATH or in /usr/local/cuda/bin"; exit 1; }
cuda_home=$(cd "$(dirname "$nvcc")/.." && pwd)
nccl_args=()
if [[ ! -e $cuda_home/include/nccl.h ]]; then
  nccl_root=$(python3 -c 'import nvidia.nccl as n, os; print(os.path.dirname(list(n.__path__)[0] + "/x"))' 2> /dev/null || true)
  if [[ -n $nccl_root && -e $nccl_root/include/nccl.h ]]; then
    nccl_args=(-DNCCL_ROOT="$nccl_root")
    export LD_LIBRARY_PATH="$nccl_root/lib:$LD_LIBRARY_PATH"
    log "NCCL from $nccl_root"
  fi
fi
export LD_LIBRARY_PATH="$cuda_home/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null | sed 's/^/gpu_check: GPU: /'

# ---- 3. Configure and build only what the check runs (logs in the build dir). ----
mkdir -p "$build"
t=$(date +%s)
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPSERVE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES="$archs" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTPSERVE_SERVING=OFF \
    "${cmake_deps[@]}" "${nccl_args[@]}" \
    > "$build/gpu_check.configure.log" 2>&1; then
  tail -40 "$build/gpu_check.configure.log"
  log "configure failed (log: $build/gpu_check.configure.log)"
  exit 1
fi
row "configure" "ok" "$(elapsed "$t")"
# The tests must build; the benchmarks are built after them, so that a benchmark that does
# not build is reported without hiding the test results.
tests=$(grep -oE 'tp_add_test\([a-z0-9_]+' tests/cuda_tests.cmake | sed 's/tp_add_test(//')
t=$(date +%s)
# shellcheck disable=SC2086
if ! cmake --build "$build" -j "$jobs" --target $tests > "$build/gpu_check.build.log" 2>&1; then
  grep -E "error|Error" "$build/gpu_check.build.log" | head -40
  log "build failed (log: $build/gpu_check.build.log)"
  exit 1
fi
row "build tests ($(echo $tests | wc -w) targets, sm_$archs)" "ok" "$(elapsed "$t")"
for extra in cuda_kernels_bench engine_bench tpserve; do
  ninja -C "$build" -t targets all 2> /dev/null | grep -q "^$extra:" || continue
  t=$(date +%s)
  if cmake --build "$build" -j "$jobs" --target "$extra" >> "$build/gpu_check.build.log" 2>&1; then
    row "build $extra" "ok" "$(elapsed "$t")"
  else
    row "build $extra" "FAILED" "$(elapsed "$t")"
    failed=1
  fi
done

if (( build_only )); then
  for r in "${rows[@]}"; do IFS='|' read -r step result secs <<< "$r"; log "$step: $result ($secs s)"; done
  exit $failed
fi

# ---- 4. GPU tests (plus the CPU planner test). ----
t=$(date +%s)
ctest --test-dir "$build" -L gpu -j 4 --timeout 120 --output-on-failure > "$build/gpu_check.ctest.log" 2>&1
ctest_rc=$?
ctest --test-dir "$build" -R '^memory_planner_test$' --output-on-failure >> "$build/gpu_check.ctest.log" 2>&1 || ctest_rc=1
while read -r name result secs; do
  row "  $name" "$result" "$secs"
done < <(awk '/Test +#[0-9]+:/ {
  for (i = 1; i <= NF; i++) { if ($i ~ /^#[0-9]+:$/) name = $(i + 1); if ($i == "sec") secs = $(i - 1) }
  res = "FAILED"; if ($0 ~ /Passed/) res = "ok"; else if ($0 ~ /Skipped/) res = "skipped"
  print name, res, secs }' "$build/gpu_check.ctest.log")
if (( ctest_rc != 0 )); then
  failed=1
  grep -E "Failure|FAILED|Expected|Which is|error" "$build/gpu_check.ctest.log" | head -60
fi
row "ctest -L gpu" "$( (( ctest_rc == 0 )) && echo ok || echo FAILED)" "$(elapsed "$t")"
# The bulk GEMV and programmatic launch are measured only where their tests (in
# cuda_linear_test and cuda_model_test) passed, start-up tuning only where its tests (those
# named *Tun*, and the timing helper's in cuda_elementwise_test) passed too: a broken
# kernel traps, which would end the benchmark that runs it and lose its other rows. A test
# binary that crashed or timed out (no test names to go by) turns both off.
bulk_ok=1
tuned_ok=1
# Suite.Test names of the failed GoogleTest cases (not gtest's "[  FAILED  ] 1 test" line).
failed_tests=$(grep -oE '^\[  FAILED  \] [A-Za-z0-9_/]+\.[A-Za-z0-9_/]+' "$build/gpu_check.ctest.log" |
               awk '{print $4}' | sort -u)
if grep -qE "(cuda_linear_test|cuda_model_test|cuda_elementwise_test) .*(Timeout|Exception|Not Run)" \
     "$build/gpu_check.ctest.log"; then
  bulk_ok=0
  tuned_ok=0
fi
if grep -qE "(cuda_linear_test|cuda_model_test) .*Failed" "$build/gpu_check.ctest.log" &&
   grep -vqE 'Tun' <<< "$failed_tests"; then
  bulk_ok=0
fi
if grep -qE 'Tun|CudaTimeCandidatesTest|CudaFillPatternTest' <<< "$failed_tests"; then
  tuned_ok=0
fi
(( bulk_ok )) || tuned_ok=0  # tuning times the bulk GEMV too
(( bulk_ok )) || log "bulk GEMV or programmatic-launch tests failed: the benchmarks skip them (and tuning)"
(( tuned_ok )) || log "kernel tuning's tests failed (or the bulk GEMV's): the benchmarks skip --kernels tuned"
[[ -n $failed_tests ]] && log "failed tests: $(echo $failed_tests)"
# A failing GPU test runs again under compute-sanitizer (memcheck), where the machine has it
# and time allows, so that one run shows out-of-bounds accesses and launch errors too.
if (( ctest_rc != 0 )) && command -v compute-sanitizer > /dev/null; then
  for name in $(awk '/Test +#[0-9]+:/ && !/Passed|Skipped/ { for (i = 1; i <= NF; i++) if ($i ~ /^#[0-9]+:$/) print $(i + 1) }' \
                "$build/gpu_check.ctest.log"); do
    bin=$build/tests/$name
    [[ -x $bin && $name == cuda_* ]] || continue
    (( budget_s - $(elapsed "$t_start") > 240 )) || { log "no time left for compute-sanitizer"; break; }
    log "compute-sanitizer $name (log: $build/gpu_check.sanitizer.log)"
    (cd "$build/tests" && timeout 90 compute-sanitizer --tool memcheck --print-limit 20 "$bin") \
      >> "$build/gpu_check.sanitizer.log" 2>&1
    grep -E "ERROR SUMMARY|Invalid|out of bounds|FAILED" "$build/gpu_check.sanitizer.log" | tail -8
  done
fi

# ---- 5. Benchmarks. ----
bench_out=""
if [[ -x $build/bench/cuda_kernels_bench ]]; then
  t=$(date +%s)
  if out=$(timeout 120 "$build/bench/cuda_kernels_bench" --json $( (( bulk_ok )) || echo --no_bulk) 2>&1); then
    bench_out+="$out"$'\n'
    row "cuda_kernels_bench" "ok" "$(elapsed "$t")"
  else
    bench_out+="$out"$'\n'
    row "cuda_kernels_bench" "FAILED" "$(elapsed "$t")"
    failed=1
  fi
fi
left() { echo $(( budget_s - $(elapsed "$t_start") )); }
if [[ -x $build/bench/engine_bench ]]; then
  # Dummy gemma-4-31b weights on the CUDA backend; one GPU, TP 1. Loading its 62 GB of
  # dummy weights (generated on the CPU, then copied) took 25-38 s on an H200 machine's
  # 16 cores (2026-11-30), the whole 31B benchmark about 40 s; with less than 5 minutes
  # left for it and what follows, take the first 12 of the 60 layers (same shapes, a
  # fifth of the weights).
  # Kernels side by side on one engine: what start-up tuning measured fastest per shape
  # (first, so that the engine starts with it and tunes under programmatic launch, as it
  # runs; the op profiles are of it), the defaults, and the bulk GEMV under programmatic
  # launch; each only where its tests passed (bulk_ok, tuned_ok).
  args=${ENGINE_BENCH_ARGS:---backend cuda --model gemma-4-31b --tp 1 --batch 1,8,64,256 --context 1024 --decode_steps 16 --prefill_tokens 2048 --gpu_memory_utilization 0.9 --kernels tuned+pdl,split,bulk+pdl --op_profile --json}
  note=""
  kernels="split"
  (( bulk_ok )) && kernels+=",bulk+pdl"
  (( tuned_ok )) && kernels="tuned+pdl,$kernels"
  args=${args/--kernels tuned+pdl,split,bulk+pdl/--kernels $kernels}
  if [[ -z ${ENGINE_BENCH_ARGS:-} ]] && (( $(left) < 300 )); then
    args+=" --num_layers 12"
    note=" (12/60 layers: time)"
    log "engine_bench: only $(left) s left, so gemma-4-31b runs its first 12 of 60 layers"
  fi
  limit=$(( $(left) - 60 ))
  (( limit > 300 )) && limit=300
  (( limit < 60 )) && limit=60
  t=$(date +%s)
  # shellcheck disable=SC2086
  if out=$(timeout "$limit" "$build/bench/engine_bench" $args 2>&1); then
    row "engine_bench --backend cuda gemma-4-31b$note" "ok" "$(elapsed "$t")"
  else
    row "engine_bench --backend cuda gemma-4-31b$note" "FAILED" "$(elapsed "$t")"
    failed=1
  fi
  bench_out+="$out"$'\n'
  # TP 2 as two thread ranks sharing the GPU (staged all-reduce): the all-reduce share.
  if [[ -z ${ENGINE_BENCH_ARGS:-} ]] && (( $(left) > 120 )); then
    t=$(date +%s)
    if out=$(timeout 90 "$build/bench/engine_bench" --backend cuda --model gemma-4-1b --tp 1,2 --batch 1,8 \
             --context 1024 --decode_steps 8 --gpu_memory_utilization 0.9 2>&1); then
      row "engine_bench --backend cuda gemma-4-1b --tp 1,2" "ok" "$(elapsed "$t")"
    else
      row "engine_bench --backend cuda gemma-4-1b --tp 1,2" "FAILED" "$(elapsed "$t")"
      failed=1
    fi
    bench_out+="$out"$'\n'
  fi
else
  row "engine_bench (not built)" "skipped" "0"
fi

# ---- 6. tpserve generate on the GPU gives the CPU backend's greedy tokens. ----
# Qwen3's tiny checkpoint: its greedy tokens keep top-2 gaps >= 0.19 at bf16 (see
# tests/cuda_engine_test.cc). No MPI here: ranks are threads (--tensor-parallel-size).
fixture=tests/fixtures/models/qwen3
tpserve_bin=$build/launch/tpserve
output_ids() {
  python3 -c 'import json,sys; print(",".join(map(str, json.loads(sys.stdin.readline())["output_ids"])))' 2> /dev/null
}
if [[ -x $tpserve_bin ]]; then
  prompt=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_ids"])))' \
           "$fixture/reference.json")
  gen=(generate --model "$fixture" --prompt-ids "$prompt" --max-tokens 8 --ignore-eos --json)
  t=$(date +%s)
  cpu_ids=$(timeout 60 "$tpserve_bin" "${gen[@]}" --device cpu --tensor-parallel-size 1 2> "$build/gpu_check.generate.log" | output_ids)
  # tp=1: eager, then decode steps replayed from CUDA graphs (--enforce-eager=false), then
  # graphs with the bulk GEMV under programmatic launch and with the tuned kernels (where
  # the bulk tests passed: tuning times the bulk GEMV too).
  runs=("1 true split" "2 true split" "1 false split")
  (( bulk_ok )) && runs+=("1 false bulk+pdl")
  (( tuned_ok )) && runs+=("1 false tuned+pdl")
  for run in "${runs[@]}"; do
    read -r tp eager kernels <<< "$run"
    what="tpserve generate --device cuda tp=$tp$([[ $eager == false ]] && echo " graphs")$([[ $kernels != split ]] && echo " $kernels") = --device cpu (qwen3)"
    t=$(date +%s)
    gpu_ids=$(timeout 60 "$tpserve_bin" "${gen[@]}" --device cuda --tensor-parallel-size "$tp" --enforce-eager="$eager" \
              --kernels "$kernels" 2>> "$build/gpu_check.generate.log" | output_ids)
    if [[ -n $cpu_ids && $gpu_ids == "$cpu_ids" ]]; then
      row "$what" "ok" "$(elapsed "$t")"
    else
      row "$what" "FAILED" "$(elapsed "$t")"
      log "generate tp=$tp enforce-eager=$eager kernels=$kernels: cuda [$gpu_ids] vs cpu [$cpu_ids]; log: $build/gpu_check.generate.log"
      tail -5 "$build/gpu_check.generate.log"
      failed=1
    fi
  done
else
  row "tpserve generate --device cuda (tpserve not built)" "FAILED" "0"
  failed=1
fi

# ---- 7. One table. ----
echo
printf '%s' "$bench_out" > "$build/gpu_check.bench.log"
[[ -n $bench_out ]] && printf '%s' "$bench_out" | grep -v '^json: '
# Production choices beside the sweeps' fastest (tools/gpu_check_summary.py).
if [[ -n $bench_out ]] && command -v python3 > /dev/null; then
  echo
  python3 tools/gpu_check_summary.py "$build/gpu_check.bench.log" || true
fi
printf '\n%-72s %-10s %8s\n' "step" "result" "seconds"
printf '%-72s %-10s %8s\n' "$(printf '%.0s-' {1..72})" "----------" "--------"
for r in "${rows[@]}"; do
  IFS='|' read -r step result secs <<< "$r"
  printf '%-72s %-10s %8s\n' "${step:0:72}" "$result" "$secs"
done
printf '%-72s %-10s %8s\n' "total" "$( (( failed == 0 )) && echo ok || echo FAILED)" "$(elapsed "$t_start")"
exit $failed
