#!/usr/bin/env python3
"""Writes tiny GGUF model files for tests/model_test.cc (Gguf/*) and tests/gguf_test.cc, laid
out as llama.cpp's convert_hf_to_gguf.py lays out each family, from the tiny Hugging Face
fixtures.

For every fixture this writes tests/fixtures/gguf/models/<name>.gguf:
  * llama3, qwen2, qwen3: the weights of tests/fixtures/models/<name>/ (the safetensors
    fixture) in the checkpoint's own float type (F32, or F16 for qwen2). Their reference is
    that fixture's reference.json (transformers' logits on the same numbers).
  * llama3_quant: llama3's weights block-quantized to a mix of Q8_0/Q4_0/Q5_0/Q4_1/Q5_1
    (llama3_quant_types); tests/model_test.cc compares it kept quantized with the same file
    widened at load.
  * llama_kquant: a new 2-layer Llama with 256-wide rows (random weights, seeded; no
    transformers reference) in Q3_K and Q2_K blocks (llama_kquant_fixture), which the tiny
    fixtures' 64/128-wide rows cannot hold; compared the same way. gguf-py quantizes no
    K-quant, so quantize_q2_k / quantize_q3_k write the blocks (plain amax scales, not
    llama.cpp's search), checked against gguf.quants.dequantize.
  * gemma4: the weights of tests/fixtures/models/gemma4_text/ (F32, as the checkpoint), laid
    out as llama.cpp's Gemma 4 converter lays them out (conversion/gemma.py Gemma4Model at
    ggml-org/llama.cpp 061b8c5f; see write_gemma4_gguf). Its reference is gemma4_text's.
  * gemma3: a new tiny Gemma 3 (transformers, seeded) whose config a GGUF file can express
    (query_pre_attn_scalar == head_dim, as llama.cpp assumes), with its reference.json
    (tests/fixtures/gguf/models/gemma3.reference.json) computed as make_model_fixtures.py
    computes the others.
What llama.cpp's converter does to tensors is done here too, so that the loader must undo
it: Gemma 3's RMSNorm weights are stored as 1 + w; Llama's q/k projection rows are
interleaved per head for ggml's rotary layout; Llama 3's rope scaling becomes the
rope_freqs.weight tensor; Gemma 4's norms are stored as they are, its layer_scalar becomes
blk.N.layer_output_scale.weight and its full layers' proportional RoPE the rope_freqs.weight
tensor. The gemma3 file carries general.sampling.top_k/top_p (sampling defaults, as the
converter writes them from generation_config.json). Each file also carries a small
SentencePiece-style vocabulary (byte tokens and filler pieces) so that `tpserve generate
--prompt` can run on it; the gemma4 file carries the converter's "gemma4" (BPE) vocabulary
layout instead.

Usage: /work/tools-venv/bin/python tools/make_gguf_model_fixtures.py [--out DIR] [--only NAME,...]
Requires: gguf, numpy, safetensors, torch, transformers. Deterministic.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

REPO_ROOT = Path(__file__).resolve().parent.parent
MODELS = REPO_ROOT / "tests" / "fixtures" / "models"
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "gguf" / "models"

HF_TO_GGUF_LAYER = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
}
LLAMA_LIKE_NORMS = {"post_attention_layernorm": "ffn_norm"}
GEMMA_NORMS = {
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}


def gguf_name(arch: str, hf: str) -> str:
    hf = hf.removeprefix("model.")
    top = {"embed_tokens.weight": "token_embd.weight", "norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    parts = hf.split(".")
    assert parts[0] == "layers", hf
    layer, module, leaf = parts[1], ".".join(parts[2:-1]), parts[-1]
    table = dict(HF_TO_GGUF_LAYER, **(GEMMA_NORMS if arch == "gemma3" else LLAMA_LIKE_NORMS))
    return f"blk.{layer}.{table[module]}.{leaf}"


def permute_llama(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute: per head, rows (i, i + d/2) become adjacent."""
    shape = w.shape
    return w.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def llama3_rope_factors(rope: dict, head_dim: int) -> np.ndarray:
    """What convert_hf_to_gguf stores as rope_freqs.weight for rope_type llama3."""
    base = rope["rope_theta"]
    factor = rope.get("factor", 8.0)
    low, high = rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    old_len = rope.get("original_max_position_embeddings", 8192)
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wavelen, high_wavelen = old_len / low, old_len / high
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def add_vocab(w: gguf.GGUFWriter, arch: str, vocab_size: int, bos: int, eos: int) -> None:
    """A SentencePiece-style vocabulary: the family's special tokens (Gemma: <pad> <eos> <bos>
    <unk> <mask>; else <unk> <s> </s>), the 256 byte tokens, filler pieces."""
    if arch == "gemma3":
        tokens, scores, types = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"], [0.0] * 5, [3, 3, 3, 2, 3]
        bos, eos = 2, 1
    else:
        tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 0
    while len(tokens) < vocab_size:
        piece = ("\u2581" if i % 2 == 0 else "") + letters[i % 26] + letters[(i // 26) % 26]
        if piece not in tokens:
            tokens.append(piece)
            scores.append(-float(len(tokens)))
            types.append(1)
        i += 1
    assert len(tokens) == vocab_size
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_unk_token_id(tokens.index("<unk>"))


def _f16(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float16).astype(np.float32)


def _pack_k_quants(low2: np.ndarray) -> np.ndarray:
    """[blocks, 256] values in 0..3 -> [blocks, 64] bytes: element 128h + 32t + l in bits
    2t, 2t+1 of byte 32h + l (Q2_K's and Q3_K's qs)."""
    v = low2.reshape(-1, 2, 4, 32).astype(np.uint8)
    return (v[:, :, 0] | (v[:, :, 1] << 2) | (v[:, :, 2] << 4) | (v[:, :, 3] << 6)).reshape(-1, 64)


def quantize_q2_k(x: np.ndarray) -> np.ndarray:
    """[rows, cols] fp32 -> Q2_K blocks (84 bytes: scales[16], qs[64], fp16 d, dmin) with
    x ~= (d sc) q - (dmin m) per 16 elements: each group's scale spans [min(x, 0), max(x)] in
    3 steps."""
    rows = x.shape[0]
    g = x.reshape(-1, 16, 16)  # [blocks, group, element]
    mn = np.minimum(g.min(axis=2), 0.0)
    scale = (g.max(axis=2) - mn) / 3
    d = _f16(scale.max(axis=1) / 15)
    dmin = _f16(-mn.min(axis=1) / 15)
    sc = np.clip(np.round(scale / np.where(d > 0, d, 1)[:, None]), 0, 15)
    m = np.clip(np.round(-mn / np.where(dmin > 0, dmin, 1)[:, None]), 0, 15)
    step = (d[:, None] * sc)[:, :, None]
    q = np.clip(np.round((g + (dmin[:, None] * m)[:, :, None]) / np.where(step > 0, step, 1)), 0, 3)
    out = np.concatenate([
        (sc.astype(np.uint8) | (m.astype(np.uint8) << 4)),
        _pack_k_quants(q.reshape(-1, 256)),
        d.astype(np.float16).view(np.uint8).reshape(-1, 2),
        dmin.astype(np.float16).view(np.uint8).reshape(-1, 2)], axis=1)
    return out.reshape(rows, -1)


def quantize_q3_k(x: np.ndarray) -> np.ndarray:
    """[rows, cols] fp32 -> Q3_K blocks (110 bytes: hmask[32], qs[64], scales[12], fp16 d) with
    x ~= (d (sc - 32)) q, q in [-4, 4), per 16 elements: each group's signed scale puts its
    largest magnitude at -4."""
    rows = x.shape[0]
    g = x.reshape(-1, 16, 16)
    idx = np.abs(g).argmax(axis=2)
    peak = np.take_along_axis(g, idx[:, :, None], axis=2)[:, :, 0]
    scale = -peak / 4
    d = _f16(np.abs(scale).max(axis=1) / 31)
    sc = np.clip(np.round(scale / np.where(d > 0, d, 1)[:, None]), -32, 31)
    step = (d[:, None] * sc)[:, :, None]
    q = np.clip(np.round(g / np.where(step != 0, step, 1)), -4, 3) * (step != 0)
    u = (q + 4).astype(np.uint8).reshape(-1, 256)  # 0..7
    hbits = (u >> 2).reshape(-1, 8, 32)  # element 32j + l: bit j of hmask[l]
    hmask = np.zeros((u.shape[0], 32), dtype=np.uint8)
    for j in range(8):
        hmask |= (hbits[:, j] << j).astype(np.uint8)
    s6 = (sc + 32).astype(np.uint8)  # [blocks, 16], 0..63
    packed = np.zeros((u.shape[0], 12), dtype=np.uint8)
    for i in range(16):
        packed[:, i % 8] |= ((s6[:, i] & 0x0f) << (4 * (i // 8))).astype(np.uint8)
        packed[:, 8 + i % 4] |= ((s6[:, i] >> 4) << (2 * (i // 4))).astype(np.uint8)
    out = np.concatenate([hmask, _pack_k_quants(u & 3), packed,
                          d.astype(np.float16).view(np.uint8).reshape(-1, 2)], axis=1)
    return out.reshape(rows, -1)


def quantize(t: np.ndarray, qtype: gguf.GGMLQuantizationType) -> np.ndarray:
    """gguf.quants.quantize, and quantize_q2_k / quantize_q3_k for the K-quants gguf-py cannot
    write (checked: gguf-py's dequantization of their blocks is near t)."""
    Q = gguf.GGMLQuantizationType
    if qtype not in (Q.Q2_K, Q.Q3_K):
        return gguf.quants.quantize(t, qtype)
    q = (quantize_q2_k if qtype == Q.Q2_K else quantize_q3_k)(t)
    back = gguf.quants.dequantize(q, qtype)
    err = np.sqrt(np.mean((back - t) ** 2) / np.mean(t ** 2))
    assert back.shape == t.shape and err < (0.5 if qtype == Q.Q2_K else 0.3), (qtype.name, err)
    return q


def write_gguf(path: Path, arch: str, config: dict, tensors: dict[str, np.ndarray],
               quant: dict[str, gguf.GGMLQuantizationType] | None = None) -> None:
    """quant: GGUF tensor names to store block-quantized (quantize), the rest as they are."""
    quant = quant or {}
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tpserve tiny {arch}")
    # (A set of numpy dtypes does not find np.float16 in it: dtype and type hash differently.)
    f16 = any(t.dtype == np.float16 for t in tensors.values())
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_head_count_kv(config["num_key_value_heads"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    rope = config.get("rope_parameters") or {}
    if arch == "gemma3":
        # Sampling defaults as llama.cpp's converter writes them from generation_config.json.
        w.add_uint32("general.sampling.top_k", 40)
        w.add_float32("general.sampling.top_p", 0.9)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_sliding_window(config["sliding_window"])
        full = rope.get("full_attention", {})
        w.add_rope_freq_base(full.get("rope_theta", 1000000.0))
        if full.get("rope_type") == "linear":
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(full["factor"])
    else:
        w.add_rope_freq_base(rope.get("rope_theta", config.get("rope_theta", 10000.0)))
        w.add_rope_dimension_count(head_dim)
        if arch == "qwen3":
            w.add_key_length(head_dim)
            w.add_value_length(head_dim)
    w.add_vocab_size(config["vocab_size"])
    add_vocab(w, arch, config["vocab_size"], config.get("bos_token_id") or 1, config.get("eos_token_id") or 2)

    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    if arch == "llama" and rope.get("rope_type") == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(rope, head_dim))
    for hf in sorted(tensors):
        t = tensors[hf]
        name = gguf_name(arch, hf)
        if arch == "gemma3" and name.endswith("norm.weight"):
            t = (t.astype(np.float32) + 1.0).astype(t.dtype)
        if arch == "llama" and (".attn_q." in name or ".attn_k." in name):
            t = permute_llama(t, n_head if ".attn_q." in name else n_kv)
        if t.ndim == 1 and t.dtype == np.float16:
            t = t.astype(np.float32)  # llama.cpp keeps 1-D tensors in F32
        if name in quant:
            w.add_tensor(name, quantize(np.ascontiguousarray(t, dtype=np.float32), quant[name]), raw_dtype=quant[name])
            continue
        w.add_tensor(name, np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def from_safetensors_fixture(name: str, arch: str, out: Path, file_name: str | None = None,
                             quant: dict[str, gguf.GGMLQuantizationType] | None = None) -> None:
    src = MODELS / name
    config = json.loads((src / "config.json").read_text())
    tensors = {}
    for f in sorted(src.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    write_gguf(out / (file_name or f"{name}.gguf"), arch, config, tensors, quant)


def llama3_quant_types() -> dict[str, gguf.GGMLQuantizationType]:
    """llama3_quant.gguf: the llama3 fixture with its matrices in the block types that have
    CPU kernels with 32-element blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: the tiny model's
    64/128-wide rows fit no K-quant), mixed as a quantizer mixes them, so that
    tests/model_test.cc meets each loader case: a QKV projection whose v differs (kept as two
    segments), a gate/up pair of two types (widened: one dense output), F32 norms."""
    Q = gguf.GGMLQuantizationType
    types = {"token_embd.weight": Q.Q8_0, "output.weight": Q.Q5_0}
    for i in range(4):
        layer = {
            "attn_q": Q.Q4_0, "attn_k": Q.Q4_0, "attn_v": Q.Q8_0 if i % 2 == 0 else Q.Q4_0,
            "attn_output": Q.Q5_1 if i == 3 else Q.Q5_0, "ffn_gate": Q.Q4_0,
            "ffn_up": Q.Q5_0 if i == 1 else Q.Q4_0, "ffn_down": Q.Q4_1 if i == 2 else Q.Q8_0,
        }
        types.update({f"blk.{i}.{k}.weight": v for k, v in layer.items()})
    return types


def llama_kquant_fixture(out: Path) -> None:
    """llama_kquant.gguf: a 2-layer Llama (hidden 256, intermediate 512, 4 heads of 64, 2 KV
    heads, vocab 512) with random weights (numpy, seeded; each matrix's scale 1/sqrt(its
    inputs), so that the logits spread over a few units), its matrices in Q3_K and Q2_K as a
    Q3_K_S / Q2_K quantizer mixes them: layer 0's v in Q2_K beside Q3_K q/k (two segments), a
    Q2_K down projection (512 inputs: whole blocks per rank at TP 2) and attn_output (256
    inputs: split mid-block at TP 2, so widened there), the embedding in Q3_K, the LM head in
    Q2_K."""
    rng = np.random.default_rng(31)
    hidden, inter, layers, heads, kv_heads, head_dim, vocab = 256, 512, 2, 4, 2, 64, 512
    config = {
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "vocab_size": vocab, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "bos_token_id": 1, "eos_token_id": 2,
    }

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / math.sqrt(cols)).astype(np.float32)

    tensors = {"model.embed_tokens.weight": rng.standard_normal((vocab, hidden)).astype(np.float32),
               "model.norm.weight": np.ones(hidden, dtype=np.float32),
               "lm_head.weight": 3 * matrix(vocab, hidden)}
    Q = gguf.GGMLQuantizationType
    types = {"token_embd.weight": Q.Q3_K, "output.weight": Q.Q2_K}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors.update({
            p + "self_attn.q_proj.weight": matrix(heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": matrix(kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": matrix(kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": matrix(hidden, heads * head_dim),
            p + "mlp.gate_proj.weight": matrix(inter, hidden),
            p + "mlp.up_proj.weight": matrix(inter, hidden),
            p + "mlp.down_proj.weight": matrix(hidden, inter),
            p + "input_layernorm.weight": (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32),
            p + "post_attention_layernorm.weight": (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32),
        })
        layer = {"attn_q": Q.Q3_K, "attn_k": Q.Q3_K, "attn_v": Q.Q2_K if i == 0 else Q.Q3_K,
                 "attn_output": Q.Q2_K, "ffn_gate": Q.Q3_K, "ffn_up": Q.Q3_K,
                 "ffn_down": Q.Q2_K if i == 0 else Q.Q3_K}
        types.update({f"blk.{i}.{k}.weight": v for k, v in layer.items()})
    write_gguf(out / "llama_kquant.gguf", "llama", config, tensors, types)


def gemma3_fixture(out: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import make_model_fixtures as mmf  # noqa: E402  (torch and transformers)
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    def build():
        return Gemma3ForCausalLM(Gemma3TextConfig(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, hidden_activation="gelu_pytorch_tanh",
            max_position_embeddings=4096, rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=2, bos_token_id=1,
            tie_word_embeddings=True, query_pre_attn_scalar=32, sliding_window=8, sliding_window_pattern=6,
            rope_theta=1000000.0, rope_local_base_freq=10000.0, rope_scaling={"rope_type": "linear", "factor": 8.0},
            final_logit_softcapping=None, attn_logit_softcapping=None))

    spec = dict(mmf.FIXTURES["gemma3_text"], build=build, seed=3101)
    with tempfile.TemporaryDirectory() as tmp:
        mmf.make_fixture("gemma3", spec, Path(tmp))
        src = Path(tmp) / "gemma3"
        config = json.loads((src / "config.json").read_text())
        tensors = load_file(str(src / "model.safetensors"))
        write_gguf(out / "gemma3.gguf", "gemma3", config, tensors)
        (out / "gemma3.reference.json").write_text((src / "reference.json").read_text())


def add_gemma4_vocab(w: gguf.GGUFWriter, vocab_size: int) -> None:
    """Gemma4Model.set_vocab's layout: tokenizer.ggml.model "gemma4", the tokens of tokenizer.json
    (LlamaHfVocab: every score -1000, byte tokens BYTE, special tokens CONTROL), its BPE merges
    and special token ids (SpecialVocab), add_space_prefix false, add_bos_token true. A tiny BPE
    vocabulary: Gemma's <pad> <eos> <bos> <unk> <mask>, the 256 byte tokens, "\u2581" and the
    letters, then pieces of two made by merges."""
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    types = [gguf.TokenType.CONTROL] * len(tokens)
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    singles = ["\u2581"] + list("abcdefghijklmnopqrstuvwxyz")
    tokens += singles
    types += [gguf.TokenType.NORMAL] * len(singles)
    merges = []
    for a in singles:
        for b in singles[1:]:
            if len(tokens) == vocab_size:
                break
            tokens.append(a + b)
            types.append(gguf.TokenType.NORMAL)
            merges.append(f"{a} {b}")
    assert len(tokens) == vocab_size
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_scores([-1000.0] * vocab_size)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)


def write_gemma4_gguf(path: Path, config: dict, tensors: dict[str, np.ndarray]) -> None:
    """What llama.cpp's converter writes for a dense Gemma 4 text checkpoint (ggml-org/llama.cpp
    conversion/gemma.py at 061b8c5f: Gemma4Model.set_gguf_parameters over Gemma3Model's and
    TextModel's, whose last write of a key stands; generate_extra_tensors; filter_tensors and
    modify_tensors; TextModel/ModelBase in conversion/base.py at 00bd27a6), with --outtype
    following the checkpoint's float type and 1-D tensors and norms in F32 (prepare_tensors)."""
    n_layers = config["num_hidden_layers"]
    rope = config["rope_parameters"]
    swa_layers = [t == "sliding_attention" for t in config["layer_types"]]
    head_dim_full, head_dim_swa = config["global_head_dim"], config["head_dim"]
    w = gguf.GGUFWriter(str(path), "gemma4")
    w.add_name("tpserve tiny gemma4")
    f16 = any(t.dtype == np.float16 for t in tensors.values())
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    w.add_block_count(n_layers)
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    # TextModel: rope_type "proportional" is no GGUF scaling type, so no scaling is written.
    w.add_rope_freq_base(rope["full_attention"]["rope_theta"])
    w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    # Gemma3Model
    if config.get("final_logit_softcapping"):
        w.add_final_logit_softcapping(config["final_logit_softcapping"])
    w.add_sliding_window(config["sliding_window"])
    # Gemma4Model
    w.add_shared_kv_layers(config["num_kv_shared_layers"])
    w.add_embedding_length_per_layer_input(config.get("hidden_size_per_layer_input") or 0)
    w.add_sliding_window_pattern(swa_layers)
    w.add_key_length(head_dim_full)
    w.add_value_length(head_dim_full)
    w.add_key_length_swa(head_dim_swa)
    w.add_value_length_swa(head_dim_swa)
    if config.get("num_global_key_value_heads") is not None:
        w.add_head_count_kv([config["num_key_value_heads"] if s else config["num_global_key_value_heads"]
                             for s in swa_layers])
    else:
        w.add_head_count_kv(config["num_key_value_heads"])
    w.add_rope_dimension_count(head_dim_full)
    w.add_rope_dimension_count_swa(head_dim_swa)  # partial_rotary_factor 1 on sliding layers
    add_gemma4_vocab(w, config["vocab_size"])

    # generate_extra_tensors: the full layers' proportional RoPE as divisors of a whole-head
    # rotation: 1 for each rotated frequency, 1e30 (no rotation) for the rest.
    full = rope["full_attention"]
    assert full["rope_type"] == "proportional"
    n_rot = int(head_dim_full * full["partial_rotary_factor"] / 2)
    w.add_tensor("rope_freqs.weight",
                 np.array([1.0] * n_rot + [1e30] * (head_dim_full // 2 - n_rot), dtype=np.float32))
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA4, n_layers)
    for hf in sorted(tensors):
        t = tensors[hf]
        if hf.endswith("layer_scalar"):
            hf += ".weight"  # filter_tensors
        name = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        assert name is not None, hf
        if t.ndim <= 1 or name.endswith("_norm.weight"):
            t = t.astype(np.float32)  # norms as they are: Gemma4Model.norm_shift is 0
        w.add_tensor(name, np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gemma4_fixture(out: Path) -> None:
    src = MODELS / "gemma4_text"
    config = json.loads((src / "config.json").read_text())
    write_gemma4_gguf(out / "gemma4.gguf", config, load_file(str(src / "model.safetensors")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    fixtures = {name: (lambda name=name, arch=arch: from_safetensors_fixture(name, arch, args.out))
                for name, arch in [("llama3", "llama"), ("qwen2", "qwen2"), ("qwen3", "qwen3")]}
    fixtures["llama3_quant"] = lambda: from_safetensors_fixture("llama3", "llama", args.out, "llama3_quant.gguf",
                                                                llama3_quant_types())
    fixtures["llama_kquant"] = lambda: llama_kquant_fixture(args.out)
    fixtures["gemma3"] = lambda: gemma3_fixture(args.out)
    fixtures["gemma4"] = lambda: gemma4_fixture(args.out)
    only = [n for n in args.only.split(",") if n]
    for name in only:
        if name not in fixtures:
            ap.error(f"--only: no fixture {name!r} (there are {', '.join(fixtures)})")
    for name, make in fixtures.items():
        if not only or name in only:
            make()
    for p in sorted(args.out.iterdir()):
        print(f"{p.name:28s} {p.stat().st_size / 1024:8.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
