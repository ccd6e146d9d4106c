#!/usr/bin/env python3
"""Writes tests/fixtures/models/<name>/reference_q8_0.json for tests/model_test.cc's
Int8QuantizedAtLoad: transformers' prompt logits, greedy tokens and greedy logits for the fixture
with every 2-D weight (the projections, the embedding, an untied LM head) rounded through
ggml's Q8_0 blocks (gguf.quants.quantize then dequantize: int8 with an fp16 scale per 32
weights), as tpserve's --quantization int8 holds them. The format is reference.json's
(make_model_fixtures.py's compute_reference and write_reference, reused).

Usage: /work/tools-venv/bin/python tools/make_q8_0_references.py [NAME ...]   (default: llama3 gemma4_text qwen3)
Requires: torch, transformers, gguf, numpy. Deterministic.
"""

import sys
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_model_fixtures import compute_reference, write_reference  # noqa: E402

MODELS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models"


def round_through_q8_0(model) -> None:
    q8 = gguf.GGMLQuantizationType.Q8_0
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.ndim == 2:
                w = p.detach().float().numpy()
                p.copy_(torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(w, q8), q8).reshape(w.shape)))


def main() -> int:
    import json
    for name in sys.argv[1:] or ["llama3", "gemma4_text", "qwen3"]:
        d = MODELS / name
        base = json.loads((d / "reference.json").read_text())
        model = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()
        round_through_q8_0(model)
        ref = compute_reference(model, base["prompt_ids"])
        ref.update(arch=base["arch"], prompt_ids=base["prompt_ids"], dtype_on_disk="q8_0 (rounded at load)",
                   transformers_version=transformers.__version__)
        write_reference(d / "reference_q8_0.json", ref)
        print(f"{name}: greedy {ref['greedy_ids']} (fp32 weights: {base['greedy_ids']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
