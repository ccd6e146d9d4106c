// GGUF models: config from metadata, tensors renamed and dequantized per slice. Tested by
// tests/gguf_test.cc, tests/model_test.cc (gguf: fixtures) and tests/checkpoint_use_test.cc.
#include "worker/gguf_model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "kernels/base.h"
#include "worker/gguf_gemma4.h"
#include "worker/gguf_quants.h"

namespace tpserve {
namespace {

using json = nlohmann::json;

enum class GgufArch { kGemma3, kGemma4, kLlama, kQwen2, kQwen3 };

absl::StatusOr<GgufArch> ArchOf(const GgufFile& f) {
  TP_ASSIGN_OR_RETURN(std::string arch, f.Architecture());
  if (arch == "gemma3") return GgufArch::kGemma3;
  if (arch == "gemma4") return GgufArch::kGemma4;
  if (arch == "llama") return GgufArch::kLlama;
  if (arch == "qwen2") return GgufArch::kQwen2;
  if (arch == "qwen3") return GgufArch::kQwen3;
  return absl::InvalidArgumentError(absl::StrCat(f.path(), ": GGUF architecture \"", arch, "\" is not supported ",
                                                 "(supported: gemma3, gemma4, llama, qwen2, qwen3)"));
}

// The metadata keys' prefix: general.architecture.
absl::string_view ArchPrefix(GgufArch arch) {
  switch (arch) {
    case GgufArch::kGemma3: return "gemma3";
    case GgufArch::kGemma4: return "gemma4";
    case GgufArch::kLlama: return "llama";
    case GgufArch::kQwen2: return "qwen2";
    case GgufArch::kQwen3: return "qwen3";
  }
  return "";
}

// The engine's name for a llama.cpp tensor name, or "" for a name this architecture does not
// have. Layer tensors are "blk.N.<part>.<weight|bias>".
std::string EngineName(GgufArch arch, const std::string& gguf) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"token_embd.weight", "embed_tokens.weight"},
      {"output_norm.weight", "norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  for (const auto& [g, e] : kTop) {
    if (gguf == g) return e;
  }
  std::vector<std::string> parts = absl::StrSplit(gguf, '.');
  int layer = -1;
  if (parts.size() != 4 || parts[0] != "blk" || !absl::SimpleAtoi(parts[1], &layer) || layer < 0) return "";
  const std::string& part = parts[2];
  const std::string& kind = parts[3];  // weight | bias
  const bool gemma = arch == GgufArch::kGemma3 || arch == GgufArch::kGemma4;
  // Gemma 4's per-layer output scalar, a [1] buffer without a ".weight" in transformers.
  if (arch == GgufArch::kGemma4 && part == "layer_output_scale" && kind == "weight") {
    return absl::StrCat("layers.", layer, ".layer_scalar");
  }
  const std::pair<const char*, const char*> kParts[] = {
      {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},
      {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"},
      {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
      {"attn_norm", "input_layernorm"},
      // Llama-style blocks norm before the MLP with "post_attention_layernorm"; Gemma has
      // four norms per block.
      {"ffn_norm", gemma ? "pre_feedforward_layernorm" : "post_attention_layernorm"},
      {"post_attention_norm", gemma ? "post_attention_layernorm" : nullptr},
      {"post_ffw_norm", gemma ? "post_feedforward_layernorm" : nullptr},
  };
  for (const auto& [g, e] : kParts) {
    if (part == g && e != nullptr && (kind == "weight" || kind == "bias")) {
      return absl::StrCat("layers.", layer, ".", e, ".", kind);
    }
  }
  return "";
}

std::string Key(GgufArch arch, absl::string_view suffix) {
  return absl::StrCat(ArchPrefix(arch), ".", suffix);
}

// Copies metadata `key` into config[field] when present (numbers only).
absl::Status CopyNumber(const GgufFile& f, const std::string& key, const char* field, json& config) {
  const json* v = f.Find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return absl::InvalidArgumentError(absl::StrCat(f.path(), ": metadata \"", key, "\" is not a number"));
  config[field] = *v;
  return absl::OkStatus();
}

// The fields of the families whose heads are all alike (Llama, Qwen 2/3, Gemma 3): head
// size, KV heads, RoPE, and what llama.cpp hard-codes for Gemma 3.
absl::Status AddLlamaOrGemma3Fields(const GgufFile& f, GgufArch arch, json& c) {
  const int64_t hidden = c.at("hidden_size").get<int64_t>();
  const int64_t layers = c.at("num_hidden_layers").get<int64_t>();
  const int64_t heads = c.at("num_attention_heads").get<int64_t>();
  c["num_key_value_heads"] = heads;
  // A per-layer array of KV head counts is not a number: CopyNumber refuses it by name.
  TP_RETURN_IF_ERROR(CopyNumber(f, Key(arch, "attention.head_count_kv"), "num_key_value_heads", c));
  TP_RETURN_IF_ERROR(CopyNumber(f, Key(arch, "attention.layer_norm_rms_epsilon"), "rms_norm_eps", c));
  TP_RETURN_IF_ERROR(CopyNumber(f, Key(arch, "rope.freq_base"), "rope_theta", c));
  // Head size: key_length where written, else hidden / heads (rope.dimension_count is only
  // the rotated part, equal to it for the families supported here).
  int64_t head_dim = hidden / std::max<int64_t>(heads, 1);
  if (const json* k = f.Find(Key(arch, "attention.key_length")); k != nullptr && k->is_number_integer()) {
    head_dim = k->get<int64_t>();
  } else if (const json* d = f.Find(Key(arch, "rope.dimension_count")); d != nullptr && d->is_number_integer()) {
    head_dim = d->get<int64_t>();
  }
  if (const json* v = f.Find(Key(arch, "attention.value_length")); v != nullptr && v->is_number_integer() &&
                                                                    v->get<int64_t>() != head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": value_length ", v->get<int64_t>(),
                                                   " differs from key_length ", head_dim, "; not supported"));
  }
  c["head_dim"] = head_dim;

