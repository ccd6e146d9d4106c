#!/usr/bin/env bash
# tpserve against llama.cpp on the same GGUF files, batch 1, the same thread count, runs
# alternated, with the STREAM triad measured in each round (issue 31's performance table).
# Per round and file: `tpserve generate` (a 512-token prompt, then 64 greedy decode steps;
# its --json gives the prefill and every step's time, the weight bytes the ranks hold and
# the peak RSS) and llama.cpp's `llama-bench` (pp512 at depth 0, and tg64 at depth 512 so
# that its decode attends over as many positions as tpserve's; its peak RSS, the larger of the
# two runs', from /usr/bin/time). The bytes a tpserve decode step reads are its weights plus the
# KV cache its attention reads (generate's kv_groups: bytes per cached token and window per
# group, over the positions of the 64 steps). llama.cpp's tools come from
# bench/llamacpp_tools.sh (built once from the llama-cpp-python source package, explicit
# AVX-512 flags). Extra tpserve runs: ENGINE "tpserve-dq" is tpserve --dequantize-weights (the
# same file widened to bf16 at load: what tpserve did before the blocks stayed quantized).
#
# Usage: bench/gguf_peers.sh [--rounds 5] [--threads 2] [--engines tpserve,llamacpp,tpserve-dq]
#                            [--out DIR] FILE.gguf [FILE.gguf ...]
# Prints a Markdown table (medians and ranges over the rounds) and leaves runs.jsonl in --out.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=5
THREADS=2
ENGINES=tpserve,llamacpp
OUT=$(mktemp -d /tmp/gguf_peers.XXXXXX)
FILES=()
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --engines) ENGINES=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) FILES+=("$1"); shift ;;
  esac
done
[ ${#FILES[@]} -gt 0 ] || { echo "gguf_peers.sh: name at least one GGUF file" >&2; exit 2; }
CACHE=${TPSERVE_CACHE:-$HOME/.cache/tpserve}
LLAMA_BENCH=${LLAMA_BENCH:-$CACHE/llama.cpp-build/bin/llama-bench}
TPSERVE=${TPSERVE:-build/launch/tpserve}
STREAM=${STREAM:-build/bench/stream_bench}
mkdir -p "$OUT"
RUNS=$OUT/runs.jsonl
: >"$RUNS"
has() { [[ ",$ENGINES," == *",$1,"* ]]; }
if has llamacpp && [ ! -x "$LLAMA_BENCH" ]; then
  echo "gguf_peers.sh: no llama-bench at $LLAMA_BENCH (bash bench/llamacpp_tools.sh builds it)" >&2
  exit 1
fi
# The prompt: 512 token ids spread over the first 30,000 (past the special and byte tokens).
IDS=$(python3 -c "print(','.join(str(1000 + (7919 * i) % 29000) for i in range(512)))")

for round in $(seq 1 "$ROUNDS"); do
  triad=$("$STREAM" "$THREADS" 2>/dev/null | grep -o '"triad_gbs": [0-9.]*' | grep -o '[0-9.]*$' | tail -1)
  echo "{\"round\": $round, \"triad_gbs\": ${triad:-0}}" >>"$RUNS"
  for f in "${FILES[@]}"; do
    for e in ${ENGINES//,/ }; do
      case $e in
        tpserve|tpserve-dq)
          extra=()
          [ "$e" = tpserve-dq ] && extra=(--dequantize-weights)
          j=$("$TPSERVE" generate --model "$f" --prompt-ids "$IDS" --max-tokens 65 --ignore-eos --temperature 0 \
                --threads "$THREADS" --device cpu --kv-cache-memory 256MiB --max-model-len 1024 --json "${extra[@]}" \
                2>"$OUT/err" | tail -1) || { echo "tpserve failed on $f: $(tail -3 "$OUT/err")" >&2; exit 1; }
          python3 - "$e" "$f" "$round" "$j" >>"$RUNS" <<'EOF'
import json, os, statistics, sys
e, f, rnd, j = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
steps = j["step_ms"][len(j["step_ms"]) - j["decode_steps"]:]
# Decode step i attends over 512 + i + 1 positions (its window's worth where it has one).
kv = sum(g["bytes_per_token"] * min(512 + i + 1, g["window"] or 1 << 30) for g in j["kv_groups"]
         for i in range(len(steps))) / max(1, len(steps))
print(json.dumps({"engine": e, "file": os.path.basename(f), "round": rnd, "file_bytes": os.path.getsize(f),
                  "prefill_tok_s": 512 / (j["prefill_ms"] / 1e3),
                  "decode_tok_s": len(steps) / (sum(steps) / 1e3),
                  "decode_step_ms_median": statistics.median(steps), "decode_step_ms_min": min(steps),
                  "weight_bytes": j["weight_bytes"], "kv_read_bytes_per_step": kv, "peak_rss_bytes": j["peak_rss_bytes"],
                  "quantization": j.get("quantization", "")}))
EOF
          ;;
        llamacpp)
          pp=$(/usr/bin/time -f %M -o "$OUT/rss.pp" "$LLAMA_BENCH" -m "$f" -t "$THREADS" -p 512 -n 0 -r 1 -o jsonl 2>/dev/null | tail -1)
          tg=$(/usr/bin/time -f %M -o "$OUT/rss.tg" "$LLAMA_BENCH" -m "$f" -t "$THREADS" -p 0 -n 64 -d 512 -r 1 -o jsonl 2>/dev/null | tail -1)
          rss_kib=$(cat "$OUT/rss.pp" "$OUT/rss.tg" | sort -n | tail -1)
          python3 - "$f" "$round" "$pp" "$tg" "$rss_kib" >>"$RUNS" <<'EOF'
import json, os, sys
f, rnd, pp, tg = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(json.dumps({"engine": "llamacpp", "file": os.path.basename(f), "round": rnd, "file_bytes": os.path.getsize(f),
                  "prefill_tok_s": pp["avg_ts"], "decode_tok_s": tg["avg_ts"], "peak_rss_bytes": int(sys.argv[5]) * 1024,
                  "llama_build": pp.get("build_commit", "")}))
EOF
          ;;
        *) echo "gguf_peers.sh: unknown engine $e" >&2; exit 2 ;;
      esac
      tail -1 "$RUNS" | python3 -c "import json,sys; r=json.load(sys.stdin); print(f\"round {r['round']} {r['engine']:11s} {r['file']}: prefill {r['prefill_tok_s']:.1f} tok/s, decode {r['decode_tok_s']:.2f} tok/s\")"
    done
  done
