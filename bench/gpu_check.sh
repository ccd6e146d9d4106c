#!/usr/bin/env bash
# The GPU check in one command, for a bare GPU machine (CUDA toolkit, CMake, ninja,
# Python; no MPI, gRPC or network): configures and builds the engine with
# -DTPSERVE_CUDA=ON against the dependency bundle, runs `ctest -L gpu`, the CUDA kernel
# micro-benchmark, `tpserve generate --device cuda` against the CPU backend's greedy tokens
# on a tiny checkpoint (1 rank, 2 thread ranks sharing the GPU, CUDA graphs, the bulk GEMV
# and tuned kernels), and the engine benchmark on dummy gemma-4-31b weights (engine_bench
# --backend cuda: copy bandwidth, cuBLAS GEMM, prefill TFLOP/s, decode at batch
# 1/8/64/256 over 1024 tokens, peak memory, KV blocks at --gpu-memory-utilization 0.9, op
# profiles), then prints what was measured, what the sweeps say to change
# (tools/gpu_check_summary.py) and one table.
#
# Made for one try under a hard time limit on a device whose code has partly never run:
#   - Every log goes to $OUT (the device tool brings that folder back; default
#     <build>/gpu_check_out) as it is written; the table grows in $OUT/table.txt.
#   - One deadline (TPSERVE_GPU_CHECK_BUDGET_S, default 480 s): each step gets at most the
#     time left less a reserve for the steps after it, under `timeout`, and the script
#     ends itself before the limit, printing the results from its EXIT trap.
#   - Standard output carries progress lines and, at the end, the results (failed tests
#     with their first errors, the measurements, the sweeps, the table): what the last
#     12,000 characters must hold. Everything verbose stays in $OUT.
#   - A kernel whose tests failed is kept out of the benchmarks (a trap would end the
#     benchmark and lose its other rows). cuda_kernels_bench prints each row as measured;
#     engine_bench a "progress:" line per measurement and its tables when a run ends.
# When the steps before the engine benchmark leave too little time for the 31B model's
# 57 GiB of dummy weights, it runs the first 12 layers and says so; if the full run
# fails, a plain 12-layer run follows where time allows.
#
#   tools/make_gpu_deps_bundle.sh      # once, on a Debian 12 dev machine: fills .gpu_deps/
#   bash bench/gpu_check.sh            # on the GPU machine, from the repository root
#   bash bench/gpu_check.sh --build-only   # configure and build, run nothing
#
# Environment (all optional): OUT (logs), TPSERVE_GPU_DEPS (bundle, default .gpu_deps),
# TPSERVE_GPU_BUILD (build dir, default build-gpu), TPSERVE_CUDA_ARCHS (default 90),
# ENGINE_BENCH_ARGS (replaces the engine benchmark's default arguments),
# TPSERVE_GPU_CHECK_BUDGET_S (default 480). Exits non-zero if the build or any GPU test
# fails. Without a GPU the tests skip.
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
out=${OUT:-$build/gpu_check_out}
mkdir -p "$build" "$out" || exit 1
# A rerun into the same folder must not show the last run's logs as its own.
rm -f "$out"/*.log "$out"/*.txt
rows=()   # summary table rows: "step|result|seconds"
failed=0
unpacked_bundle=0
finished=0

log() { echo "gpu_check: $*" | tee -a "$out/progress.log"; }
elapsed() { echo $(( $(date +%s) - $1 )); }
left() { echo $(( budget_s - $(elapsed "$t_start") )); }
# The seconds a step may take: at most $1, and no more than what is left less $2 (the
# reserve for the steps after it), but at least $3 (default 1). Callers that may skip a
# step compare the result with the least time it needs.
cap() {
  local c=$1 l floor=${3:-1}
  l=$(( $(left) - ${2:-0} ))
  (( l < c )) && c=$l
  (( c < floor )) && c=$floor
  echo "$c"
}
row() { rows+=("$1|$2|$3"); printf '%s|%s|%s\n' "$1" "$2" "$3" >> "$out/table.txt"; }
# Runs "$@" under a time limit of $1 seconds (SIGTERM, then SIGKILL 10 s later), its
# standard output line-buffered so that a crash keeps every line printed before it.
limited() { local s=$1; shift; timeout -k 10 "$s" stdbuf -oL -eL "$@"; }


# ---- The results, printed however the script ends (EXIT trap). ----
# ctest's status per test ("name status"), and the failed GoogleTest cases of each test
# binary's output block ("binary Suite.Test"), from $out/ctest.log.
ctest_statuses() {
  awk '/Test +#[0-9]+:/ {
    for (i = 1; i <= NF; i++) if ($i ~ /^#[0-9]+:$/) name = $(i + 1)
    st = "Failed"
    if ($0 ~ /Passed/) st = "Passed"; else if ($0 ~ /Skipped/ || $0 ~ /Not Run.*[Dd]isabled/) st = "Skipped"
    else if ($0 ~ /Timeout/) st = "Timeout"; else if ($0 ~ /Not Run/) st = "NotRun"
    else if ($0 ~ /Exception|SEGFAULT|Subprocess aborted|Child aborted|Illegal/) st = "Crashed"
    print name, st }' "$out/ctest.log" 2> /dev/null
}
failed_cases() {
  awk '/Test +#[0-9]+:/ { for (i = 1; i <= NF; i++) if ($i ~ /^#[0-9]+:$/) cur = $(i + 1) }
       /^\[  FAILED  \] [A-Za-z0-9_\/]+\.[A-Za-z0-9_\/]+/ { print cur, $4 }' "$out/ctest.log" 2> /dev/null | sort -u
}
status_of() { ctest_statuses | awk -v t="$1" '$1 == t { s = $2 } END { print (s == "" ? "Missing" : s) }'; }
finish() {
  (( finished )) && return
  finished=1
  {
    echo
    echo "==================== gpu_check results ($(elapsed "$t_start") s; logs in $out) ===================="
    if [[ -s $out/ctest.log ]]; then
      local bad
      bad=$(ctest_statuses | awk '$2 != "Passed" && $2 != "Skipped"')
      if [[ -n $bad ]]; then
        echo "GPU tests not passed:"
        sed 's/^/  /' <<< "$bad"
        failed_cases | sed 's/^/  failed case: /' | head -40
        grep -hE "Failure$|error: |CUDA error|illegal|misaligned|Assertion|trap|Which is:|Expected" "$out/ctest.log" |
          head -25 | cut -c1-200 | sed 's/^/  | /'
      fi
    fi
    if [[ -s $out/sanitizer.log ]]; then
      echo "compute-sanitizer:"
      grep -E "^==== |ERROR SUMMARY|Invalid|out of bounds|Program hit" "$out/sanitizer.log" | head -16 | cut -c1-200 |
        sed 's/^/  /'
    fi
    local logs=()
    for f in "$out"/kernels_bench.log "$out"/engine_*.log; do [[ -s $f ]] && logs+=("$f"); done
    if (( ${#logs[@]} )) && command -v python3 > /dev/null; then
      echo
      python3 "$root/tools/gpu_check_summary.py" "${logs[@]}" 2>&1 | head -150
    fi
    printf '\n%-72s %-10s %8s\n' "step" "result" "seconds"
    printf '%-72s %-10s %8s\n' "$(printf '%.0s-' {1..72})" "----------" "--------"
    local r step result secs
    for r in "${rows[@]}"; do
      IFS='|' read -r step result secs <<< "$r"
      printf '%-72s %-10s %8s\n' "${step:0:72}" "$result" "$secs"
    done
    printf '%-72s %-10s %8s\n' "total" "$( (( failed == 0 )) && echo ok || echo FAILED)" "$(elapsed "$t_start")"
  } 2>&1 | tee "$out/summary.txt"
  if (( unpacked_bundle )) && [[ -f $deps/COMPRESSED ]]; then
    while IFS= read -r f; do [[ -n $f && -e $deps/$f.xz ]] && rm -f "$deps/$f"; done < "$deps/COMPRESSED"
  fi
}
trap 'finish; exit $failed' EXIT
trap 'log "interrupted"; failed=1; exit 1' TERM INT

# ---- 1. Dependencies: the bundle (if present) ahead of whatever the machine has. ----
cmake_deps=()
if [[ -d $deps/usr ]]; then
  # Unpack the files the bundle stores xz-compressed (once).
  if [[ -f $deps/COMPRESSED ]]; then
    while IFS= read -r f; do
      [[ -z $f || -e $deps/$f ]] && continue
      python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$deps/$f.xz" "$deps/$f" || { log "cannot unpack $f.xz"; failed=1; exit 1; }
    done < "$deps/COMPRESSED"
  fi
  # ... and drop the unpacked copies on exit (finish), so the bundle stays small enough to carry.
  unpacked_bundle=1
  export CMAKE_PREFIX_PATH="$deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_PATH="$deps/$arch_lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$deps/$arch_lib:$deps/$arch_lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  command -v pkg-config > /dev/null || export PATH="$PATH:$deps/usr/bin"
  # Debian 12's libraries need GLIBCXX_3.4.30 (GCC 12); older systems get its libstdc++.
  sys_stdcxx=$(g++ -print-file-name=libstdc++.so.6 2> /dev/null || true)
  if [[ -z $sys_stdcxx || ! -e $sys_stdcxx ]] || ! grep -q GLIBCXX_3.4.30 "$sys_stdcxx"; then
    export LD_LIBRARY_PATH="$deps/compat${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  cmake_deps=(-Dabsl_DIR="$deps/$arch_lib/cmake/absl" -DGTest_DIR="$deps/$arch_lib/cmake/GTest"
              -Dnlohmann_json_DIR="$deps/usr/share/cmake/nlohmann_json" -DICU_ROOT="$deps/usr")
  log "dependencies from $deps"
else
  log "no bundle at $deps: using the machine's packages (tools/make_gpu_deps_bundle.sh makes one)"
fi

# ---- 2. CUDA compiler and NCCL (toolkit, else the pip package beside PyTorch). ----
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[[ -x $nvcc ]] || { log "no nvcc on PATH or in /usr/local/cuda/bin"; failed=1; exit 1; }
cuda_home=$(cd "$(dirname "$nvcc")/.." && pwd)
nccl_args=()
if [[ ! -e $cuda_home/include/nccl.h ]]; then
  nccl_root=$(python3 -c 'import nvidia.nccl as n, os; print(os.path.dirname(list(n.__path__)[0] + "/x"))' 2> /dev/null || true)
  if [[ -n $nccl_root && -e $nccl_root/include/nccl.h ]]; then
    nccl_args=(-DNCCL_ROOT="$nccl_root")
    export LD_LIBRARY_PATH="$nccl_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    log "NCCL from $nccl_root"
  fi
fi
export LD_LIBRARY_PATH="$cuda_home/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null | sed 's/^/gpu_check: GPU: /' |
  tee -a "$out/progress.log"


# ---- 3. Configure and build what the check runs (-k 0: whatever builds gets run). ----
t=$(date +%s)
if ! timeout -k 5 "$(cap 150 300 60)" cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPSERVE_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$archs" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DTPSERVE_SERVING=OFF "${cmake_deps[@]}" "${nccl_args[@]}" > "$out/configure.log" 2>&1; then
  tail -30 "$out/configure.log"
  log "configure failed (log: $out/configure.log)"
  row "configure" "FAILED" "$(elapsed "$t")"
  failed=1
  exit 1
fi
row "configure" "ok" "$(elapsed "$t")"
tests=$(grep -oE 'tp_add_test\([a-z0-9_]+' tests/cuda_tests.cmake | sed 's/tp_add_test(//')
# The targets this build defines (read whole: a pipe into `grep -q` can end ninja early with
# SIGPIPE, which pipefail turns into "no such target").
defined=$(ninja -C "$build" -t targets all 2> /dev/null)
targets=()
for tgt in $tests cuda_kernels_bench engine_bench tpserve; do
  grep "^$tgt:" <<< "$defined" > /dev/null && targets+=("$tgt")
done
t=$(date +%s)
build_s=$(cap 330 150 120)
timeout -k 10 "$build_s" cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- -k 0 > "$out/build.log" 2>&1
build_rc=$?
missing=()
for tgt in "${targets[@]}"; do
  bin=$(find "$build/tests" "$build/bench" "$build/launch" -maxdepth 1 -type f -name "$tgt" 2> /dev/null | head -1)
  [[ -n $bin ]] || missing+=("$tgt")
done
if (( build_rc == 0 )); then
  row "build ${#targets[@]} targets (sm_$archs)" "ok" "$(elapsed "$t")"
else
  grep -E "error|Error" "$out/build.log" | head -20 | cut -c1-200
  (( build_rc == 124 || build_rc == 137 )) && log "build stopped at its ${build_s} s limit"
  row "build ${#targets[@]} targets (sm_$archs); not built: ${missing[*]:-none}" "FAILED" "$(elapsed "$t")"
  failed=1
fi
(( build_only )) && exit $failed

# ---- 4. GPU tests (plus the CPU planner test). ----
t=$(date +%s)
ctest_s=$(cap 240 150 90)
# -j 4, not more: the tuning tests time kernels, and more processes sharing the GPU could
# fail them spuriously (which would turn tuning off).
timeout -k 10 "$ctest_s" ctest --test-dir "$build" -L gpu -j 4 --timeout 120 --output-on-failure > "$out/ctest.log" 2>&1
ctest_rc=$?
timeout -k 5 "$(cap 60 150 10)" ctest --test-dir "$build" -R '^memory_planner_test$' --output-on-failure \
  >> "$out/ctest.log" 2>&1 || ctest_rc=1
while read -r name st; do
  case $st in Passed) res=ok ;; Skipped) res=skipped ;; *) res=$st ;; esac
  row "  $name" "$res" "-"
done < <(ctest_statuses)
(( ctest_rc == 124 || ctest_rc == 137 )) && log "ctest stopped at its ${ctest_s} s limit"
row "ctest -L gpu" "$( (( ctest_rc == 0 )) && echo ok || echo FAILED)" "$(elapsed "$t")"
(( ctest_rc == 0 )) || failed=1
# Which kernels the benchmarks may run: each only where its tests ran to the end and
# passed, or failed only in cases that are not about it. A test binary that crashed, timed
# out or did not run gives no names to go by, and turns its kernels off.
cases=$(failed_cases)
only_tuning_failed() {  # $1: test binary; true if it passed, or failed only in *Tun* cases
  local st names
  st=$(status_of "$1")
  [[ $st == Passed ]] && return 0
  [[ $st == Failed ]] || return 1
  names=$(awk -v t="$1" '$1 == t { print $2 }' <<< "$cases")
  [[ -n $names ]] && ! grep -v 'Tun' <<< "$names" > /dev/null
}
bulk_ok=1
for t_bin in cuda_linear_test cuda_model_test; do only_tuning_failed "$t_bin" || bulk_ok=0; done
tuned_ok=$bulk_ok  # tuning times the bulk GEMV too
grep -E 'Tun|CudaTimeCandidatesTest|CudaFillPatternTest' <<< "$cases" > /dev/null && tuned_ok=0
case $(status_of cuda_elementwise_test) in Passed|Failed) ;; *) tuned_ok=0 ;; esac
# ... and the prefill tiles other than production's, tested only in cuda_attention_test.
only_tuning_failed cuda_attention_test || tuned_ok=0
# The wgmma prefill kernels are timed (last in cuda_kernels_bench) where their test ran to
# the end, passed or not: wrong values still come with a speed, but a crash or a hang
# would cost the benchmark's time.
wgmma_ok=0
case $(status_of cuda_attention_wgmma_test) in Passed|Failed) wgmma_ok=1 ;; esac
(( bulk_ok )) || log "bulk GEMV / programmatic-launch tests did not pass: the benchmarks skip them (and tuning)"
(( tuned_ok )) || log "kernel tuning's tests did not pass: the benchmarks skip --kernels tuned and the sweeps"
(( wgmma_ok )) || log "the wgmma prefill test crashed, hung or did not run: cuda_kernels_bench skips it"
[[ -n $cases ]] && log "failed cases: $(awk '{print $2}' <<< "$cases" | tr '\n' ' ')"
# A failing (not hanging) GPU test runs again under compute-sanitizer (memcheck), where the
# machine has it and time allows: out-of-bounds accesses and launch errors by name.
if (( ctest_rc != 0 )) && command -v compute-sanitizer > /dev/null; then
  while read -r name st; do
    [[ $st == Failed || $st == Crashed ]] || continue
    bin=$build/tests/$name
    [[ $name == cuda_attention_wgmma_test ]] && bin=$build/tests/cuda_attention_test
    [[ -x $bin && $name == cuda_* ]] || continue
    s=$(cap 90 240)
    (( s >= 30 )) || { log "no time left for compute-sanitizer"; break; }
    log "compute-sanitizer $name (${s} s at most)"
    filter=()
    [[ $name == cuda_attention_wgmma_test ]] && filter=(--gtest_filter='*Wgmma*')
    [[ $name == cuda_attention_test ]] && filter=(--gtest_filter='-*Wgmma*')  # as ctest runs it
    echo "==== $name" >> "$out/sanitizer.log"
    (cd "$build/tests" && timeout -k 5 "$s" compute-sanitizer --tool memcheck --print-limit 20 "$bin" "${filter[@]}" \
      < /dev/null) >> "$out/sanitizer.log" 2>&1
  done < <(ctest_statuses)
fi

# ---- 5. Kernel micro-benchmark (rows in $out/kernels_bench.log as measured). ----
if [[ -x $build/bench/cuda_kernels_bench ]] && (( $(cap 120 200) >= 30 )); then
  t=$(date +%s)
  flags=(--json)
  (( bulk_ok )) || flags+=(--no_bulk)
  (( tuned_ok )) || flags+=(--no_tune)
  (( wgmma_ok )) || flags+=(--no_wgmma)
  s=$(cap 120 200)
  if limited "$s" "$build/bench/cuda_kernels_bench" "${flags[@]}" > "$out/kernels_bench.log" 2>&1; then
    row "cuda_kernels_bench ${flags[*]}" "ok" "$(elapsed "$t")"
  else
    tail -3 "$out/kernels_bench.log" | cut -c1-200
    row "cuda_kernels_bench ${flags[*]} (rows so far kept)" "FAILED" "$(elapsed "$t")"
    failed=1
  fi
else
  row "cuda_kernels_bench (not built, or no time)" "skipped" "0"
fi

# ---- 6. tpserve generate on the GPU gives the CPU backend's greedy tokens. ----
# Qwen3's tiny checkpoint: its greedy tokens keep top-2 gaps >= 0.19 at bf16 (see
# tests/cuda_engine_test.cc). No MPI here: ranks are threads (--tensor-parallel-size).
# Before the 31B benchmark: correctness first, and each run takes seconds.
fixture=tests/fixtures/models/qwen3
tpserve_bin=$build/launch/tpserve
output_ids() {
  python3 -c 'import json,sys; print(",".join(map(str, json.loads(sys.stdin.readline())["output_ids"])))' 2> /dev/null
}
if [[ -x $tpserve_bin ]]; then
  # The binary loads its CUDA side as a module (worker/cuda_device_loader.cc): say what it found.
  timeout -k 5 30 "$tpserve_bin" devices > "$out/devices.txt" 2>&1 || true
  sed 's/^/  /' "$out/devices.txt"
  prompt=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_ids"])))' \
           "$fixture/reference.json")
  gen=(generate --model "$fixture" --prompt-ids "$prompt" --max-tokens 8 --ignore-eos --json)
  cpu_ids=$(timeout -k 5 "$(cap 60 150 10)" "$tpserve_bin" "${gen[@]}" --device cpu --tensor-parallel-size 1 \
            2> "$out/generate.log" | output_ids)
  # tp=1: eager, then decode steps replayed from CUDA graphs (--enforce-eager=false), then
  # graphs with the bulk GEMV under programmatic launch and with the tuned kernels (where
  # their tests passed).
  runs=("1 true split" "2 true split" "1 false split")
  (( bulk_ok )) && runs+=("1 false bulk+pdl")
  (( tuned_ok )) && runs+=("1 false tuned+pdl")
  for run in "${runs[@]}"; do
    read -r tp eager kernels <<< "$run"
    what="tpserve generate --device cuda tp=$tp$([[ $eager == false ]] && echo " graphs")$([[ $kernels != split ]] && echo " $kernels") = --device cpu (qwen3)"
    s=$(cap 60 150)
    (( s >= 15 )) || { row "$what (no time)" "skipped" "0"; continue; }
    t=$(date +%s)
    echo "---- $what" >> "$out/generate.log"
    gpu_ids=$(timeout -k 5 "$s" "$tpserve_bin" "${gen[@]}" --device cuda --tensor-parallel-size "$tp" \
              --enforce-eager="$eager" --kernels "$kernels" 2>> "$out/generate.log" | output_ids)
    if [[ -n $cpu_ids && $gpu_ids == "$cpu_ids" ]]; then
      row "$what" "ok" "$(elapsed "$t")"
    else
      row "$what" "FAILED" "$(elapsed "$t")"
      log "generate tp=$tp enforce-eager=$eager kernels=$kernels: cuda [$gpu_ids] vs cpu [$cpu_ids]"
      tail -3 "$out/generate.log" | cut -c1-200
      failed=1
      # A hang (the time limit) would cost each remaining run the same: stop here.
      (( $(elapsed "$t") >= s - 1 )) && { log "generate hung: the remaining runs are skipped"; break; }
    fi
  done
else
  row "tpserve generate --device cuda (tpserve not built)" "FAILED" "0"
  failed=1
fi

# ---- 7. The engine benchmark (logs $out/engine_*.log, rows printed as measured). ----
if [[ -x $build/bench/engine_bench ]]; then
  # Dummy gemma-4-31b weights on the CUDA backend; one GPU, TP 1. Loading its 57 GiB of
  # dummy weights took 25-38 s on an H200 machine's 16 cores (2026-11-30), the whole 31B
  # benchmark about 40 s then (more now: three kernel choices, tuning, op profiles); with
  # less than 200 s left, take the first 12 of the 60 layers (same shapes, a fifth of the
  # weights). Kernels side by side on one engine: what start-up tuning measured fastest
  # per shape (first, so that the engine starts with it and tunes under programmatic
  # launch; the op profiles are of it), the defaults, and the bulk GEMV under
  # programmatic launch, each only where its tests passed.
  args=${ENGINE_BENCH_ARGS:---backend cuda --model gemma-4-31b --tp 1 --batch 1,8,64,256 --context 1024 --decode_steps 16 --prefill_tokens 2048 --gpu_memory_utilization 0.9 --kernels tuned+pdl,split,bulk+pdl --op_profile --json}
  note=""
  kernels="split"
  (( bulk_ok )) && kernels+=",bulk+pdl"
  (( tuned_ok )) && kernels="tuned+pdl,$kernels"
  [[ -z ${ENGINE_BENCH_ARGS:-} ]] && args=${args/--kernels tuned+pdl,split,bulk+pdl/--kernels $kernels}
  if [[ -z ${ENGINE_BENCH_ARGS:-} ]] && (( $(left) < 200 )); then
    args+=" --num_layers 12"
    note=" (12/60 layers)"
    log "engine_bench: only $(left) s left, so gemma-4-31b runs its first 12 of 60 layers"
  fi
  s=$(cap 300 20)
  if (( s >= 40 )); then
    t=$(date +%s)
    log "engine_bench gemma-4-31b$note, ${s} s at most"
    # shellcheck disable=SC2086
    if limited "$s" "$build/bench/engine_bench" $args > "$out/engine_31b.log" 2>&1; then
      row "engine_bench --backend cuda gemma-4-31b --kernels $kernels$note" "ok" "$(elapsed "$t")"
    else
      grep -E "engine_bench: |CUDA error|error" "$out/engine_31b.log" | head -5 | cut -c1-200
      row "engine_bench --backend cuda gemma-4-31b --kernels $kernels$note" "FAILED" "$(elapsed "$t")"
      failed=1
      # Nothing measured (no JSON line): the plain kernels on 12 layers, without profiles.
      if [[ -z ${ENGINE_BENCH_ARGS:-} ]] && ! grep -q '^{"backend"' "$out/engine_31b.log" && (( $(cap 150 10) >= 60 )); then
        t=$(date +%s)
        s=$(cap 150 10)
        if limited "$s" "$build/bench/engine_bench" --backend cuda --model gemma-4-31b --tp 1 --batch 1,8,64 \
            --context 1024 --decode_steps 8 --prefill_tokens 2048 --gpu_memory_utilization 0.9 --kernels split \
            --num_layers 12 --json > "$out/engine_31b_fallback.log" 2>&1; then
          row "engine_bench gemma-4-31b --kernels split 12 layers (fallback)" "ok" "$(elapsed "$t")"
        else
          row "engine_bench gemma-4-31b --kernels split 12 layers (fallback)" "FAILED" "$(elapsed "$t")"
        fi
      elif [[ -z ${ENGINE_BENCH_ARGS:-} ]] && ! grep -q '^{"backend"' "$out/engine_31b.log"; then
        row "engine_bench gemma-4-31b 12-layer fallback (no time left)" "skipped" "0"
      fi
    fi
  else
    row "engine_bench gemma-4-31b (no time left)" "skipped" "0"
  fi
  # TP 2 as two thread ranks sharing the GPU (staged all-reduce): the all-reduce share.
  if [[ -z ${ENGINE_BENCH_ARGS:-} ]] && (( $(cap 90 10) < 60 )); then
    row "engine_bench gemma-4-1b --tp 1,2 (no time left)" "skipped" "0"
  elif [[ -z ${ENGINE_BENCH_ARGS:-} ]]; then
    t=$(date +%s)
    if limited "$(cap 90 10)" "$build/bench/engine_bench" --backend cuda --model gemma-4-1b --tp 1,2 --batch 1,8 \
        --context 1024 --decode_steps 8 --gpu_memory_utilization 0.9 --json > "$out/engine_1b_tp2.log" 2>&1; then
      row "engine_bench --backend cuda gemma-4-1b --tp 1,2" "ok" "$(elapsed "$t")"
    else
      row "engine_bench --backend cuda gemma-4-1b --tp 1,2" "FAILED" "$(elapsed "$t")"
      failed=1
    fi
  fi
else
  row "engine_bench (not built)" "skipped" "0"
fi
exit $failed
