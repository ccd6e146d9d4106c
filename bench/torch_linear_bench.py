#!/usr/bin/env python3
"""PyTorch's CPU linear on the model shapes of kernels_bench --models: the yardstick for
cpu::Linear. Run by bench/cpu_vs_torch.sh right after kernels_bench, so both share one run
(same machine load). Needs torch (a dev tool; tpserve itself needs no Python).
Usage: torch_linear_bench.py [--threads 2] [--models gemma-4-1b,llama-3.2-1b] [--dtypes bf16,fp32]
"""
import argparse
import time

import torch

# Same table as bench/kernels_bench.cc's AllModelShapes: (product, N, K).
MODELS = {
    "gemma-4-1b": [("qkv", 4096, 1536), ("qkv global", 5120, 1536), ("o", 1536, 2048),
                   ("o global", 1536, 4096), ("gate_up", 16384, 1536), ("down", 1536, 8192),
                   ("lm_head", 262144, 1536)],
    "llama-3.2-1b": [("qkv", 3072, 2048), ("o", 2048, 2048), ("gate_up", 16384, 2048),
                     ("down", 2048, 8192), ("lm_head", 128256, 2048)],
}
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def best_seconds(fn, reps):
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="gemma-4-1b,llama-3.2-1b")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads")
    for model in args.models.split(","):
        for dname in args.dtypes.split(","):
            dtype = DTYPES[dname]
            print(f"\n{model}, torch.nn.functional.linear, {dname} x and weights")
            print(f"{'product':11s} {'N':>7s} {'K':>6s}  {'M=1 us':>9s} {'GB/s':>7s}  "
                  f"{'M=512 ms':>9s} {'GFLOP/s':>8s}")
            for name, n, k in MODELS[model]:
                w = (torch.rand(n, k) * 0.1 - 0.05).to(dtype)
                # Decode: two weight copies so that one call does not find the other's in cache
                # (the LM head and the big products exceed the L3 anyway).
                w2 = w.clone()
                x1 = torch.rand(1, k).to(dtype)
                ws = [w, w2]
                i = [0]

                def decode():
                    i[0] ^= 1
                    torch.nn.functional.linear(x1, ws[i[0]])
                t1 = best_seconds(decode, args.reps * 3)
                gbs = n * k * w.element_size() / t1 / 1e9
                pre = ""
                if name != "lm_head":
                    x = torch.rand(512, k).to(dtype)
                    tp = best_seconds(lambda: torch.nn.functional.linear(x, w), args.reps)
                    pre = f"{tp * 1e3:9.2f} {2 * 512 * n * k / tp / 1e9:8.1f}"
                print(f"{name:11s} {n:7d} {k:6d}  {t1 * 1e6:9.1f} {gbs:7.1f}  {pre}", flush=True)
                del w, w2, ws


if __name__ == "__main__":
    main()
