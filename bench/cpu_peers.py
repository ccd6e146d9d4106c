#!/usr/bin/env python3
"""One measured run of one engine, and the report over many: the halves of bench/cpu_peers.sh.

  cpu_peers.py run --engine tpserve|tpserve-sgemm|tpserve-amx|tpserve-onednn|torch|llamacpp --model DIR [--gguf FILE] [--tpserve BIN]
                   --threads T --prompt-len 512 --decode 64 --seed S [--label L]
      prints one JSON line: prefill_ms (the prompt's forward pass, first token's logits
      included), decode_step_ms (each of the `decode` one-token steps after it, greedy),
      load_s, peak_rss_bytes (the process's VmHWM at the end: weights, activations, KV
      cache, the runtime), weight_bytes (the checkpoint's tensors).
  cpu_peers.py brief < LINE
      one run's line in a few words (the progress cpu_peers.sh prints)
  cpu_peers.py report RUNS.jsonl
      a Markdown summary: per model and engine the median and max over runs of prefill and
      decode tokens/s, the ratios tpserve / peer (medians), peak RSS against the weights,
      and the STREAM triad lines of the same file.

Every engine gets the same prompt (token ids drawn from the seed), runs batch 1 with the
same thread count, and computes logits for the last position only during the prefill
(transformers: logits_to_keep=1; llama.cpp: its default; tpserve: the sampled row).
tpserve-sgemm is tpserve with --cpu-gemm sgemm (fp32 activations, OpenBLAS prefill, the AVX2
GEMV): beside tpserve (--cpu-gemm auto) it measures what auto's choice gains on this CPU;
tpserve-amx is tpserve with --cpu-gemm amx-bf16 (its own AMX-BF16 tiles; what auto picks on a CPU
with AMX since 2026-12-07), tpserve-onednn with --cpu-gemm onednn-bf16 (oneDNN's bf16 matmul).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def prompt_ids(model_dir: Path, n: int, seed: int) -> list[int]:
    config = json.loads((model_dir / "config.json").read_text())
    vocab = config.get("vocab_size") or config["text_config"]["vocab_size"]
    rng = random.Random(seed)
    return [rng.randrange(300, vocab) for _ in range(n)]  # past the specials and byte tokens


def weight_bytes(model_dir: Path) -> int:
    total = 0
    for f in model_dir.glob("*.safetensors"):
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        for name, t in header.items():
            if name != "__metadata__":
                total += t["data_offsets"][1] - t["data_offsets"][0]
    return total


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def run_tpserve(a, ids):
    cmd = [a.tpserve, "generate", "--model", str(a.model), "--prompt-ids", ",".join(map(str, ids)),
           "--max-tokens", str(a.decode + 1), "--ignore-eos", "--json", "--threads", str(a.threads),
           "--kv-cache-memory", "512MiB", "--max-model-len", str(max(1024, a.prompt_len + a.decode + 16)),
           "--cpu-gemm", {"tpserve-sgemm": "sgemm", "tpserve-amx": "amx-bf16", "tpserve-onednn": "onednn-bf16"}.get(a.engine, "auto")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"tpserve exited {p.returncode}: {p.stderr[-2000:]}")
    j = json.loads(p.stdout.strip().splitlines()[-1])
    steps = j["step_ms"]
    decode = steps[len(steps) - j["decode_steps"]:]
    return {"prefill_ms": j["prefill_ms"], "decode_step_ms": decode, "load_s": j["load_time_s"],
            "peak_rss_bytes": j["peak_rss_bytes"], "load_peak_rss_bytes": j["load_peak_rss_bytes"],
            "engine_weight_bytes": j["weight_bytes"], "output_ids": j["output_ids"][:8]}


def run_torch(a, ids):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).eval()
    load_s = time.perf_counter() - t0
    out_ids = []
    with torch.inference_mode():
        x = torch.tensor([ids])
        t = time.perf_counter()
        out = model(input_ids=x, use_cache=True, logits_to_keep=1)
        nxt = out.logits[0, -1].argmax()
        prefill_ms = (time.perf_counter() - t) * 1e3
        past = out.past_key_values
        steps = []
        for _ in range(a.decode):
            out_ids.append(int(nxt))
            t = time.perf_counter()
            out = model(input_ids=nxt.view(1, 1), past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[0, -1].argmax()
            steps.append((time.perf_counter() - t) * 1e3)
    return {"prefill_ms": prefill_ms, "decode_step_ms": steps, "load_s": load_s,
            "peak_rss_bytes": peak_rss_bytes(), "torch_version": torch.__version__, "output_ids": out_ids[:8]}


def run_llamacpp(a, ids):
    import numpy as np
    import llama_cpp
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=str(a.gguf), n_ctx=max(1024, a.prompt_len + a.decode + 16),
                          n_batch=a.prompt_len, n_ubatch=a.prompt_len, n_threads=a.threads,
                          n_threads_batch=a.threads, verbose=False)
    load_s = time.perf_counter() - t0

    n_vocab = llm.n_vocab()

    def last_logits():  # the last evaluated token's row (Llama.scores holds rows only with logits_all)
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(n_vocab,))

    t = time.perf_counter()
    llm.eval(ids)
    nxt = int(np.argmax(last_logits()))
    prefill_ms = (time.perf_counter() - t) * 1e3
    steps, out_ids = [], []
    for _ in range(a.decode):
        out_ids.append(nxt)
        t = time.perf_counter()
        llm.eval([nxt])
        nxt = int(np.argmax(last_logits()))
        steps.append((time.perf_counter() - t) * 1e3)
    return {"prefill_ms": prefill_ms, "decode_step_ms": steps, "load_s": load_s,
            "peak_rss_bytes": peak_rss_bytes(), "llama_cpp_python_version": llama_cpp.__version__,
            "output_ids": out_ids[:8]}


def cmd_run(a) -> int:
    ids = prompt_ids(a.model, a.prompt_len, a.seed)
    run = {"tpserve": run_tpserve, "tpserve-sgemm": run_tpserve, "tpserve-amx": run_tpserve, "tpserve-onednn": run_tpserve, "torch": run_torch, "llamacpp": run_llamacpp}[a.engine]
    r = run(a, ids)
    steps = r["decode_step_ms"]
    r.update({
        "engine": a.engine, "model": a.model.name, "label": a.label, "threads": a.threads,
        "prompt_len": a.prompt_len, "decode": a.decode, "seed": a.seed,
        "weight_bytes": weight_bytes(a.model),
        "prefill_tok_s": a.prompt_len / (r["prefill_ms"] / 1e3),
        "decode_median_step_ms": statistics.median(steps),
        "decode_tok_s": len(steps) / (sum(steps) / 1e3),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg": os.getloadavg()[0],
    })
    print(json.dumps(r), flush=True)
    return 0


def cmd_brief(_) -> int:
    r = json.loads(sys.stdin.read())
    print(f"prefill {r['prefill_tok_s']:.1f} tok/s, decode {r['decode_tok_s']:.2f} tok/s, "
          f"peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB")
    return 0


def fmt(x, digits=1):
    return f"{x:.{digits}f}"


def cmd_report(a) -> int:
    runs, triads = [], []
    for line in Path(a.runs).read_text().splitlines():
        if not line.strip():
            continue
        j = json.loads(line)
        (triads if "triad_gbs" in j else runs).append(j)
    models = sorted({r["model"] for r in runs})
    engines = [e for e in ("tpserve", "tpserve-sgemm", "tpserve-amx", "tpserve-onednn", "torch", "llamacpp") if any(r["engine"] == e for r in runs)]
    names = {"tpserve": "tpserve", "tpserve-sgemm": "tpserve --cpu-gemm sgemm", "tpserve-amx": "tpserve --cpu-gemm amx-bf16", "tpserve-onednn": "tpserve --cpu-gemm onednn-bf16", "torch": "PyTorch", "llamacpp": "llama.cpp"}
    print(f"STREAM triad: median {fmt(statistics.median(t['triad_gbs'] for t in triads), 2)} GB/s, "
          f"max {fmt(max(t['triad_gbs'] for t in triads), 2)} GB/s over {len(triads)} runs "
          f"({triads[0]['threads']} threads)\n" if triads else "STREAM triad: not run\n")
    print("| model | engine | runs | prefill tok/s median (max) | decode tok/s median (max) | "
          "decode step ms median | weight GB/s (of triad) | peak RSS / weights | load s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    med = {}
    triad = statistics.median(t["triad_gbs"] for t in triads) if triads else 0
    for m in models:
        for e in engines:
            rs = [r for r in runs if r["model"] == m and r["engine"] == e]
            if not rs:
                continue
            pf = [r["prefill_tok_s"] for r in rs]
            dc = [r["decode_tok_s"] for r in rs]
            step = statistics.median(r["decode_median_step_ms"] for r in rs)
            wb = rs[0]["weight_bytes"]
            gbs = wb / (step / 1e3) / 1e9
            rss = max(r["peak_rss_bytes"] for r in rs)
            med[(m, e)] = (statistics.median(pf), statistics.median(dc))
            share = f" ({100 * gbs / triad:.0f}%)" if triad else ""
            print(f"| {m} | {names[e]} | {len(rs)} | {fmt(statistics.median(pf))} ({fmt(max(pf))}) | "
                  f"{fmt(statistics.median(dc), 2)} ({fmt(max(dc), 2)}) | {fmt(step)} | {fmt(gbs, 2)}{share} | "
                  f"{rss / wb:.2f} ({rss / 2**20:.0f} / {wb / 2**20:.0f} MiB) | "
                  f"{fmt(statistics.median(r['load_s'] for r in rs), 2)} |")
    print("\n| model | peer | prefill: tpserve / peer | decode: tpserve / peer | same 8 greedy tokens as tpserve |")
    print("|---|---|---:|---:|---:|")
    for m in models:
        for e in engines:
            if e == "tpserve" or (m, e) not in med or (m, "tpserve") not in med:
                continue
            t, p = med[(m, "tpserve")], med[(m, e)]
            # Runs of one round share the prompt (the seed): do the engines pick the same tokens?
            ours = {r["seed"]: r["output_ids"] for r in runs if r["model"] == m and r["engine"] == "tpserve"}
            theirs = [r for r in runs if r["model"] == m and r["engine"] == e and r["seed"] in ours]
            same = sum(r["output_ids"] == ours[r["seed"]] for r in theirs)
            print(f"| {m} | {names[e]} | {t[0] / p[0]:.2f}x | {t[1] / p[1]:.2f}x | {same} of {len(theirs)} runs |")
    # tpserve's own account: its resident set right after load and at the end of the run
    # (prefill activations and the KV cache added) against the weights it holds.
    print()
    for m in models:
        rs = [r for r in runs if r["model"] == m and r["engine"] == "tpserve" and "load_peak_rss_bytes" in r]
        if rs:
            wb = rs[0]["engine_weight_bytes"]
            print(f"- {m}, tpserve: peak RSS after load {max(r['load_peak_rss_bytes'] for r in rs) / wb:.2f}x its "
                  f"weights ({wb / 2**20:.0f} MiB), at the end of the run {max(r['peak_rss_bytes'] for r in rs) / wb:.2f}x")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--engine", required=True, choices=["tpserve", "tpserve-sgemm", "tpserve-amx", "tpserve-onednn", "torch", "llamacpp"])
    r.add_argument("--model", required=True, type=Path)
    r.add_argument("--gguf", type=Path)
    r.add_argument("--tpserve", default="build/launch/tpserve")
    r.add_argument("--threads", type=int, default=os.cpu_count())
    r.add_argument("--prompt-len", type=int, default=512)
    r.add_argument("--decode", type=int, default=64)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--label", default="")
    p = sub.add_parser("report")
    p.add_argument("runs")
    sub.add_parser("brief", help="one run's JSON line (stdin) as one short line")
    a = ap.parse_args()
    return {"run": cmd_run, "report": cmd_report, "brief": cmd_brief}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
