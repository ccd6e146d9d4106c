#!/usr/bin/env python3
"""Build tiny random-weight Hugging Face checkpoints plus reference outputs.

For every fixture this writes ``tests/fixtures/models/<name>/`` containing what
``save_pretrained`` puts in a real checkpoint directory (config.json,
generation_config.json, *.safetensors [+ model.safetensors.index.json]) and a
``reference.json`` with the logits transformers computes for a fixed prompt and
for greedy decoding.  The C++ engine is tested against these files.

Deterministic (fixed seeds, one CPU thread) and idempotent: every fixture
directory is deleted and rewritten, and re-running produces identical bytes.

Usage:
    python tools/make_model_fixtures.py            # all fixtures
    python tools/make_model_fixtures.py qwen3 ...  # a subset
    python tools/make_model_fixtures.py --out DIR  # somewhere else
"""

from __future__ import annotations

import argparse
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
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    Gemma4Config,
    Gemma4ForCausalLM,
    Gemma4ForConditionalGeneration,
    Gemma4TextConfig,
    Gemma4VisionConfig,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "models"

PROMPT_LEN = 24
NEW_TOKENS = 8
MIN_DISTINCT_GREEDY = 4

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# --------------------------------------------------------------------------------------
# Random weights
# --------------------------------------------------------------------------------------


def randomize_weights(model: torch.nn.Module, seed: int, *, gemma3_norm: bool = False,
                      embed_std: float = 0.5, proj_gain: float = 1.0, head_gain: float = 3.0,
                      bias_std: float = 0.1, norm_means: dict | None = None) -> None:
    """Overwrite every persistent tensor of the model with seeded random values.

    * projections (2-D ``*.weight``): normal, std = gain / sqrt(fan_in)
    * embeddings: normal, std = ``embed_std``
    * untied lm_head: normal, std = head_gain / sqrt(hidden)
    * RMSNorm weights: ``1 + 0.1 * randn`` (plain ``x * w`` norms), or ``0.1 * randn``
      for Gemma 3 style ``x * (1 + w)`` norms, so neither formula hides behind an
      identity init
    * biases: normal, std = ``bias_std``
    * Gemma 4 ``layer_scalar`` buffers: uniform(0.5, 1.5)

    Tensors are visited in sorted-name order with one generator, so the result
    depends only on the seed and the architecture.
    """
    gen = torch.Generator().manual_seed(seed)
    tensors = dict(model.state_dict(keep_vars=True))  # params + persistent buffers, tied ones once
    seen = set()
    # Visit lm_head last so a tied lm_head.weight is initialized as the embedding it aliases.
    for name in sorted(tensors, key=lambda n: (n.startswith("lm_head"), n)):
        t = tensors[name]
        if id(t) in seen:
            continue
        seen.add(id(t))
        shape = tuple(t.shape)
        leaf = name.rsplit(".", 1)[-1]
        mod_name = name.rsplit(".", 1)[0] if "." in name else ""
        if leaf == "layer_scalar":
            new = torch.rand(shape, generator=gen) + 0.5
        elif leaf == "bias":
            new = torch.randn(shape, generator=gen) * bias_std
        elif len(shape) == 1 and ("norm" in mod_name or leaf in ("scale", "std_scale")):
            mean = next((v for k, v in (norm_means or {}).items() if k in mod_name), 1.0)
            noise = torch.randn(shape, generator=gen) * 0.1 * mean
            # Gemma 3 norms compute x * (1 + w): store w = mean - 1 + noise.
            new = (mean - 1.0 + noise) if gemma3_norm else (mean + noise)
        elif "embed_tokens" in mod_name or "position_embedding" in name:
            new = torch.randn(shape, generator=gen) * embed_std
        elif mod_name.endswith("lm_head"):
            new = torch.randn(shape, generator=gen) * (head_gain / math.sqrt(shape[-1]))
        elif len(shape) >= 2:
            fan_in = int(np.prod(shape[1:]))
            new = torch.randn(shape, generator=gen) * (proj_gain / math.sqrt(fan_in))
        elif len(shape) == 1:
            new = torch.randn(shape, generator=gen) * 0.1
        else:  # scalar buffers (clipping bounds etc.): leave as initialized
            continue
        with torch.no_grad():
            t.copy_(new.to(t.dtype))


# --------------------------------------------------------------------------------------
# Fixture definitions
# --------------------------------------------------------------------------------------

