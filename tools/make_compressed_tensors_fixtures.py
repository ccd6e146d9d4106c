#!/usr/bin/env python3
"""Writes tests/fixtures/models/ct_{fp8_channel,fp8_block,w4a16}/: one tiny random Llama-shape
model (hidden 256, so that every projection's rows are whole 128-element blocks, and still whole
at tensor-parallel 2) stored the way compressed-tensors (llm-compressor) stores quantized
Hugging Face checkpoints, with transformers' reference on the dequantized weights:

  * ct_fp8_channel: FP8 E4M3 weights with one bf16 scale per output channel (weight_scale
    [n, 1]), dynamic per-token fp8 activations in the config (as RedHatAI's *-FP8-dynamic);
  * ct_fp8_block: FP8 E4M3 weights with fp32 scales per 128x128 block (weight_scale
    [ceil(n/128), ceil(k/128)], as *-FP8-block);
  * ct_w4a16: symmetric int4 weights in groups of 128 with bf16 scales, packed by
    compressed-tensors' own pack_to_int32 (weight_packed I32 [n, k/8], weight_scale,
    weight_shape; as Google's QAT w4a16).

The embedding, norms and the untied lm_head stay bf16 (ignore: ["lm_head"]). Each directory's
config.json carries compressed-tensors' own QuantizationConfig. The script checks that
transformers with compressed-tensors decompresses every quantized weight to what tpserve
computes from the same tensors (scale * value in fp32, then the decompressor's rounding), and
writes reference.json (tools/make_model_fixtures.py's format) from transformers' fp32 forward on
the exactly dequantized weights (fp32: scale * value). Deterministic.

Usage: /work/tools-venv/bin/python tools/make_compressed_tensors_fixtures.py
Requires: torch, transformers, compressed-tensors, numpy.
"""

import json
import math
import os
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import transformers
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, CompressedTensorsConfig, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_model_fixtures import compute_reference, randomize_weights, write_reference  # noqa: E402

MODELS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models"
SEED = 31
PROMPT_LEN = 24
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def build() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
                         rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    randomize_weights(model, SEED)
    return model.eval()


def fp8_channel(w: torch.Tensor):
    scale = (w.abs().amax(dim=1, keepdim=True) / 448.0).to(torch.bfloat16)
    q = (w / scale.float()).to(torch.float8_e4m3fn)
    return {"weight": q, "weight_scale": scale}, q.float() * scale.float()


def fp8_block(w: torch.Tensor):
    n, k = w.shape
    rb, cb = math.ceil(n / 128), math.ceil(k / 128)
    scale = torch.zeros(rb, cb, dtype=torch.float32)
    for i in range(rb):
        for j in range(cb):
            scale[i, j] = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128].abs().amax() / 448.0
    full = scale.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    q = (w / full).to(torch.float8_e4m3fn)
    return {"weight": q, "weight_scale": scale}, q.float() * full


def int4_group(w: torch.Tensor, group: int = 128):
    n, k = w.shape
    g = w.reshape(n, k // group, group)
    scale = (g.abs().amax(dim=2) / 7.5).to(torch.bfloat16)  # compressed-tensors' symmetric range
    q = torch.clamp(torch.round(g / scale.float().unsqueeze(2)), -8, 7).to(torch.int8).reshape(n, k)
    deq = (q.float().reshape(n, k // group, group) * scale.float().unsqueeze(2)).reshape(n, k)
    return {"weight_packed": pack_to_int32(q, 4), "weight_scale": scale,
            "weight_shape": torch.tensor([n, k], dtype=torch.int64)}, deq


def quant_config(kind: str) -> dict:
    if kind == "w4a16":
        weights = QuantizationArgs(num_bits=4, type="int", strategy="group", group_size=128, symmetric=True,
                                   dynamic=False)
        scheme, fmt = QuantizationScheme(targets=["Linear"], weights=weights), "pack-quantized"
    else:
        block = kind == "fp8_block"
        weights = QuantizationArgs(num_bits=8, type="float", symmetric=True, dynamic=False,
                                   strategy="block" if block else "channel",
                                   block_structure=[128, 128] if block else None)
        acts = QuantizationArgs(num_bits=8, type="float", symmetric=True, dynamic=True,
                                strategy="group" if block else "token", group_size=128 if block else None)
        scheme, fmt = QuantizationScheme(targets=["Linear"], weights=weights, input_activations=acts), "float-quantized"
    qc = QuantizationConfig(config_groups={"group_0": scheme}, format=fmt, quantization_status="compressed",
                            ignore=["lm_head"])
    return qc.model_dump()


QUANTIZERS = {"fp8_channel": fp8_channel, "fp8_block": fp8_block, "w4a16": int4_group}


def make(kind: str, model: LlamaForCausalLM, prompt_ids: list[int]) -> None:
    out = MODELS / f"ct_{kind}"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    state = {}
    dequantized = {}
    for name, t in model.state_dict().items():
        module = name.rsplit(".", 2)[-2] if name.count(".") >= 2 else ""
        if module in LINEAR and name.endswith(".weight"):
            parts, deq = QUANTIZERS[kind](t.float())
            base = name[: -len("weight")]
            for suffix, v in parts.items():
                state[base + suffix] = v.contiguous()
            dequantized[name] = deq
        else:
            state[name] = t.to(torch.bfloat16).contiguous()
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["dtype"] = "bfloat16"
    config["quantization_config"] = quant_config(kind)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    model.generation_config.to_json_file(out / "generation_config.json")
    for p in out.iterdir():
        p.chmod(0o644)

    # transformers + compressed-tensors decompress the files to what tpserve reads from them.
    loaded = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32,
                                                  quantization_config=CompressedTensorsConfig(dequantize=True))
    sd = loaded.state_dict()
    worst = 0.0
    for name, deq in dequantized.items():
        got = sd[name].float()
        # The decompressor multiplies in the scale's dtype (bf16 scales: one bf16 rounding).
        tol = 0 if kind == "fp8_block" else 2 ** -8
        err = ((got - deq).abs() / deq.abs().clamp_min(1e-30)).max().item()
        worst = max(worst, err)
        assert err <= tol, f"{kind}: {name} decompressed differs from scale * value by {err} (tolerance {tol})"

    # Reference: transformers' fp32 forward with the weights exactly dequantized (fp32 products).
    ref_model = LlamaForCausalLM(model.config)
    ref_model.load_state_dict({n: (dequantized[n] if n in dequantized else t.to(torch.bfloat16).float())
                               for n, t in model.state_dict().items()})
    ref_model.set_attn_implementation("eager")
    ref_model.eval()
    ref = compute_reference(ref_model, prompt_ids)
    top2 = np.sort(ref["greedy_logits"], axis=-1)[:, -2:]
    assert float((top2[:, 1] - top2[:, 0]).min()) > 1e-3, f"{kind}: greedy margin too small"
    write_reference(out / "reference.json", dict(arch="llama", prompt_ids=prompt_ids,
                                                 dtype_on_disk=f"compressed-tensors {kind}",
                                                 transformers_version=transformers.__version__, **ref))
    size = sum(p.stat().st_size for p in out.iterdir()) / 1024
    print(f"ct_{kind}: {size:.0f} KiB; decompressed vs scale*value worst rel {worst:.2e}; greedy {ref['greedy_ids']}")


def main() -> int:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    model = build()
    rng = np.random.RandomState(SEED)
    prompt_ids = [int(rng.randint(2, model.config.vocab_size)) for _ in range(PROMPT_LEN)]
    for kind in QUANTIZERS:
        make(kind, model, prompt_ids)
    return 0


if __name__ == "__main__":
    sys.exit(main())
