#!/usr/bin/env bash
# The tpserve binary reaches CUDA through a module it loads on first need
# (worker/cuda_device_loader.cc): the module loads into the real binary (every symbol it needs
# resolves: `tpserve devices` loads it with RTLD_NOW), a CPU run never maps it or cuBLASLt
# (glibc's LD_DEBUG=files names every library a process opens, dlopen'ed ones included), and a
# missing module is a clear error for `devices` while CPU runs go on.
# Usage: cuda_module_test.sh TPSERVE_BINARY   (run by ctest where CUDA is built)
set -u
TPSERVE=$1
source "$(dirname "$0")/harness.sh"

out=$("$TPSERVE" devices 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "^cuda: CUDA backend module .*libtpserve_cuda.so (loaded" <<<"$out"; then
  ok "devices loads the module: $(head -1 <<<"$out")"
else
  bad "devices: rc=$rc: $out"
fi

LD_DEBUG=files "$TPSERVE" devices >/dev/null 2>"$WORK/devices.ld"
if grep -q "file=.*libcublasLt" "$WORK/devices.ld"; then ok "devices maps cuBLASLt (the LD_DEBUG check sees it)"
else bad "devices: no libcublasLt in LD_DEBUG=files output: the check below could not fail"; fi

gen=(generate --model gemma-4-tiny --load-format dummy --prompt-ids 1,2,3 --max-tokens 2 --threads 1)
for device in cpu auto; do
  if LD_DEBUG=files "$TPSERVE" "${gen[@]}" --device $device >"$WORK/gen.out" 2>"$WORK/gen.ld"; then
    if grep -q "file=.*\(libtpserve_cuda\|libcublas\|libnccl\|libcudart\)" "$WORK/gen.ld" && [ $device = cpu -o ! -e /dev/nvidiactl ]; then
      bad "--device $device mapped CUDA libraries: $(grep -o 'file=[^ ]*\(cuda\|cublas\|nccl\)[^ ]*' "$WORK/gen.ld" | sort -u | tr '\n' ' ')"
    else
      ok "--device $device runs without mapping the CUDA module or its libraries"
    fi
  else
    bad "--device $device: generate failed: $(grep -v '^ *[0-9]*:' "$WORK/gen.ld" | tail -3)"
  fi
done

out=$(TPSERVE_CUDA_MODULE=$WORK/none.so "$TPSERVE" devices 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "the CUDA backend module did not load: .*none.so" <<<"$out"; then ok "missing module: devices fails saying so"
else bad "missing module: rc=$rc: $out"; fi
if TPSERVE_CUDA_MODULE=$WORK/none.so "$TPSERVE" "${gen[@]}" --device cpu >/dev/null 2>"$WORK/err"; then ok "missing module: --device cpu runs"
else bad "missing module: --device cpu failed: $(tail -2 "$WORK/err")"; fi
finish
