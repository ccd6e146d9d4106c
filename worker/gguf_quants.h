// Turning GGUF tensor blocks into fp32: ggml's float types and its legacy (Q4_0..Q8_0) and
// K-quant (Q2_K..Q6_K) block layouts (kernels/cpu/dequantize.h), giving exactly the numbers of
// the `gguf` Python package's gguf.quants.dequantize. Tested by tests/gguf_quants_test.cc
// against fixtures from tools/make_gguf_fixtures.py; speed in bench/gguf_dequant_bench.cc.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "kernels/base.h"
#include "worker/gguf_file.h"

namespace tpserve {

// The engine dtype that holds a GGUF tensor type's blocks as they are; nullopt for types
// tpserve cannot read (IQ*, TQ*, MXFP4, ...).
std::optional<DType> DTypeOfGgml(GgmlType t);

// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool GgmlDequantSupported(GgmlType t);

// Dequantizes `n` elements of type `t` into dst[0, n). `src` points at a block boundary (the
// start of a row, or a whole number of blocks into one) and n must be a multiple of the
// type's block (32 elements for Q4_0..Q8_0, 256 for the K-quants, 1 for the float types).
// Errors (both name the type): an unsupported type, n not a multiple of its block.
// Thread-safe; callers parallelize over rows.
absl::Status DequantizeRow(GgmlType t, const uint8_t* src, int64_t n, float* dst);

}  // namespace tpserve
