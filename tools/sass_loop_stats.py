#!/usr/bin/env python3
"""Static SASS instruction counts of a CUDA kernel's loops, from an object file.

What a kernel issues per loop iteration is something a machine without a GPU can still
measure: this disassembles a kernel (cuobjdump -sass), finds every backward branch, and
prints each loop's span (instructions between the branch target and the branch) with a
histogram of its opcodes. The counts are static: paths a run does not take are included.

  python3 tools/sass_loop_stats.py OBJECT KERNEL_SUBSTRING [--min N] [--cuobjdump PATH]

  # the prefill kernel's key-tile loop at head_dim 256, 32 keys x 4 row warps:
  python3 tools/sass_loop_stats.py \\
      build-gpupre/kernels/cuda/CMakeFiles/tpserve_kernels_cuda.dir/prefill_attention.cu.o \\
      PrefillKernelILi256ELi32ELi1ELi4ELi0E

KERNEL_SUBSTRING matches the mangled name (the first kernel that contains it). cuobjdump
comes from --cuobjdump, PATH, or $CUDA_HOME/bin and /usr/local/cuda/bin. Python 3 standard
library only; a development tool, not run by CI.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,6})\*/\s*([^;]*);")
BRANCH = re.compile(r"\bBRA\s+(?:`\()?(0x[0-9a-f]+)")
PREDICATE = re.compile(r"^@!?U?P[0-9T]+\s+")


def find_cuobjdump(given):
    if given:
        return given
    for candidate in (shutil.which("cuobjdump"),
                      os.path.join(os.environ.get("CUDA_HOME", ""), "bin", "cuobjdump"),
                      "/usr/local/cuda/bin/cuobjdump"):
        if candidate and os.path.exists(candidate):
            return candidate
    sys.exit("sass_loop_stats: no cuobjdump (pass --cuobjdump PATH)")


def kernel_name(cuobjdump, obj, substring):
    listing = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True, check=True).stdout
    for line in listing.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m and substring in m.group(1):
            return m.group(1)
    sys.exit(f"sass_loop_stats: no kernel matching {substring!r} in {obj}")


def instructions(cuobjdump, obj, name):
    sass = subprocess.run([cuobjdump, "-sass", "-fun", name, obj], capture_output=True, text=True,
                          check=True).stdout
    out = []
    for line in sass.splitlines():
        m = INSTRUCTION.match(line)
        if m:
            out.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def opcode(text):
    return PREDICATE.sub("", text).split()[0].split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("object")
    ap.add_argument("kernel")
    ap.add_argument("--min", type=int, default=50, help="smallest loop to report (instructions)")
    ap.add_argument("--cuobjdump")
    args = ap.parse_args()
    cuobjdump = find_cuobjdump(args.cuobjdump)
    name = kernel_name(cuobjdump, args.object, args.kernel)
    code = instructions(cuobjdump, args.object, name)
    print(f"{name}: {len(code)} instructions")
    for address, text in code:
        m = BRANCH.search(text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= address:
            continue
        body = [t for a, t in code if target <= a <= address]
        if len(body) < args.min:
            continue
        counts = collections.Counter(opcode(t) for t in body)
        top = ", ".join(f"{op} {n}" for op, n in counts.most_common(12))
        print(f"  loop {target:#x}-{address:#x}: {len(body)} instructions ({top})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
