#!/usr/bin/env python3
"""What bench/gpu_check.sh's benchmarks say to change, from its bench log.

Reads the "json: {...}" rows of `cuda_kernels_bench --json` and the JSON objects of
`engine_bench --json` (gpu_check's $OUT/kernels_bench.log and engine_*.log) and prints,
per sweep, the production choice beside the fastest one:

  - GEMV block shapes ("gemv tune F/U/B", production 4/4/2) per shape;
  - bulk-copy GEMV against the split kernel per projection shape;
  - the decode layer chain (split / bulk, with and without programmatic launch, eager and
    replayed from a graph);
  - cuBLASLt candidates per prefill GEMM shape (candidate 0 is the one used);
  - prefill attention tile shapes ("prefill tune BK/RW", production 32/4);
  - engine_bench decode rows and the prefill step by kernels (split vs bulk+pdl vs
    tuned+pdl) per batch and mode, and what start-up tuning chose where it left a default.

Before those, a headline per engine_bench run (copy bandwidth, GEMM, load, KV blocks,
peak memory, prefill by kernels, decode step time and its share of the copy bandwidth per
batch, mode and kernels, any error) and the kernel bench's prefill attention rows: the
numbers the GPU run is for, short enough to stay in the last lines of gpu_check's output.

A row whose name says BITS DIFFER is reported and never recommended. A section whose data
is malformed (missing keys, null for NaN) says so and the others still print. Python 3
standard library only (the GPU machine has nothing else); not run by CI.

  python3 tools/gpu_check_summary.py LOG [LOG ...]   # gpu_check's kernels and engine logs
"""
import collections
import json
import re
import sys


NOTES = []  # plain-text lines worth repeating: the wgmma kernel's check, runs cut short


def load(paths):
    kernel_rows, engine_runs = [], []
    for path in paths:
        try:
            f = open(path, encoding="utf-8", errors="replace")
        except OSError:
            continue
        with f:
            runs_before = len(engine_runs)
            progress = load_lines(f, kernel_rows, engine_runs)
        if len(engine_runs) == runs_before and progress:  # a run that ended before its tables
            NOTES.append(f"{path}: no result table; measured before it ended:")
            NOTES.extend(f"  {line}" for line in progress[-24:])
    return kernel_rows, engine_runs


def load_lines(f, kernel_rows, engine_runs):
    """Collects the rows and runs; returns the file's engine_bench "progress:" lines."""
    progress = []
    for line in f:
        line = line.strip()
        if line.startswith("progress: "):
            progress.append(line[len("progress: "):])
        elif line.startswith("prefill wgmma vs mma.sync"):
            NOTES.append(line)
        elif line.startswith("json: "):
            try:
                kernel_rows.append(json.loads(line[len("json: "):]))
            except json.JSONDecodeError:
                pass
        elif line.startswith("{") and '"backend"' in line:
            try:
                engine_runs.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return progress


def num(v, fmt=".1f"):
    return format(v, fmt) if isinstance(v, (int, float)) else "?"


def share(v):
    """A fraction as a whole percentage; "?" where it is missing (null: NaN in the JSON)."""
    return f"{100.0 * v:.0f}%" if isinstance(v, (int, float)) else "?"


def headline(kernel_rows, engine_runs):
    """The measurements themselves, compactly (the sweeps below compare choices)."""
    for run in engine_runs:
        print(f"engine {run.get('model')} {run.get('layers')}/{run.get('model_layers')} layers, tp {run.get('tp')}, "
              f"{run.get('gpu')}: copy {num(run.get('copy_gbs'), '.0f')} GB/s, GEMM {num(run.get('gemm_tflops'), '.0f')} "
              f"TFLOP/s, load {num(run.get('load_s'))} s, KV blocks {run.get('kv_blocks')}, peak "
              f"{num((run.get('peak_gpu_memory_bytes') or 0) / 2**30, '.1f')} of "
              f"{num((run.get('gpu_memory_total_bytes') or 0) / 2**30, '.1f')} GiB")
        if run.get("error"):
            print(f"  ERROR: {run['error']}")
        for p in run.get("prefill_by_kernels", []):
            print(f"  prefill {p.get('tokens')} {p.get('kernels')}: {num(p.get('ms'))} ms, "
                  f"{num(p.get('tflops'), '.0f')} TFLOP/s = {share(p.get('of_gemm'))} of the GEMM "
                  f"(target 70%); with attention {share(p.get('of_gemm_with_attention'))}")
        for d in run.get("decode", []):
            if "step_ms" not in d:
                print(f"  decode batch {d.get('batch')}: {d.get('kv')}")
                continue
            extra = f", {num(d['graph_speedup'], '.2f')}x eager" if isinstance(d.get("graph_speedup"), (int, float)) else ""
            print(f"  decode batch {d.get('batch')} {d.get('mode')} {d.get('kernels')}: {num(d.get('step_ms'), '.2f')} ms, "
                  f"{num(d.get('tok_s'), '.0f')} tok/s, {share(d.get('of_copy'))} of copy{' (target 90%)' if d.get('batch') == 1 else ''}{extra}")
    for r in kernel_rows:
        if r.get("kernel", "").startswith(("prefill attn causal", "prefill mma.sync", "prefill wgmma")):
            print(f"  kernel {r['kernel']} {r.get('shape')}: {num(r.get('us'))} us, {num(r.get('rate'))} {r.get('unit')}")
    for line in NOTES:
        print(f"  {line}")


def pct(a, b):
    return f"{100.0 * (a / b - 1.0):+.1f}%"