# Gemma 4 tiny text config mirroring google/gemma-4-31B(-it) text_config:
#   60 layers = ([sliding]*5 + [full]) * 10, hidden 5376, 32 q heads, sliding: head_dim 256 /
#   16 kv heads, full: global_head_dim 512 / num_global_key_value_heads 4 / attention_k_eq_v,
#   rope sliding default theta 1e4, full proportional p=0.25 theta 1e6, window 1024,
#   softcap 30, tied embeddings, no PLE (hidden_size_per_layer_input 0), no MoE, no KV sharing.
GEMMA4_GLOBAL_HEAD_DIM = 32
GEMMA4_NUM_GLOBAL_KV_HEADS = 2
GEMMA4_TEXT_KWARGS = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=6,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=16,
    global_head_dim=GEMMA4_GLOBAL_HEAD_DIM,
    num_global_key_value_heads=GEMMA4_NUM_GLOBAL_KV_HEADS,
    attention_k_eq_v=True,
    hidden_activation="gelu_pytorch_tanh",
    max_position_embeddings=262144,
    rms_norm_eps=1e-6,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
    tie_word_embeddings=True,
    attention_bias=False,
    attention_dropout=0.0,
    sliding_window=8,
    layer_types=["sliding_attention"] * 5 + ["full_attention"],
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                           "rope_theta": 1000000.0},
    },
    final_logit_softcapping=30.0,
    use_bidirectional_attention="vision",
    hidden_size_per_layer_input=0,
    vocab_size_per_layer_input=512,
    num_kv_shared_layers=0,
    enable_moe_block=False,
    use_double_wide_mlp=False,
)


def _gemma4_text_config():
    return Gemma4TextConfig(**GEMMA4_TEXT_KWARGS)


def build_gemma4_text():
    return Gemma4ForCausalLM(_gemma4_text_config())


def build_gemma4_multimodal():
    """Same text weights as gemma4_text (rounded to bf16 on disk), plus a tiny vision tower."""
    vision = Gemma4VisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        patch_size=4,
        pooling_kernel_size=3,
        position_embedding_size=16,
        max_position_embeddings=1024,
    )
    config = Gemma4Config(text_config=_gemma4_text_config(), vision_config=vision, audio_config=None,
                          tie_word_embeddings=True)
    model = Gemma4ForConditionalGeneration(config)
    # Random vision tower / embedder first, then overwrite the language model with gemma4_text's.
    randomize_weights(model, FIXTURES["gemma4_multimodal"]["seed"], **FIXTURES["gemma4_multimodal"]["init"])
    text = FIXTURES["gemma4_text"]
    torch.manual_seed(text["seed"])
    text_model = text["build"]()
    randomize_weights(text_model, text["seed"], **text["init"])
    missing, unexpected = model.model.language_model.load_state_dict(text_model.model.state_dict(), strict=True)
    assert not missing and not unexpected
    return model


def build_gemma3_text():
    config = Gemma3TextConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # != hidden/heads
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        tie_word_embeddings=True,
        query_pre_attn_scalar=24,  # != head_dim, so using head_dim**-0.5 is caught
        sliding_window=8,
        sliding_window_pattern=6,  # legacy field -> layer_types [s,s,s,s,s,f]
        rope_theta=1000000.0,
        rope_local_base_freq=10000.0,
        rope_scaling={"rope_type": "linear", "factor": 8.0},
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
    )
    return Gemma3ForCausalLM(config)


def build_llama3():
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            # head_dim 16 -> wavelengths 6.3, 32.6, 169, ...: one frequency kept, one
            # interpolated (16 < wl < 64), the rest divided by the factor.
            "original_max_position_embeddings": 64,
        },
    )
    return LlamaForCausalLM(config)


def build_qwen2():
    config = Qwen2Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        bos_token_id=1,
        eos_token_id=1,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        use_sliding_window=False,
    )
    return Qwen2ForCausalLM(config)


def build_qwen3():
    config = Qwen3Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # heads * head_dim = 128 != hidden 64
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        bos_token_id=1,
        eos_token_id=1,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        attention_bias=False,
        use_sliding_window=False,
    )
    return Qwen3ForCausalLM(config)


def build_llama3_attn_bias():
    """attention_bias: true puts a bias on q/k/v and on o_proj (the row-parallel one)."""
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        attention_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    return LlamaForCausalLM(config)


