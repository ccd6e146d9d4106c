#!/usr/bin/env bash
# Live cloud baseline: the same tpbench method against Groq's OpenAI-compatible API (or
# any other provider: set BASE_URL, MODEL and KEY_ENV). Runs only when the key is set and
# the endpoint answers; otherwise says plainly why not and exits 0, so suites can call it.
#
#   GROQ_API_KEY=gsk_... bench/cloud_baseline.sh [--out DIR] [-- tpbench run options]
set -uo pipefail
cd "$(dirname "$0")/.."
TPBENCH=${TPBENCH:-build/bench/tpbench/tpbench}
BASE_URL=${BASE_URL:-https://api.groq.com/openai/v1}
MODEL=${MODEL:-llama-3.3-70b-versatile}
KEY_ENV=${KEY_ENV:-GROQ_API_KEY}
OUT=results/cloud-$(date -u +%Y%m%d-%H%M%S)
ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --) shift; ARGS=("$@"); break ;;
    *) echo "cloud_baseline.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ ${#ARGS[@]} -gt 0 ] || ARGS=(--input-len 128 --output-len 256 --concurrency 1,2,4 --rounds 10)
if [ -z "${!KEY_ENV:-}" ]; then
  echo "cloud baseline: skipped: \$$KEY_ENV is not set (no API key), so $BASE_URL was not measured"
  exit 0
fi
code=$(curl -s -o /dev/null -w '%{http_code}' -m 10 -H "Authorization: Bearer ${!KEY_ENV}" "$BASE_URL/models" || true)
if [ "$code" != 200 ]; then
  echo "cloud baseline: skipped: $BASE_URL/models answered '${code:-nothing}' (no network, or the key was refused)"
  exit 0
fi
"$TPBENCH" run --target "$BASE_URL" --api chat --model "$MODEL" --api-key-env "$KEY_ENV" \
  --label "cloud $MODEL" --gpu-model "provider: $BASE_URL" --out "$OUT" "${ARGS[@]}"
echo "cloud baseline: $OUT (add it to a report: tpbench report RUN_DIR... $OUT --out DIR)"
