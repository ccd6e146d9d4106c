// GGUF tensor types -> fp32 through kernels/cpu/dequantize.h. Tested by
// tests/gguf_quants_test.cc against fixtures from tools/make_gguf_fixtures.py.
#include "worker/gguf_quants.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/dequantize.h"

namespace tpserve {
namespace {

constexpr GgmlType kDecodable[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                                   GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                                   GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                                   GgmlType::kQ6_K};

// The name llama.cpp prints ("Q4_K"), or "ggml type N" for a number it does not know.
std::string TypeName(GgmlType t) {
  absl::StatusOr<GgmlTypeLayout> l = GgmlLayout(static_cast<uint32_t>(t));
  return l.ok() ? std::string(l->name) : absl::StrCat("ggml type ", static_cast<uint32_t>(t));
}

std::string SupportedList() {
  std::string out;
  for (GgmlType t : kDecodable) absl::StrAppend(&out, out.empty() ? "" : ", ", TypeName(t));
  return out;
}

}  // namespace

std::optional<DType> DTypeOfGgml(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return DType::kF32;
    case GgmlType::kF16: return DType::kF16;
    case GgmlType::kBF16: return DType::kBF16;
    case GgmlType::kQ4_0: return DType::kQ4_0;
    case GgmlType::kQ4_1: return DType::kQ4_1;
    case GgmlType::kQ5_0: return DType::kQ5_0;
    case GgmlType::kQ5_1: return DType::kQ5_1;
    case GgmlType::kQ8_0: return DType::kQ8_0;
    case GgmlType::kQ2_K: return DType::kQ2_K;
    case GgmlType::kQ3_K: return DType::kQ3_K;
    case GgmlType::kQ4_K: return DType::kQ4_K;
    case GgmlType::kQ5_K: return DType::kQ5_K;
    case GgmlType::kQ6_K: return DType::kQ6_K;
    default: return std::nullopt;
  }
}

bool GgmlDequantSupported(GgmlType t) { return DTypeOfGgml(t).has_value(); }

absl::Status DequantizeRow(GgmlType t, const uint8_t* src, int64_t n, float* dst) {
  const std::optional<DType> dtype = DTypeOfGgml(t);
  if (!dtype) {
    return absl::UnimplementedError(absl::StrCat(
        TypeName(t), " tensors are not supported; supported: ", SupportedList(),
        " (convert or re-quantize the model to one of these, e.g. Q4_K_M or Q8_0)"));
  }
  const int64_t block = BlockElems(*dtype);
  if (n < 0 || n % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        TypeName(t), " data is stored in blocks of ", block, " elements (", BlockBytes(*dtype),
        " bytes); cannot dequantize n = ", n, " elements, which is not a whole number of blocks"));
  }
  cpu::DequantizeRow(*dtype, src, n, dst);
  return absl::OkStatus();
}

}  // namespace tpserve