  if (const json* type = f.Find(Key(arch, "rope.scaling.type")); type != nullptr && type->is_string() &&
                                                                  type->get<std::string>() != "none") {
    const std::string t = type->get<std::string>();
    if (t != "linear") {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": rope.scaling.type \"", t,
                                                     "\" is not supported in GGUF files (supported: linear)"));
    }
    TP_ASSIGN_OR_RETURN(double factor, f.GetFloat(Key(arch, "rope.scaling.factor")));
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", factor}};
  }

  switch (arch) {
    case GgufArch::kGemma3: {
      c["model_type"] = "gemma3_text";
      c["architectures"] = {"Gemma3ForCausalLM"};
      c["hidden_activation"] = "gelu_pytorch_tanh";
      // llama.cpp's Gemma 3: every 6th layer global, sliding layers at rope base 10000,
      // queries scaled by 1/sqrt(head_dim) (1/sqrt(hidden / heads) for the 27B shape).
      c["sliding_window_pattern"] = 6;
      c["rope_local_base_freq"] = 10000.0;
      const bool is_27b = layers == 62 && hidden == 5376;
      c["query_pre_attn_scalar"] = is_27b ? hidden / heads : head_dim;
      if (!c.contains("rope_theta")) c["rope_theta"] = 1000000.0;
      TP_RETURN_IF_ERROR(CopyNumber(f, Key(arch, "attention.sliding_window"), "sliding_window", c));
      TP_RETURN_IF_ERROR(CopyNumber(f, Key(arch, "final_logit_softcapping"), "final_logit_softcapping", c));
      break;
    }
    case GgufArch::kLlama:
      c["model_type"] = "llama";
      c["architectures"] = {"LlamaForCausalLM"};
      if (!c.contains("rope_theta")) c["rope_theta"] = 10000.0;
      break;
    case GgufArch::kQwen2:
      c["model_type"] = "qwen2";
      c["architectures"] = {"Qwen2ForCausalLM"};
      break;
    case GgufArch::kQwen3:
      c["model_type"] = "qwen3";
      c["architectures"] = {"Qwen3ForCausalLM"};
      break;
    case GgufArch::kGemma4:
      break;  // AddGemma4ConfigFields
  }
  return absl::OkStatus();
}