done

python3 - "$RUNS" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
triads = [r["triad_gbs"] for r in runs if "triad_gbs" in r]
rs = [r for r in runs if "engine" in r]
med = lambda v: statistics.median(v)
triad = med(triads) if triads else 0
print(f"\nSTREAM triad: median {triad:.1f} GB/s over {len(triads)} rounds (range {min(triads):.1f}-{max(triads):.1f})\n")
print("| file | engine | rounds | prefill tok/s median (range) | decode tok/s median (range) | weight GB/s (of triad) | weights + KV GB/s (of triad) | the same at the fastest step | weights / file | peak RSS / file |")
print("|---|---|---:|---|---|---:|---:|---:|---:|---:|")
files = sorted({r["file"] for r in rs})
engines = [e for e in ("tpserve", "tpserve-dq", "llamacpp") if any(r["engine"] == e for r in rs)]
m = {}
for f in files:
    for e in engines:
        x = [r for r in rs if r["file"] == f and r["engine"] == e]
        if not x:
            continue
        pf = [r["prefill_tok_s"] for r in x]
        dc = [r["decode_tok_s"] for r in x]
        m[(f, e)] = (med(pf), med(dc))
        fb = x[0]["file_bytes"]
        if "weight_bytes" in x[0]:
            wb = x[0]["weight_bytes"]
            gbs = wb * med(dc) / 1e9
            read = wb + x[0].get("kv_read_bytes_per_step", 0)
            all_gbs = read * med(dc) / 1e9
            # The fastest decode step of the median round: what a step reads when the machine
            # lets it (this VM's steps spread by ~30% between the fastest and the median).
            best = med([read / (r["decode_step_ms_min"] / 1e3) / 1e9 for r in x if "decode_step_ms_min" in r] or [0])
            extra = (f"{gbs:.1f} ({100 * gbs / triad:.0f}%) | {all_gbs:.1f} ({100 * all_gbs / triad:.0f}%) | "
                     f"{best:.1f} ({100 * best / triad:.0f}%) | {wb / fb:.2f} | {max(r['peak_rss_bytes'] for r in x) / fb:.2f}")
        elif "peak_rss_bytes" in x[0]:
            extra = f"- | - | - | - | {max(r['peak_rss_bytes'] for r in x) / fb:.2f}"
        else:
            extra = "- | - | - | - | -"
        print(f"| {f} | {e} | {len(x)} | {med(pf):.1f} ({min(pf):.1f}-{max(pf):.1f}) | {med(dc):.2f} ({min(dc):.2f}-{max(dc):.2f}) | {extra} |")
print("\n| file | tpserve / llama.cpp prefill | tpserve / llama.cpp decode | tpserve / tpserve --dequantize-weights decode |")
print("|---|---:|---:|---:|")
for f in files:
    t = m.get((f, "tpserve"))
    l = m.get((f, "llamacpp"))
    d = m.get((f, "tpserve-dq"))
    a = f"{t[0] / l[0]:.2f}x | {t[1] / l[1]:.2f}x" if t and l else "- | -"
    b = f"{t[1] / d[1]:.2f}x" if t and d else "-"
    print(f"| {f} | {a} | {b} |")
EOF
echo "runs: $RUNS"
