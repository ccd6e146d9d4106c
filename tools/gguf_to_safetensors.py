#!/usr/bin/env python3
"""Writes a GGUF model's weights as a Hugging Face safetensors checkpoint, for bench
comparisons of the same weights in both formats (docs/gguf.md: load time of the GGUF file
vs the checkpoint). Every tensor is dequantized with the gguf package, renamed back to the
Hugging Face name and un-transformed as tpserve's loader does (Gemma norms stored as 1 + w;
Llama's interleaved q/k rows: not handled here, gemma3/qwen only); config.json is
transformers' config read off the same file.

Usage: /work/tools-venv/bin/python tools/gguf_to_safetensors.py GGUF_FILE OUT_DIR [--dtype bfloat16]
Requires: torch, transformers, gguf, safetensors.
"""

import argparse
import sys
from pathlib import Path

import gguf
import numpy as np
import torch
from safetensors.torch import save_file
from transformers import AutoConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_gguf_model_fixtures import gguf_name  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("gguf", type=Path)
ap.add_argument("out", type=Path)
ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
args = ap.parse_args()

reader = gguf.GGUFReader(str(args.gguf))
arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
if arch not in ("gemma3", "qwen2", "qwen3"):
    sys.exit(f"{arch}: not handled by this script")
config = AutoConfig.from_pretrained(str(args.gguf.parent), gguf_file=args.gguf.name)
hf_names = {}
for layer in range(config.num_hidden_layers):
    for hf in ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm",
               "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
               "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]:
        for leaf in ("weight", "bias"):
            name = f"model.layers.{layer}.{hf}.{leaf}"
            try:
                hf_names[gguf_name(arch, name)] = name
            except KeyError:
                pass
for name in ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]:
    hf_names[gguf_name(arch, name)] = name
tensors = {}
for t in reader.tensors:
    w = gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
    if arch == "gemma3" and t.name.endswith("norm.weight"):
        w = w - 1.0
    tensors[hf_names[t.name]] = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)).to(getattr(torch, args.dtype))
args.out.mkdir(parents=True, exist_ok=True)
config.dtype = args.dtype
config.save_pretrained(args.out)
save_file(tensors, str(args.out / "model.safetensors"), metadata={"format": "pt"})
print(f"wrote {args.out}: {len(tensors)} tensors")