class GgufSource : public WeightSource {
 public:
  GgufSource(std::shared_ptr<const GgufFile> file, GgufArch arch, int32_t num_heads, int32_t num_kv_heads)
      : file_(std::move(file)), arch_(arch), num_heads_(num_heads), num_kv_heads_(num_kv_heads) {
    for (const GgufTensor& t : file_->tensors()) {
      const std::string name = EngineName(arch_, t.name);
      if (!name.empty()) by_engine_name_[name] = &t;
    }
  }

  bool Has(const std::string& name) const override { return by_engine_name_.count(name) > 0; }

  std::optional<DType> QuantizedDType(const std::string& name) const override {
    auto it = by_engine_name_.find(name);
    if (it == by_engine_name_.end()) return std::nullopt;
    const std::optional<DType> t = DTypeOfGgml(it->second->type);
    if (!t || !IsQuantized(*t)) return std::nullopt;
    return t;
  }

  std::string Describe() const override { return absl::StrCat("gguf:", file_->path()); }

  absl::Status Read(const SliceRequest& r, DType dtype, void* dst) const override {
    auto it = by_engine_name_.find(r.name);
    if (it == by_engine_name_.end()) {
      return absl::NotFoundError(absl::StrCat(file_->path(), ": no GGUF tensor holds \"", r.name, "\""));
    }
    const GgufTensor& t = *it->second;
    {
      absl::MutexLock lock(&read_mu_);
      read_.insert(t.name);
    }
    const std::string where = absl::StrCat(file_->path(), ": tensor \"", t.name, "\"");
    // ggml's ne is the Hugging Face shape reversed.
    std::vector<int64_t> hf_shape(t.ne.rbegin(), t.ne.rend());
    if (hf_shape != r.shape) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has shape [", absl::StrJoin(hf_shape, ", "),
                                                     "], expected [", absl::StrJoin(r.shape, ", "),
                                                     "] from the file's metadata"));
    }
    if (!GgmlDequantSupported(t.type)) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is ", GgmlLayout(static_cast<uint32_t>(t.type))->name,
                                                     ", a type tpserve cannot dequantize"));
    }
    TP_RETURN_IF_ERROR(CheckSlice(r, where));
    // A quantized dtype asks for the blocks as stored (QuantizedDType): whole blocks of the
    // file's own type, copied.
    const bool raw = IsQuantized(dtype);
    if (raw) {
      const std::optional<DType> stored = DTypeOfGgml(t.type);
      const int64_t block = BlockElems(dtype);
      if (stored != dtype || r.col0 % block != 0 || r.cols % block != 0) {
        return absl::InternalError(absl::StrCat(where, " cannot be read as ", std::string(DTypeName(dtype)), " columns [", r.col0,
                                                ", ", r.col0 + r.cols, ")"));
      }
    }
    const int64_t full_rows = r.shape.size() == 1 ? 1 : r.shape[0];
    const int64_t full_cols = r.shape.size() == 1 ? r.shape[0] : r.shape[1];
    // llama.cpp stores Llama's q/k rows of each head interleaved (pairs (i, i + d/2) next to
    // each other, for ggml's rotary layout); read each row (or a 1-D bias's each element)
    // from where it went. Engine index `e` of a head of `head_dim` sits at StoredAt(e).
    const bool permuted = arch_ == GgufArch::kLlama &&
                          (absl::StrContains(t.name, ".attn_q.") || absl::StrContains(t.name, ".attn_k."));
    const int32_t heads = absl::StrContains(t.name, ".attn_q.") ? num_heads_ : num_kv_heads_;
    const int64_t head_dim = (r.shape.size() == 2 ? full_rows : full_cols) / heads, half = head_dim / 2;
    auto stored_at = [&](int64_t e) {
      const int64_t within = e % head_dim;
      return e - within + (within % half) * 2 + within / half;
    };
    // Gemma 3's norms multiply by (1 + w); llama.cpp stores 1 + w. Gemma 4's multiply by w,
    // stored as is (its converter's norm_shift is 0).
    const bool gemma_norm = arch_ == GgufArch::kGemma3 && absl::EndsWith(t.name, "norm.weight");
    const size_t row_bytes = t.row_bytes();
    const size_t out_row_bytes = RowBytes(dtype, r.cols);
    // A chunk of rows at a time, its source pages released after it (ReleaseMappedPages). A
    // permuted chunk is whole heads, so that its rows come from its own stretch of the file.
    int64_t chunk_rows = static_cast<int64_t>(std::max<size_t>(1, kReleaseChunkBytes / row_bytes));
    if (permuted && r.shape.size() == 2) chunk_rows = (chunk_rows + head_dim - 1) / head_dim * head_dim;
    for (int64_t c0 = 0; c0 < r.rows; c0 += chunk_rows) {
      const int64_t c1 = std::min(r.rows, c0 + chunk_rows);
      int64_t src_lo = r.row0 + c0, src_hi = r.row0 + c1;  // [lo, hi) of the stored rows read
#pragma omp parallel if (c1 - c0 > 64)
      {
        std::vector<float> row(full_cols), unpermuted;
#pragma omp for schedule(static) reduction(min : src_lo) reduction(max : src_hi)
        for (int64_t i = c0; i < c1; ++i) {
          const int64_t src_row = permuted && r.shape.size() == 2 ? stored_at(r.row0 + i) : r.row0 + i;
          src_lo = std::min(src_lo, src_row);
          src_hi = std::max(src_hi, src_row + 1);
          if (raw) {
            std::memcpy(static_cast<uint8_t*>(dst) + i * out_row_bytes,
                        t.data + src_row * row_bytes + RowBytes(dtype, r.col0), out_row_bytes);
            continue;
          }
          // The type is supported (above) and rows are whole blocks (checked on open).
          TP_CHECK(DequantizeRow(t.type, t.data + src_row * row_bytes, full_cols, row.data()).ok());
          if (gemma_norm) {
            for (float& v : row) v -= 1.0f;
          }
          const float* values = row.data();
          if (permuted && r.shape.size() == 1) {
            unpermuted.resize(full_cols);
            for (int64_t e = 0; e < full_cols; ++e) unpermuted[e] = row[stored_at(e)];
            values = unpermuted.data();
          }
          ConvertRow(reinterpret_cast<const uint8_t*>(values + r.col0), DType::kF32, r.cols, dtype,
                     static_cast<uint8_t*>(dst) + i * out_row_bytes);
        }
      }
      ReleaseMappedPages(t.data + src_lo * row_bytes, static_cast<size_t>(src_hi - src_lo) * row_bytes);
    }
    return absl::OkStatus();
  }

  // rope_freqs.weight is consumed by GgufModelConfig (Llama 3's RoPE, Gemma 4's partial
  // rotation), not by a layer; every other tensor, renamed or not, must have been read.
  absl::Status CheckAllUsed(const TensorFilter& elsewhere) const override {
    std::set<std::string> other_stages;  // file names of the tensors other pipeline stages read
    if (elsewhere) {
      for (const auto& [engine_name, t] : by_engine_name_) {
        if (elsewhere(engine_name)) other_stages.insert(t->name);
      }
    }
    std::vector<std::string> unread;
    {
      absl::MutexLock lock(&read_mu_);
      for (const GgufTensor& t : file_->tensors()) {
        if (t.name != "rope_freqs.weight" && !read_.count(t.name) && !other_stages.count(t.name)) {
          unread.push_back(t.name);
        }
      }
    }
    std::sort(unread.begin(), unread.end());
    return UnreadTensorsStatus(absl::StrCat("GGUF file ", file_->path()), unread);
  }

 private:
  std::shared_ptr<const GgufFile> file_;
  GgufArch arch_;
  int32_t num_heads_, num_kv_heads_;
  std::map<std::string, const GgufTensor*> by_engine_name_;
  mutable absl::Mutex read_mu_;
  mutable std::set<std::string> read_ ABSL_GUARDED_BY(read_mu_);  // GGUF names of tensors read
};

}  // namespace

