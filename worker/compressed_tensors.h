// Hugging Face checkpoints quantized by compressed-tensors (config.json quantization_config
// with quant_method "compressed-tensors", as llm-compressor writes them): which schemes the
// checkpoint source reads, and the row conversions from their tensors to tpserve's block types.
//   * FP8 E4M3 weights ("float-quantized"/"naive-quantized", symmetric, strategy "channel":
//     weight_scale [n, 1]; "block" 128x128 (any block rows, 128 columns): weight_scale
//     [ceil(n/br), ceil(k/128)]) -> DType::kF8_E4M3 blocks, the fp32 scale per 128 weights
//     taken from the checkpoint's: exact.
//   * int4 weights ("pack-quantized", symmetric, strategy "group" with a group of 32k
//     elements or "channel"): weight_packed int32 [n, k/8] (8 nibbles, element j of 8 in bits
//     4j..4j+3, stored as value + 8), weight_scale [n, k/group], weight_shape [2] ->
//     DType::kQ4_0 blocks of 32 with the group's scale as their fp16 d: exact where every scale
//     is an fp16 value (else the tensor is widened at load, saying so).
// Activations stay in the backend's precision (weight-only: "FP8-dynamic" checkpoints'
// dynamic per-token activation quantization is not applied; logged). Anything else
// (asymmetric, static activation scales, activation ordering, a KV cache scheme, sparsity,
// other bit widths) is refused with a message naming the field. Tested by
// tests/safetensors_test.cc (parsing and errors) and tests/model_test.cc (fixtures written by
// tools/make_compressed_tensors_fixtures.py against transformers).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tpserve {

struct CompressedTensorsScheme {
  bool present = false;        // config.json has a compressed-tensors quantization_config
  bool fp8 = false;            // some group stores FP8 E4M3 weights
  bool int4 = false;           // some group stores packed int4 weights
  bool dynamic_activations = false;  // some group asks for dynamic activation quantization
  std::string description;     // for logs and Describe(), e.g. "fp8 e4m3 weights (channel)"
};

// Parses config.json's quantization_config (`config_json` is the whole file's text; `where`
// names it in errors). No quantization_config: present = false. A quant_method other than
// compressed-tensors, or a compressed-tensors scheme tpserve cannot run, is an error that
// names the field and what is supported.
absl::StatusOr<CompressedTensorsScheme> ParseCompressedTensorsConfig(std::string_view config_json,
                                                                     const std::string& where);

// n = cols elements of row `row` of an FP8 weight with k columns, from column col0 (a
// multiple of 128; cols too), as kF8_E4M3 blocks ({float scale; uint8 q[128]}): `q` is the
// weight's row, `scale` the whole weight_scale as fp32 ([rows_of_scale, scale_cols], one
// column: per channel), `block_rows` the scale's rows per weight row block (1 per channel).
void Fp8RowToBlocks(const uint8_t* q_row, const float* scale, int64_t scale_cols, int64_t block_rows, int64_t row,
                    int64_t col0, int64_t cols, uint8_t* out);
// The same row widened to fp32: scale * e4m3(q), exact.
void Fp8RowToF32(const uint8_t* q_row, const float* scale, int64_t scale_cols, int64_t block_rows, int64_t row,
                 int64_t col0, int64_t cols, float* out);

// Columns [col0, col0 + cols) (multiples of 32) of one packed int4 row (int32 words, 8
// nibbles each) as kQ4_0 blocks with d = the fp16 `scale16` of each element's group
// (`group` elements per scale; scale16 is the row's scales).
void Int4RowToQ4_0(const uint8_t* packed_row, const uint16_t* scale16, int64_t group, int64_t col0, int64_t cols,
                   uint8_t* out);
// The same columns widened to fp32: (nibble - 8) * scale, from the row's fp32 scales.
void Int4RowToF32(const uint8_t* packed_row, const float* scale, int64_t group, int64_t col0, int64_t cols,
                  float* out);

}  // namespace tpserve
