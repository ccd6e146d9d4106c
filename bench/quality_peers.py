#!/usr/bin/env python3
"""Quantization quality per GGUF type, tpserve against llama.cpp on the same files (issue 31's
"KL divergence per type within 10% of llama.cpp's on the same file").

One F32 GGUF is the base (default: the real Gemma 3 270M's, bench/llamacpp_tools.sh makes it).
For each type, llama.cpp's own `llama-quantize` writes a file from it (cached beside the base);
then both engines score the same text against the base, with llama-perplexity's convention
(chunks of --ctx tokens, each starting with BOS, the second half of each chunk scored):
  - llama.cpp: `llama-perplexity --kl-divergence` against the base's logits
    (`--kl-divergence-base`, computed once per run);
  - tpserve: `build/bench/quality_bench --model BASE --ref_options dtype=float32
    --candidate FILE --candidate_step_tokens 16`, so that every product of the candidate runs
    the quantized decode kernels (int8 activations, as llama.cpp's CPU products quantize
    theirs); the reference is the base in fp32, as llama.cpp's.
The weights are the same bytes in both engines: only how each computes with them differs.

Usage:
  python3 bench/quality_peers.py [--types Q8_0,Q4_0,...] [--base F32.gguf] [--ctx 512]
      [--chunks 0] [--threads 2] [--out DIR]
A type is llama-quantize's name (Q4_K_M, Q8_0 ...), or pure:NAME for `llama-quantize --pure`
(every tensor that type where its rows allow). Writes DIR/runs.jsonl (one line per engine and
type: the numbers and the command) and prints a Markdown table. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_TYPES = "Q8_0,Q6_K,Q5_K_M,Q5_0,Q5_1,Q4_K_M,Q4_0,Q4_1,Q3_K_M,Q2_K"


def run(cmd: list[str], env: dict | None = None) -> str:
    """Runs cmd; returns stdout + stderr; exits with its output when it fails."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}")
    return p.stdout


def num(pattern: str, text: str, what: str) -> list[float]:
    m = re.search(pattern, text, re.M)
    if not m:
        sys.exit(f"llama-perplexity's output has no {what} (pattern {pattern!r})")
    return [float(g) for g in m.groups()]


def parse_llama_kld(out: str) -> dict:
    """The numbers llama-perplexity --kl-divergence prints at its end."""
    f = r"\s*([-+0-9.eE]+)"
    pm = r"\s*(?:±|\+/-)\s*([-+0-9.eE]+)"
    cand_ppl, cand_ppl_se = num(r"^Mean PPL\(Q\)\s*:" + f + pm, out, "PPL(Q)")
    ref_ppl, ref_ppl_se = num(r"^Mean PPL\(base\)\s*:" + f + pm, out, "PPL(base)")
    kl_mean, kl_mean_se = num(r"^Mean\s+KLD:" + f + pm, out, "mean KLD")
    top1, top1_se = num(r"^Same top p:" + f + pm + r"\s*%", out, "same top p")
    return {
        "cand_ppl": cand_ppl, "cand_ppl_se": cand_ppl_se, "ref_ppl": ref_ppl, "ref_ppl_se": ref_ppl_se,
        "kl_mean": kl_mean, "kl_mean_se": kl_mean_se,
        "kl_median": num(r"^Median\s+KLD:" + f, out, "median KLD")[0],
        "kl_p99": num(r"^99\.0%\s+KLD:" + f, out, "99% KLD")[0],
        "kl_max": num(r"^Maximum KLD:" + f, out, "maximum KLD")[0],
        "top1_agreement": top1 / 100, "top1_agreement_se": top1_se / 100,
        "tokens_scored": None,
    }


def quantized_file(a, bin_dir: Path, env: dict, t: str) -> Path:
    pure = t.startswith("pure:")
    name = t[5:] if pure else t
    out = a.base.with_name(a.base.stem.replace("-f32", "") + ("-pure" if pure else "") + f"-{name.lower()}.gguf")
    if not out.exists():
        tmp = out.with_suffix(".tmp")
        cmd = [str(bin_dir / "llama-quantize")] + (["--pure"] if pure else []) + [str(a.base), str(tmp), name, str(a.threads)]
        print(f"== {' '.join(cmd)}", file=sys.stderr)
        run(cmd, env)
        tmp.rename(out)
    return out