def build_gemma3_attn_bias():
    config = Gemma3TextConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        tie_word_embeddings=True,
        attention_bias=True,
        query_pre_attn_scalar=24,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        rope_theta=1000000.0,
        rope_local_base_freq=10000.0,
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
    )
    return Gemma3ForCausalLM(config)


# Tied embeddings + random weights make the final hidden state point at the input token's
# own embedding (greedy then repeats the last token).  Keep the embedding small in the
# residual stream and scale the post-sublayer / final norms up instead, so logits stay
# large (softcap matters) and greedy decoding stays varied.
GEMMA_NORM_MEANS = {"post_attention_layernorm": 3.0, "post_feedforward_layernorm": 3.0, "model.norm": 3.0,
                    "language_model.norm": 3.0}
# Gemma 4 scales q·k by 1.0 (its q/k norms stand in for 1/sqrt(head_dim)): with q/k norm
# weights near 1 the attention scores have std sqrt(head_dim) = 4 to 6, attention is near
# one-hot, and one flipped bf16 rounding moved the logits by up to 1.1
# (tests/rounding_envelope_test.cc; the other fixtures: 0.11 to 0.21). q/k norm weights of
# mean 0.5 give scores of std ~1 (as Gemma 3's query_pre_attn_scalar does), a final norm of
# mean 1.5 the other fixtures' logit scale (max 11: the softcap still moves it by 0.6).
# Post norms of mean 2.5 and seed 4005 keep both fixtures' greedy tokens varied.
GEMMA4_INIT = dict(embed_std=0.2, norm_means={"post_attention_layernorm": 2.5, "post_feedforward_layernorm": 2.5,
                                              "model.norm": 1.5, "language_model.norm": 1.5,
                                              "q_norm": 0.5, "k_norm": 0.5})

FIXTURES = {
    # build: returns the model; cls: class used to reload it; seed: weights + prompt seed;
    # dtype: dtype on disk; shard: max_shard_size; init: randomize_weights() kwargs.
    "gemma4_text": dict(build=build_gemma4_text, cls=Gemma4ForCausalLM, seed=4005, dtype="float32",
                        init=GEMMA4_INIT),
    "gemma4_multimodal": dict(build=build_gemma4_multimodal, cls=Gemma4ForConditionalGeneration,
                              seed=4002, dtype="bfloat16", shard="300KB", randomized_by_builder=True,
                              init=GEMMA4_INIT),
    "gemma3_text": dict(build=build_gemma3_text, cls=Gemma3ForCausalLM, seed=3001, dtype="float32",
                        init=dict(gemma3_norm=True, embed_std=0.1, norm_means=GEMMA_NORM_MEANS)),
    "llama3": dict(build=build_llama3, cls=LlamaForCausalLM, seed=1001, dtype="float32",
                   init=dict(embed_std=0.5, head_gain=3.0)),
    "qwen2": dict(build=build_qwen2, cls=Qwen2ForCausalLM, seed=2001, dtype="float16",
                  init=dict(embed_std=0.1, bias_std=0.1, proj_gain=1.5, norm_means={"model.norm": 4.0})),
    "qwen3": dict(build=build_qwen3, cls=Qwen3ForCausalLM, seed=2002, dtype="float32",
                  init=dict(embed_std=0.5, head_gain=3.0)),
    # attention_bias: true. bf16 on disk and 2 layers keep them small; biases of std 0.3
    # are large enough that leaving out o_proj.bias (or adding it once per rank) fails.
    "llama3_attn_bias": dict(build=build_llama3_attn_bias, cls=LlamaForCausalLM, seed=1002, dtype="bfloat16",
                             init=dict(embed_std=0.5, head_gain=3.0, bias_std=0.3)),
    "gemma3_attn_bias": dict(build=build_gemma3_attn_bias, cls=Gemma3ForCausalLM, seed=3011, dtype="bfloat16",
                             init=dict(gemma3_norm=True, embed_std=0.1, bias_std=0.3, norm_means=GEMMA_NORM_MEANS)),
}


# --------------------------------------------------------------------------------------
# Gemma 4 config.json: write the field names the published checkpoints use
# --------------------------------------------------------------------------------------


