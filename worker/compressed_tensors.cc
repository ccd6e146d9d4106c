// compressed-tensors quantization_config parsing and the row conversions of its FP8 and packed
// int4 weights. Tested by tests/safetensors_test.cc and tests/model_test.cc.
#include "worker/compressed_tensors.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/base.h"
#include "kernels/cpu/dequantize.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using json = nlohmann::json;

// A field that must be absent, null or false.
bool Unset(const json& obj, const char* key) {
  if (!obj.contains(key)) return true;
  const json& v = obj[key];
  return v.is_null() || (v.is_boolean() && !v.get<bool>());
}

std::string Str(const json& obj, const char* key, const std::string& dflt) {
  return obj.contains(key) && obj[key].is_string() ? obj[key].get<std::string>() : dflt;
}

}  // namespace

absl::StatusOr<CompressedTensorsScheme> ParseCompressedTensorsConfig(std::string_view config_json,
                                                                     const std::string& where) {
  CompressedTensorsScheme s;
  const json c = json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (c.is_discarded() || !c.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
  if (Unset(c, "quantization_config")) return s;
  const json& q = c["quantization_config"];
  const std::string at = absl::StrCat(where, ": quantization_config");
  if (!q.is_object()) return absl::InvalidArgumentError(absl::StrCat(at, " is not an object"));
  const std::string method = Str(q, "quant_method", "");
  if (method != "compressed-tensors") {
    return absl::InvalidArgumentError(absl::StrCat(
        at, ".quant_method \"", method,
        "\" is not supported: tpserve reads compressed-tensors checkpoints (FP8 E4M3 weights; packed symmetric int4 "
        "weights, as W4A16) and GGUF files; --quantization int8|fp8 quantizes a float checkpoint at load"));
  }
  const std::string status = Str(q, "quantization_status", "compressed");
  if (status != "compressed") {
    return absl::InvalidArgumentError(
        absl::StrCat(at, ".quantization_status \"", status, "\": only compressed checkpoints are supported"));
  }
  if (!Unset(q, "sparsity_config")) {
    return absl::InvalidArgumentError(absl::StrCat(at, ".sparsity_config: sparse compressed weights are not supported"));
  }
  if (!Unset(q, "kv_cache_scheme")) {
    return absl::InvalidArgumentError(absl::StrCat(
        at, ".kv_cache_scheme: a quantized KV cache from the checkpoint is not supported (the KV cache stays in the "
            "backend's float type)"));
  }
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(at, ".config_groups: missing or empty"));
  }
  const std::string format = Str(q, "format", "");
  std::vector<std::string> parts;
  for (auto it = q["config_groups"].begin(); it != q["config_groups"].end(); ++it) {
    const json& g = it.value();
    const std::string gat = absl::StrCat(at, ".config_groups.", it.key());
    if (!g.is_object() || !g.contains("weights") || !g["weights"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(gat, ".weights: missing (only weight quantization is supported)"));
    }
    if (!Unset(g, "output_activations")) {
      return absl::InvalidArgumentError(absl::StrCat(gat, ".output_activations: output quantization is not supported"));
    }
    if (!Unset(g, "input_activations")) {
      const json& ia = g["input_activations"];
      if (!ia.is_object() || !ia.value("dynamic", false)) {
        return absl::InvalidArgumentError(absl::StrCat(
            gat, ".input_activations: static activation scales are not supported (dynamic ones are: tpserve runs "
                 "the weights with activations in the backend's precision)"));
      }
      s.dynamic_activations = true;
    }
    const json& w = g["weights"];
    const std::string wat = absl::StrCat(gat, ".weights");
    const std::string type = Str(w, "type", "int");
    const int bits = w.contains("num_bits") && w["num_bits"].is_number_integer() ? w["num_bits"].get<int>() : 0;
    const std::string strategy = Str(w, "strategy", "tensor");
    const std::string gformat = Str(g, "format", format);
    if (!w.value("symmetric", true)) {
      return absl::InvalidArgumentError(absl::StrCat(wat, ".symmetric is false: asymmetric (zero-point) weights are "
                                                     "not supported"));
    }
    if (!Unset(w, "dynamic")) {
      return absl::InvalidArgumentError(absl::StrCat(wat, ".dynamic: dynamically quantized weights are not supported"));
    }
    if (!Unset(w, "actorder")) {
      return absl::InvalidArgumentError(absl::StrCat(wat, ".actorder: activation-ordered groups are not supported"));
    }
    if (type == "float" && bits == 8) {
      if (gformat != "float-quantized" && gformat != "naive-quantized") {
        return absl::InvalidArgumentError(absl::StrCat(wat, ": fp8 weights in format \"", gformat,
                                                       "\" are not supported (float-quantized, naive-quantized)"));
      }
      if (strategy == "block") {
        const json& bs = w.contains("block_structure") ? w["block_structure"] : json();
        if (bs != json::array({128, 128})) {
          return absl::InvalidArgumentError(
              absl::StrCat(wat, ".block_structure ", bs.dump(), ": only [128, 128] blocks are supported"));
        }
      } else if (strategy != "channel" && strategy != "tensor") {
        return absl::InvalidArgumentError(absl::StrCat(wat, ".strategy \"", strategy,
                                                       "\" for fp8 weights: supported are tensor, channel, block"));
      }
      s.fp8 = true;
      parts.push_back(absl::StrCat("fp8 e4m3 weights (", strategy, strategy == "block" ? " 128x128" : "", ")"));
    } else if (type == "int" && bits == 4) {
      if (gformat != "pack-quantized") {
        return absl::InvalidArgumentError(absl::StrCat(wat, ": int4 weights in format \"", gformat,
                                                       "\" are not supported (pack-quantized)"));
      }
      if (strategy == "group") {
        const int64_t group = w.contains("group_size") && w["group_size"].is_number_integer()
                                  ? w["group_size"].get<int64_t>() : 0;
        if (group <= 0 || group % 32 != 0) {
          return absl::InvalidArgumentError(absl::StrCat(wat, ".group_size ", group,
                                                         ": int4 groups must be a positive multiple of 32"));
        }
        parts.push_back(absl::StrCat("int4 weights (group ", group, ")"));
      } else if (strategy == "channel") {
        parts.push_back("int4 weights (channel)");
      } else {
        return absl::InvalidArgumentError(absl::StrCat(wat, ".strategy \"", strategy,
                                                       "\" for int4 weights: supported are group, channel"));
      }
      s.int4 = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          wat, ": ", type, " weights of ", bits,
          " bits are not supported; supported: fp8 e4m3 (float-quantized) and symmetric int4 (pack-quantized)"));
    }
  }
  s.present = true;
  s.description = absl::StrCat("compressed-tensors ", absl::StrJoin(parts, ", "));
  if (s.dynamic_activations) absl::StrAppend(&s.description, "; activations not quantized (weight-only)");
  return s;
}