def main() -> int:
    cache = Path(os.environ.get("TPSERVE_CACHE", Path.home() / ".cache/tpserve"))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--types", default=DEFAULT_TYPES)
    p.add_argument("--base", type=Path, default=cache / "gemma270m-f32.gguf")
    p.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--chunks", type=int, default=0, help="0: every chunk of the text")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--engines", default="tpserve,llamacpp")
    p.add_argument("--llama-bin", type=Path, default=cache / "llama.cpp-build/bin")
    p.add_argument("--quality-bench", default="build/bench/quality_bench")
    p.add_argument("--out", type=Path, default=Path("/tmp/quality_peers"))
    a = p.parse_args()
    if not a.base.exists():
        sys.exit(f"no base file {a.base} (bash bench/llamacpp_tools.sh makes the Gemma 3 270M one)")
    engines = a.engines.split(",")
    if "llamacpp" in engines and not (a.llama_bin / "llama-perplexity").exists():
        sys.exit(f"no llama-perplexity in {a.llama_bin} (bash bench/llamacpp_tools.sh builds it)")
    a.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(a.llama_bin))
    chunk_args = ["--chunks", str(a.chunks)] if a.chunks > 0 else []
    runs = open(a.out / "runs.jsonl", "a")

    kld_base = a.out / (a.base.stem + f"-c{a.ctx}-n{a.chunks}.kld")
    if "llamacpp" in engines and not kld_base.exists():
        cmd = [str(a.llama_bin / "llama-perplexity"), "-m", str(a.base), "-f", a.text, "-c", str(a.ctx),
               "-t", str(a.threads), "--kl-divergence-base", str(kld_base)] + chunk_args
        print(f"== {' '.join(cmd)}", file=sys.stderr)
        run(cmd, env)

    rows = []
    for t in a.types.split(","):
        f = quantized_file(a, a.llama_bin, env, t)
        row = {"type": t, "file": str(f), "file_bytes": f.stat().st_size}
        if "tpserve" in engines:
            cmd = [a.quality_bench, "--model", str(a.base), "--ref_options", "dtype=float32", "--candidate", str(f),
                   "--candidate_step_tokens", "16", "--text", a.text, "--ctx", str(a.ctx), "--chunks", str(a.chunks),
                   "--threads", str(a.threads), "--json"]
            print(f"== {' '.join(cmd)}", file=sys.stderr)
            t0 = time.time()
            out = run(cmd)
            j = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
            rec = {"engine": "tpserve", "type": t, "file": str(f), "seconds": time.time() - t0, "command": cmd,
                   "weights": j["candidate"].get("quantization"), "weight_bytes": j["candidate"].get("weight_bytes"), **{k: j[k] for k in (
                       "ref_ppl", "ref_ppl_se", "cand_ppl", "cand_ppl_se", "kl_mean", "kl_mean_se", "kl_median",
                       "kl_p99", "kl_max", "top1_agreement", "top1_agreement_se", "tokens_scored", "version")}}
            runs.write(json.dumps(rec) + "\n")
            runs.flush()
            row["tpserve"] = rec
        if "llamacpp" in engines:
            cmd = [str(a.llama_bin / "llama-perplexity"), "-m", str(f), "-f", a.text, "-c", str(a.ctx), "-t",
                   str(a.threads), "--kl-divergence-base", str(kld_base), "--kl-divergence"] + chunk_args
            print(f"== {' '.join(cmd)}", file=sys.stderr)
            t0 = time.time()
            rec = {"engine": "llamacpp", "type": t, "file": str(f), "command": cmd, **parse_llama_kld(run(cmd, env))}
            rec["seconds"] = time.time() - t0
            runs.write(json.dumps(rec) + "\n")
            runs.flush()
            row["llamacpp"] = rec
        rows.append(row)

    def kl(r):
        return f"{r['kl_mean']:.5f} +/- {r['kl_mean_se']:.5f}" if r else ""

    def top1(r):
        return f"{100 * r['top1_agreement']:.2f}%" if r else ""

    print(f"\nbase {a.base}, text {a.text}, ctx {a.ctx}, chunks {a.chunks or 'all'}; records: {a.out / 'runs.jsonl'}\n")
    print("| file | MB | tpserve weights | PPL tpserve / llama.cpp | mean KL tpserve | mean KL llama.cpp | "
          "KL ratio | p99 KL tpserve / llama.cpp | top-1 tpserve / llama.cpp |")
    print("|---|---:|---|---|---|---|---:|---|---|")
    for r in rows:
        tp, lc = r.get("tpserve"), r.get("llamacpp")
        ratio = f"{tp['kl_mean'] / lc['kl_mean']:.2f}" if tp and lc and lc["kl_mean"] > 0 else ""
        ppl = " / ".join(f"{x['cand_ppl']:.3f}" for x in (tp, lc) if x)
        p99 = " / ".join(f"{x['kl_p99']:.4f}" for x in (tp, lc) if x)
        t1 = " / ".join(top1(x) for x in (tp, lc) if x)
        print(f"| {r['type']} | {r['file_bytes'] / 1e6:.0f} | {(tp or {}).get('weights', '')} | {ppl} | {kl(tp)} | "
              f"{kl(lc)} | {ratio} | {p99} | {t1} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