def gemma4_text_config_to_hub_form(text: dict) -> dict:
    """transformers 5.24 serializes the full-attention overrides as
    ``"per_layer_config": {"5": {"head_dim": G, "num_key_value_heads": K}}``.
    The published Gemma 4 checkpoints (google/gemma-4-31B-it) instead carry
    ``global_head_dim`` / ``num_global_key_value_heads`` and no per_layer_config;
    Gemma4TextConfig.__post_init__ turns those back into the per-layer overrides on load.
    Rewrite to the published form (checked by reloading)."""
    text = dict(text)
    plc = text.pop("per_layer_config", None)
    expected = {str(i): {"head_dim": GEMMA4_GLOBAL_HEAD_DIM,
                         "num_key_value_heads": GEMMA4_NUM_GLOBAL_KV_HEADS}
                for i, t in enumerate(text["layer_types"]) if t == "full_attention"}
    assert plc == expected, f"unexpected per_layer_config {plc}"
    text["global_head_dim"] = GEMMA4_GLOBAL_HEAD_DIM
    text["num_global_key_value_heads"] = GEMMA4_NUM_GLOBAL_KV_HEADS
    return text


def rewrite_gemma4_config(path: Path, multimodal: bool) -> None:
    cfg = json.loads(path.read_text())
    if multimodal:
        cfg["text_config"] = gemma4_text_config_to_hub_form(cfg["text_config"])
    else:
        cfg = gemma4_text_config_to_hub_form(cfg)
    # Same formatting as PreTrainedConfig.to_json_file.
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------------------
# Reference computation
# --------------------------------------------------------------------------------------


def fmt_row(values: np.ndarray) -> str:
    assert values.dtype == np.float32
    assert np.all(np.isfinite(values)), "non-finite logits"
    return "[" + ",".join(format(float(v), ".9g") for v in values) + "]"


def fmt_matrix(m: np.ndarray) -> str:
    return "[\n    " + ",\n    ".join(fmt_row(r) for r in m) + "\n  ]"


def write_reference(path: Path, ref: dict) -> None:
    parts = [
        f'  "arch": {json.dumps(ref["arch"])}',
        f'  "prompt_ids": {json.dumps(ref["prompt_ids"])}',
        f'  "prompt_logits": {fmt_matrix(ref["prompt_logits"])}',
        f'  "greedy_ids": {json.dumps(ref["greedy_ids"])}',
        f'  "greedy_logits": {fmt_matrix(ref["greedy_logits"])}',
        f'  "dtype_on_disk": {json.dumps(ref["dtype_on_disk"])}',
        f'  "transformers_version": {json.dumps(ref["transformers_version"])}',
    ]
    path.write_text("{\n" + ",\n".join(parts) + "\n}\n")


def text_config_of(config):
    return config.get_text_config(decoder=True)