void Fp8RowToBlocks(const uint8_t* q_row, const float* scale, int64_t scale_cols, int64_t block_rows, int64_t row,
                    int64_t col0, int64_t cols, uint8_t* out) {
  const float* srow = scale + (row / block_rows) * scale_cols;
  for (int64_t c = col0; c < col0 + cols; c += 128) {
    const float s = scale_cols == 1 ? srow[0] : srow[c / 128];
    std::memcpy(out, &s, 4);
    std::memcpy(out + 4, q_row + c, 128);
    out += BlockBytes(DType::kF8_E4M3);
  }
}

void Fp8RowToF32(const uint8_t* q_row, const float* scale, int64_t scale_cols, int64_t block_rows, int64_t row,
                 int64_t col0, int64_t cols, float* out) {
  const float* srow = scale + (row / block_rows) * scale_cols;
  for (int64_t c = col0; c < col0 + cols; ++c) {
    const float s = scale_cols == 1 ? srow[0] : srow[c / 128];
    out[c - col0] = s * cpu::F8E4M3ToF32(q_row[c]);
  }
}

namespace {

// The stored nibble (value + 8) of column c of a packed row.
inline uint8_t Nibble(const uint8_t* packed_row, int64_t c) {
  uint32_t word;
  std::memcpy(&word, packed_row + (c / 8) * 4, 4);
  return static_cast<uint8_t>((word >> (4 * (c % 8))) & 0xf);
}

}  // namespace

void Int4RowToQ4_0(const uint8_t* packed_row, const uint16_t* scale16, int64_t group, int64_t col0, int64_t cols,
                   uint8_t* out) {
  for (int64_t c = col0; c < col0 + cols; c += 32) {
    std::memcpy(out, &scale16[c / group], 2);
    // ggml's Q4_0: qs[i] holds element i in its low nibble and element i + 16 in its high one.
    for (int i = 0; i < 16; ++i) {
      out[2 + i] = static_cast<uint8_t>(Nibble(packed_row, c + i) | (Nibble(packed_row, c + 16 + i) << 4));
    }
    out += BlockBytes(DType::kQ4_0);
  }
}

void Int4RowToF32(const uint8_t* packed_row, const float* scale, int64_t group, int64_t col0, int64_t cols,
                  float* out) {
  for (int64_t c = col0; c < col0 + cols; ++c) {
    out[c - col0] = static_cast<float>(static_cast<int>(Nibble(packed_row, c)) - 8) * scale[c / group];
  }
}

}  // namespace tpserve