def best_of(rows, production_name, title, label=lambda r: r["kernel"]):
    """rows: one shape's rows (same work); faster = less time. Prints production vs best."""
    good = [r for r in rows if "BITS DIFFER" not in r["kernel"]]
    bad = [r for r in rows if "BITS DIFFER" in r["kernel"]]
    if not good:
        return
    prod = next((r for r in good if label(r) == production_name), None)
    best = min(good, key=lambda r: r["us"])
    shape = rows[0]["shape"]
    if prod is None:
        print(f"  {title} {shape}: fastest {label(best)} {best['us']:.1f} us (no production row)")
    elif best is prod:
        print(f"  {title} {shape}: production {production_name} is the fastest ({prod['us']:.1f} us)")
    else:
        print(f"  {title} {shape}: {label(best)} {best['us']:.1f} us vs production {production_name} "
              f"{prod['us']:.1f} us: {pct(prod['us'], best['us'])} time for production")
    for r in bad:
        print(f"    NOT ELIGIBLE: {r['kernel']} ({shape})")


def by_shape(rows, prefix):
    groups = collections.OrderedDict()
    for r in rows:
        if r["kernel"].startswith(prefix):
            groups.setdefault(r["shape"], []).append(r)
    return groups


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    kernel_rows, engine_runs = load(sys.argv[1:])
    if not kernel_rows and not engine_runs:
        print("gpu_check_summary: no JSON rows in the logs (cuda_kernels_bench --json, engine_bench --json)")
        return 1
    for title, section in (("Measured", headline), ("What the sweeps say (time: lower is better)", sweeps)):
        print(f"{title}:")
        try:
            section(kernel_rows, engine_runs)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            print(f"  (this section stopped on malformed data: {type(e).__name__}: {e})")
    return 0


def sweeps(kernel_rows, engine_runs):

    for shape, rows in by_shape(kernel_rows, "gemv tune ").items():
        best_of(rows, "4/4/2", "GEMV block shape", lambda r: r["kernel"].split()[2])

    split = {r["shape"]: r for r in kernel_rows if r["kernel"] == "gemv bf16 m=1"}
    for r in kernel_rows:
        if r["kernel"] == "gemv bulk m=1" and r["shape"] in split:
            s = split[r["shape"]]
            print(f"  bulk GEMV {r['shape']}: {r['us']:.1f} us vs split {s['us']:.1f} us "
                  f"({pct(r['us'], s['us'])}), {r['rate']:.0f} vs {s['rate']:.0f} GB/s")

    layers = [r for r in kernel_rows if r["kernel"].startswith("layer ")]
    for mode in ("eager", "graph"):
        rows = [r for r in layers if re.match(rf"layer \S+ {mode}", r["kernel"])]
        if rows:
            best_of(rows, f"layer split {mode}", f"decode layer ({mode})", lambda r: r["kernel"])
            for r in rows:
                share = f" ({100.0 * r['rate'] / r['peak']:.0f}% of copy)" if r["peak"] else ""
                print(f"    {r['kernel']}: {r['us']:.1f} us a layer, {r['rate']:.0f} GB/s of weights{share}")

    for shape, rows in by_shape(kernel_rows, "gemm candidate ").items():
        best_of(rows, "0", "cuBLASLt candidate", lambda r: r["kernel"].split()[2])

    for shape, rows in by_shape(kernel_rows, "prefill tune ").items():
        best_of(rows, "32/4", "prefill attention tile", lambda r: r["kernel"].split()[2])

    for run in engine_runs:
        tuned = run.get("tuned_kernels", {})
        if tuned.get("products"):
            print(f"  engine tp {run.get('tp')} start-up tuning: {tuned['products']} products in "
                  f"{tuned.get('seconds', 0):.1f} s, {tuned.get('changed', 0)} not the default:")
            changed = [line for line in tuned.get("lines", [])
                       if any(mark in line for mark in ("(split ", "(heuristic's first ", "gemv, over", "(production "))]
            for line in changed[:30]:
                print(f"    {line}")
            if len(changed) > 30:
                print(f"    ... {len(changed) - 30} more in the engine log")
        prefill = {p["kernels"]: p for p in run.get("prefill_by_kernels", [])}
        if "split" in prefill:
            base = prefill["split"]
            for name, p in prefill.items():
                if name != "split":
                    print(f"  engine tp {run.get('tp')} prefill {p['tokens']}: {name} {p['ms']:.1f} ms vs split "
                          f"{base['ms']:.1f} ms ({pct(p['ms'], base['ms'])}), {100.0 * p['of_gemm']:.0f}% vs "
                          f"{100.0 * base['of_gemm']:.0f}% of the GEMM")
        rows = [d for d in run.get("decode", []) if "step_ms" in d]
        keyed = collections.defaultdict(dict)
        for d in rows:
            keyed[(d["batch"], d.get("mode", "eager"))][d.get("kernels", "split")] = d
        for (batch, mode), variants in sorted(keyed.items()):
            if len(variants) < 2 or "split" not in variants:
                continue
            base = variants["split"]
            for name, d in variants.items():
                if name == "split":
                    continue
                print(f"  engine tp {run.get('tp')} batch {batch} {mode}: {name} {d['step_ms']:.2f} ms vs split "
                      f"{base['step_ms']:.2f} ms ({pct(d['step_ms'], base['step_ms'])}), "
                      f"{100.0 * d['of_copy']:.0f}% vs {100.0 * base['of_copy']:.0f}% of copy")


if __name__ == "__main__":
    sys.exit(main())