@torch.no_grad()
def compute_reference(model, prompt_ids: list[int]) -> dict:
    tcfg = text_config_of(model.config)
    ids = torch.tensor([prompt_ids], dtype=torch.long)

    prompt_logits = model(input_ids=ids, use_cache=False).logits[0].float().numpy()

    gen_cfg = GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=0,
        eos_token_id=None,
        pad_token_id=tcfg.pad_token_id if tcfg.pad_token_id is not None else 0,
        bos_token_id=None,
        temperature=None,
        top_p=None,
        top_k=None,
    )
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        generation_config=gen_cfg,
        output_logits=True,
        return_dict_in_generate=True,
        use_cache=True,
    )
    greedy_ids = out.sequences[0, len(prompt_ids):].tolist()
    greedy_logits = torch.cat(out.logits, dim=0).float().numpy()
    assert len(greedy_ids) == NEW_TOKENS and greedy_logits.shape == (NEW_TOKENS, tcfg.vocab_size)

    # Consistency: raw logits -> argmax is the emitted token (no processor interfered).
    assert greedy_logits.argmax(-1).tolist() == greedy_ids, "greedy ids != argmax(raw logits)"
    # The first generated step equals the last prompt position of the full forward.
    np.testing.assert_allclose(greedy_logits[0], prompt_logits[-1], rtol=0, atol=2e-3)
    # KV-cached decoding equals a cache-free forward over prompt + generated tokens.
    full = torch.tensor([prompt_ids + greedy_ids[:-1]], dtype=torch.long)
    full_logits = model(input_ids=full, use_cache=False).logits[0, len(prompt_ids) - 1:].float().numpy()
    np.testing.assert_allclose(greedy_logits, full_logits, rtol=0, atol=2e-3)

    return dict(prompt_logits=prompt_logits.astype(np.float32),
                greedy_ids=[int(t) for t in greedy_ids],
                greedy_logits=greedy_logits.astype(np.float32))


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def make_fixture(name: str, spec: dict, out_root: Path) -> None:
    out = out_root / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    torch.manual_seed(spec["seed"])
    model = spec["build"]()
    if not spec.get("randomized_by_builder"):
        randomize_weights(model, spec["seed"], **spec.get("init", {}))
    model.eval()

    dtype_name = spec["dtype"]
    save_kwargs = {}
    if "shard" in spec:
        save_kwargs["max_shard_size"] = spec["shard"]
    model.to(DTYPES[dtype_name]).save_pretrained(out, **save_kwargs)
    for p in out.iterdir():
        p.chmod(0o644)  # safetensors files are written 0600
    if name.startswith("gemma4"):
        rewrite_gemma4_config(out / "config.json", multimodal=name == "gemma4_multimodal")

    # Reference = what transformers computes from the files on disk, upcast to float32.
    reloaded, info = spec["cls"].from_pretrained(
        out, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}  # missing/unexpected/mismatched keys, errors
    assert not problems, f"{name}: loading issues {problems}"
    reloaded.eval()
    tcfg = text_config_of(reloaded.config)

    if name.startswith("gemma4"):
        layers = (reloaded.model.language_model if name == "gemma4_multimodal" else reloaded.model).layers
        for i, (layer, lt) in enumerate(zip(layers, tcfg.layer_types)):
            attn = layer.self_attn
            if lt == "full_attention":
                assert attn.head_dim == GEMMA4_GLOBAL_HEAD_DIM and attn.v_proj is None
                assert attn.k_proj.out_features == GEMMA4_NUM_GLOBAL_KV_HEADS * GEMMA4_GLOBAL_HEAD_DIM
            else:
                assert attn.head_dim == GEMMA4_TEXT_KWARGS["head_dim"] and attn.v_proj is not None
    if hasattr(tcfg, "sliding_window") and name.startswith("gemma"):
        assert tcfg.sliding_window < PROMPT_LEN, f"{name}: sliding window must be < prompt length"

    vocab = tcfg.vocab_size
    rng = np.random.RandomState(spec["seed"])
    avoid = {t for t in (tcfg.pad_token_id,) if t is not None}
    prompt_ids = []
    while len(prompt_ids) < PROMPT_LEN:
        t = int(rng.randint(2, vocab))
        if t not in avoid:
            prompt_ids.append(t)

    ref = compute_reference(reloaded, prompt_ids)

    # fp32 on disk: the reloaded model must reproduce the in-memory one exactly.
    if dtype_name == "float32":
        model.set_attn_implementation("eager")
        with torch.no_grad():
            orig = model(input_ids=torch.tensor([prompt_ids]), use_cache=False).logits[0].numpy()
        diff = np.abs(orig - ref["prompt_logits"]).max()
        assert diff == 0.0, f"{name}: reload changed logits by {diff}"

    distinct = len(set(ref["greedy_ids"]))
    top2 = np.sort(ref["greedy_logits"], axis=-1)[:, -2:]
    margin = float((top2[:, 1] - top2[:, 0]).min())
    # Greedy tokens must not hinge on float32 rounding.
    assert margin > 1e-3, f"{name}: greedy top-1/top-2 margin too small ({margin})"
    assert distinct >= MIN_DISTINCT_GREEDY, f"{name}: greedy ids too repetitive {ref['greedy_ids']}"

    write_reference(out / "reference.json", dict(
        arch=tcfg.model_type if name != "gemma4_multimodal" else reloaded.config.model_type,
        prompt_ids=prompt_ids,
        dtype_on_disk=dtype_name,
        transformers_version=transformers.__version__,
        **ref,
    ))

    files = sorted(p.name for p in out.iterdir())
    pl = ref["prompt_logits"]
    print(f"{name:18s} {dir_size(out) / 1024:8.1f} KiB  files={files}")
    print(f"{'':18s} greedy={ref['greedy_ids']} distinct={distinct} "
          f"greedy min top1-top2 margin={margin:.4f} logit std={pl.std():.3f} max|.|={np.abs(pl).max():.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help=f"fixtures to build (default: all of {list(FIXTURES)})")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)

    names = args.names or list(FIXTURES)
    unknown = [n for n in names if n not in FIXTURES]
    if unknown:
        ap.error(f"unknown fixtures {unknown}")

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    args.out.mkdir(parents=True, exist_ok=True)
    total = 0
    for name in names:
        make_fixture(name, FIXTURES[name], args.out)
        total += dir_size(args.out / name)
    print(f"total {total / 1024 / 1024:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
