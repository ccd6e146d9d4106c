// Gemma 4's GGUF metadata, as llama.cpp's converter writes it, turned into the config.json fields
// transformers' Gemma4TextConfig reads (worker/gguf_model.cc writes the rest). Tested by
// tests/gguf_test.cc and tests/model_test.cc (Gguf/gemma4_*: transformers' logits on the file).
#pragma once

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "worker/gguf_file.h"

namespace tpserve {

// The other Gemma 4 models' features (per-layer input embeddings, KV sharing, experts,
// double-wide MLPs), refused by the metadata key that carries them. Run before reading the
// common keys, so that e.g. a per-layer feed_forward_length is named for what it means.
absl::Status RefuseGemma4Variants(const GgufFile& file);

// Adds the Gemma 4 fields to `config`, which holds hidden_size, num_hidden_layers and
// num_attention_heads: head sizes, KV heads, layer types, RoPE (rope_freqs.weight read back
// into the full layers' partial rotation), attention_k_eq_v (full layers without attn_v),
// sliding window, softcapping. Missing or unrepresentable values are errors naming the key or
// tensor.
absl::Status AddGemma4ConfigFields(const GgufFile& file, nlohmann::json& config);

}  // namespace tpserve
