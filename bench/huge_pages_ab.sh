#!/usr/bin/env bash
# Decode with the CPU backend's weights on transparent huge pages and without: `tpserve
# generate --cpu-huge-pages on` and `off` alternated run by run (the order flips each round,
# one process per run) on random bf16 weights of llama-3.2-1b's and gemma-4-1b's shapes, a
# 4-token prompt then DECODE greedy steps. Prints each run's decode tok/s (over all its decode
# steps) and best-step tok/s (1000 / its fastest decode step's ms: what a step takes when no
# other process takes the cores from it, as the kernel benchmarks' best calls), then per
# model and metric the median of each setting and the median and range of the per-round
# ratios on / off. The kernel-level comparison is `build/bench/kernels_bench --models ...
# --huge-pages-ab N`.
#
#   bench/huge_pages_ab.sh                                  # both models, 5 rounds, 2 threads
#   bench/huge_pages_ab.sh --models gemma-4-1b --rounds 3 --threads 1 --decode 32
#
# Needs build/launch/tpserve. llama-3.2-1b's config (hidden 2048, 16 layers, 32/8 heads of
# 64, MLP 8192, vocab 128256, tied) is written to a temporary directory; gemma-4-1b is the
# built-in preset. Both load with --load-format dummy (nothing to download).
set -euo pipefail
cd "$(dirname "$0")/.."
TPSERVE=${TPSERVE:-$PWD/build/launch/tpserve}
MODELS=llama-3.2-1b,gemma-4-1b
ROUNDS=5
THREADS=$(nproc)
DECODE=32
usage() { sed -n '2,18p' "$0"; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --models) MODELS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --decode) DECODE=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "huge_pages_ab.sh: unknown option $1" >&2; usage ;;
  esac
done
[ -x "$TPSERVE" ] || { echo "huge_pages_ab.sh: build first: ninja -C build tpserve" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/llama-3.2-1b"
cat > "$TMP/llama-3.2-1b/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "bfloat16",
 "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "hidden_act": "silu",
 "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
 "bos_token_id": 2, "eos_token_id": 1, "attention_bias": false, "mlp_bias": false,
 "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
EOF
model_arg() { if [ "$1" = llama-3.2-1b ]; then echo "$TMP/llama-3.2-1b"; else echo "$1"; fi; }

IFS=, read -r -a MODEL_LIST <<< "$MODELS"
RUNS=$TMP/runs.jsonl
: > "$RUNS"
echo "huge_pages_ab: THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unavailable);" \
     "$ROUNDS rounds, $THREADS threads, $DECODE decode steps"
for ((r = 0; r < ROUNDS; r++)); do
  for m in "${MODEL_LIST[@]}"; do
    if ((r % 2 == 0)); then order=(on off); else order=(off on); fi
    for hp in "${order[@]}"; do
      out=$("$TPSERVE" generate --model "$(model_arg "$m")" --load-format dummy --dtype bfloat16 \
              --prompt-ids 2,100,200,300 --max-tokens "$((DECODE + 1))" --ignore-eos --json \
              --threads "$THREADS" --kv-cache-memory 256MiB --max-model-len 1024 --cpu-huge-pages "$hp" \
              2>"$TMP/stderr") || { cat "$TMP/stderr" >&2; exit 1; }
      # step_ms[0] is the prompt's step, the rest decode steps.
      python3 -c 'import json, sys
j = json.loads(sys.argv[4])
print(json.dumps({"round": int(sys.argv[1]), "model": sys.argv[2], "huge_pages": sys.argv[3],
                  "decode_tok_s": j["decode_tok_s"], "best_step_tok_s": 1000 / min(j["step_ms"][1:])}))' \
        "$r" "$m" "$hp" "$out" | tee -a "$RUNS"
    done
  done
done
python3 - "$RUNS" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
for m in dict.fromkeys(r["model"] for r in runs):
    for metric in ("decode_tok_s", "best_step_tok_s"):
        by = {(r["round"], r["huge_pages"]): r[metric] for r in runs if r["model"] == m}
        rounds = sorted({k[0] for k in by})
        on = [by[(r, "on")] for r in rounds]
        off = [by[(r, "off")] for r in rounds]
        ratios = [a / b for a, b in zip(on, off)]
        print(f"{m}: {metric} median on {statistics.median(on):.2f}, off {statistics.median(off):.2f}; "
              f"on/off median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}, "
              f"{len(ratios)} rounds)")
EOF
