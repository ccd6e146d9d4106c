#!/usr/bin/env python3
"""Random-weight Hugging Face checkpoints in the shapes the CPU benchmarks use, for
bench/cpu_peers.sh (tpserve, PyTorch and llama.cpp on the same weights) and for measuring
peak memory at load.

Shapes:
  llama-3.2-1b  Llama 3.2 1B's (hidden 2048, 16 layers, 32/8 heads of 64, MLP 8192,
                vocab 128256, tied embeddings, llama3 RoPE): 1.24 B parameters
  gemma-4-1b    tpserve's built-in gemma-4-1b preset (worker/presets.cc): 1.0 B parameters
  tiny-llama    a few MB, for tests

Each directory gets config.json, model.safetensors (bf16, as save_pretrained writes it) and
a tokenizer (tokenizer.json: a Llama-2-style byte-fallback BPE whose vocabulary is the byte
tokens and fillers, exactly vocab_size entries, so llama.cpp's converter accepts it and a
GGUF's vocabulary matches its embedding). Prompts are meant to be token ids; the text a
filler token stands for means nothing.

Deterministic for a given seed. Usage:
  /work/tools-venv/bin/python tools/make_bench_checkpoints.py --shape llama-3.2-1b --out DIR
Requires: torch, transformers, tokenizers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0..3: pad, eos, bos, unk


def llama_config(vocab=128256, hidden=2048, inter=8192, layers=16, heads=32, kv=8, max_pos=131072):
    from transformers import LlamaConfig
    return LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=hidden // heads,
        max_position_embeddings=max_pos, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=2, eos_token_id=1, pad_token_id=0, hidden_act="silu",
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        dtype="bfloat16")


def gemma4_1b_config():
    # worker/presets.cc kGemma4_1B, with the 31B preset's RoPE.
    from transformers import Gemma4TextConfig
    return Gemma4TextConfig(
        vocab_size=262144, hidden_size=1536, intermediate_size=8192, num_hidden_layers=12,
        num_attention_heads=8, num_key_value_heads=4, head_dim=256, global_head_dim=512,
        num_global_key_value_heads=2, attention_k_eq_v=True, sliding_window=1024,
        layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 2,
        final_logit_softcapping=30.0, rms_norm_eps=1e-6, max_position_embeddings=32768,
        hidden_size_per_layer_input=0, vocab_size_per_layer_input=262144, num_kv_shared_layers=0,
        enable_moe_block=False, use_double_wide_mlp=False, tie_word_embeddings=True,
        hidden_activation="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1, pad_token_id=0,
        attention_bias=False, attention_dropout=0.0,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0},
        },
        dtype="bfloat16")


SHAPES = {
    "llama-3.2-1b": ("llama", llama_config),
    "gemma-4-1b": ("gemma4", gemma4_1b_config),
    "tiny-llama": ("llama", lambda: llama_config(vocab=4096, hidden=256, inter=512, layers=2, heads=4, kv=2,
                                                 max_pos=16384)),
}


def write_tokenizer(out: Path, vocab_size: int) -> None:
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    # One real merge: llama.cpp's BPE vocabularies (gemma4) refuse a file without merges.
    for t in ("\u2581", "t", "\u2581t"):
        vocab[t] = len(vocab)
    while len(vocab) < vocab_size:
        vocab[f"\u2581t{len(vocab)}"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("\u2581", "t")], unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(SPECIALS)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
        "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
        "model_max_length": 1 << 20}, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-only", action="store_true", help="rewrite OUT's tokenizer files alone")
    a = ap.parse_args()
    family, make_config = SHAPES[a.shape]
    config = make_config()
    if a.tokenizer_only:
        write_tokenizer(a.out, config.vocab_size)
        return 0
    torch.manual_seed(a.seed)
    torch.set_default_dtype(torch.bfloat16)  # no fp32 copy of a 1B model on the way
    if family == "llama":
        from transformers import LlamaForCausalLM as cls
    else:
        from transformers import Gemma4ForCausalLM as cls
    with torch.no_grad():
        model = cls(config).eval()
        # Uniform, variance 1/fan_in for matrices (so activations stay O(1) through the layers);
        # norms and scalars as transformers initializes them. The values only need to be
        # finite and not degenerate.
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                bound = (3.0 / p.shape[1]) ** 0.5 if "embed" not in name else 1.0
                p.uniform_(-bound, bound)
    a.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(a.out, max_shard_size="50GB")
    write_tokenizer(a.out, config.vocab_size)
    n = sum(p.numel() for p in model.parameters())
    print(f"{a.out}: {a.shape}, {n / 1e9:.3f} B parameters", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
