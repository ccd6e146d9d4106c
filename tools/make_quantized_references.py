#!/usr/bin/env python3
"""Writes tests/fixtures/models/<name>/reference_<q>.json for tests/model_test.cc's tests of
--quantization: transformers' prompt logits, greedy tokens and greedy logits for the fixture
with its 2-D weights (the projections, the embedding, an untied LM head) rounded the way
tpserve's --quantization q holds them:
  * q8_0 (--quantization int8): every 2-D weight through ggml's Q8_0 blocks (gguf.quants.quantize
    then dequantize: int8 with an fp16 scale per 32 weights);
  * fp8 (--quantization fp8): every 2-D weight whose rows are whole 128-element blocks through
    FP8 E4M3 with an fp32 scale per block of 128 (scale = amax / 448; torch's float8_e4m3fn cast:
    round to nearest even); narrower weights stay fp32, as tpserve widens them.
The format is reference.json's (make_model_fixtures.py's compute_reference and write_reference).

Usage: /work/tools-venv/bin/python tools/make_quantized_references.py [--quant q8_0|fp8] [NAME ...]
       (default: both quants; llama3 gemma4_text qwen3)
Requires: torch, transformers, gguf, numpy. Deterministic.
"""

import argparse
import json
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


def q8_0(w: np.ndarray) -> np.ndarray:
    q = gguf.GGMLQuantizationType.Q8_0
    return gguf.quants.dequantize(gguf.quants.quantize(w, q), q).reshape(w.shape)


def fp8(w: np.ndarray) -> np.ndarray | None:
    if w.shape[1] % 128 != 0:
        return None
    blocks = torch.from_numpy(w).reshape(-1, 128)
    scale = blocks.abs().amax(dim=1, keepdim=True) / 448.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = (blocks / safe).to(torch.float8_e4m3fn).to(torch.float32)
    return (q * scale).reshape(w.shape).numpy()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quant", choices=["q8_0", "fp8"], action="append")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    for quant in a.quant or ["q8_0", "fp8"]:
        for name in a.names or ["llama3", "gemma4_text", "qwen3"]:
            d = MODELS / name
            base = json.loads((d / "reference.json").read_text())
            model = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()
            rounded = 0
            with torch.no_grad():
                for _, p in model.named_parameters():
                    if p.ndim == 2:
                        w = p.detach().float().numpy()
                        r = q8_0(w) if quant == "q8_0" else fp8(w)
                        if r is not None:
                            p.copy_(torch.from_numpy(np.ascontiguousarray(r)))
                            rounded += 1
            ref = compute_reference(model, base["prompt_ids"])
            ref.update(arch=base["arch"], prompt_ids=base["prompt_ids"], dtype_on_disk=f"{quant} (rounded at load)",
                       transformers_version=transformers.__version__)
            write_reference(d / f"reference_{quant}.json", ref)
            print(f"{quant} {name}: {rounded} weights rounded; greedy {ref['greedy_ids']} (fp32: {base['greedy_ids']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