bool IsGgufModelPath(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(model_path, ec)) return absl::EndsWith(model_path, ".gguf");
  if (!fs::is_directory(model_path, ec) || fs::exists(fs::path(model_path) / "config.json", ec)) return false;
  for (const fs::directory_entry& e : fs::directory_iterator(model_path, ec)) {
    if (e.is_regular_file() && e.path().extension() == ".gguf") return true;
  }
  return false;
}

absl::StatusOr<std::shared_ptr<const GgufFile>> OpenGgufModel(const std::string& model_path,
                                                              const std::string& load_format) {
  if (load_format != "gguf" && (load_format != "auto" || !IsGgufModelPath(model_path))) return nullptr;
  TP_ASSIGN_OR_RETURN(std::string path, FindGgufFile(model_path));
  TP_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  return std::shared_ptr<const GgufFile>(std::move(file));
}

absl::StatusOr<std::string> GgufConfigJson(const GgufFile& f) {
  TP_ASSIGN_OR_RETURN(GgufArch arch, ArchOf(f));
  if (arch == GgufArch::kGemma4) TP_RETURN_IF_ERROR(RefuseGemma4Variants(f));
  json c = json::object();
  TP_ASSIGN_OR_RETURN(int64_t hidden, f.GetInt(Key(arch, "embedding_length")));
  TP_ASSIGN_OR_RETURN(int64_t layers, f.GetInt(Key(arch, "block_count")));
  TP_ASSIGN_OR_RETURN(int64_t ffn, f.GetInt(Key(arch, "feed_forward_length")));
  TP_ASSIGN_OR_RETURN(int64_t heads, f.GetInt(Key(arch, "attention.head_count")));
  c["hidden_size"] = hidden;
  c["num_hidden_layers"] = layers;
  c["intermediate_size"] = ffn;
  c["num_attention_heads"] = heads;
  TP_RETURN_IF_ERROR(CopyNumber(f, Key(arch, "context_length"), "max_position_embeddings", c));

  const GgufTensor* embed = f.FindTensor("token_embd.weight");
  if (embed == nullptr || embed->ne.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": no 2-D token_embd.weight tensor"));
  }
  c["vocab_size"] = embed->ne[1];
  c["tie_word_embeddings"] = f.FindTensor("output.weight") == nullptr;
  c["attention_bias"] = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  // Weights are dequantized to this dtype unless --dtype says otherwise: the file's own
  // float type, bfloat16 for quantized files (half of float32's memory; the quantization
  // error is far larger than bfloat16's).
  const int64_t file_type = f.GetInt("general.file_type").value_or(-1);
  c["dtype"] = file_type == 0 ? "float32" : file_type == 1 ? "float16" : "bfloat16";

  if (arch == GgufArch::kGemma4) {
    TP_RETURN_IF_ERROR(AddGemma4ConfigFields(f, c));
  } else {
    TP_RETURN_IF_ERROR(AddLlamaOrGemma3Fields(f, arch, c));
  }
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
    if (const json* id = f.Find(key); id != nullptr && id->is_number_integer()) {
      c[absl::EndsWith(key, "bos_token_id") ? "bos_token_id" : "eos_token_id"] = *id;
    }
  }
  return c.dump(2);
}

absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& f) {
  TP_ASSIGN_OR_RETURN(std::string text, GgufConfigJson(f));
  TP_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(text, absl::StrCat(f.path(), " (GGUF metadata as config.json)")));
  // Llama 3's rope scaling, stored by llama.cpp as per-frequency divisors. (Gemma 4's
  // rope_freqs.weight became its partial_rotary_factor in GgufConfigJson.)
  const GgufTensor* t = f.FindTensor("rope_freqs.weight");
  if (t != nullptr && c.arch != Arch::kGemma4) {
    const int32_t half = c.max_head_dim() / 2;
    if (t->type != GgmlType::kF32 || t->ne.size() != 1 || t->ne[0] != half) {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": rope_freqs.weight must be F32 of head_dim / 2 = ",
                                                     half, " values"));
    }
    std::vector<float> factors(half);
    std::memcpy(factors.data(), t->data, half * sizeof(float));
    for (LayerConfig& l : c.layers) l.rope.freq_factors = factors;
  }
  return c;
}

absl::StatusOr<std::unique_ptr<WeightSource>> OpenGgufSource(std::shared_ptr<const GgufFile> file) {
  TP_ASSIGN_OR_RETURN(GgufArch arch, ArchOf(*file));
  TP_ASSIGN_OR_RETURN(ModelConfig config, GgufModelConfig(*file));
  const int32_t kv = config.layers.empty() ? config.num_heads : config.layers[0].num_kv_heads;
  return std::unique_ptr<WeightSource>(new GgufSource(std::move(file), arch, config.num_heads, kv));
}

}  // namespace tpserve
