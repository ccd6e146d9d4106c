// The GGUF container (llama.cpp's model file): header, metadata, tensor infos and the
// aligned data section, memory-mapped and validated on open so that a truncated or corrupt
// file is an error naming it. Knows every ggml tensor type's block layout (to check extents
// and to name a type in errors); turning blocks into numbers is worker/gguf_quants.h.
// Tested by tests/gguf_test.cc.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// ggml's tensor types, numbered as in the file.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
};

// A type's block: `block_elems` consecutive elements of a row stored in `block_bytes`.
struct GgmlTypeLayout {
  absl::string_view name;  // as llama.cpp prints it: "Q4_K", "BF16", ...
  int64_t block_elems = 0;
  int64_t block_bytes = 0;
};
// Nullopt-like: an error naming the number for a type this build does not know.
absl::StatusOr<GgmlTypeLayout> GgmlLayout(uint32_t type);

struct GgufTensor {
  std::string name;  // llama.cpp's, e.g. "blk.0.attn_q.weight"
  GgmlType type = GgmlType::kF32;
  // ggml order: ne[0] is the fastest-moving (contiguous) dimension. A Hugging Face
  // [rows, cols] weight is ne = {cols, rows}.
  std::vector<int64_t> ne;
  const uint8_t* data = nullptr;  // into the mapping
  size_t nbytes = 0;
  int64_t elements() const;
  // Bytes of one ne[0]-long row.
  size_t row_bytes() const;
};

struct GgufOpenOptions {
  // Metadata arrays of more values than this are checked on open but not held: a vocabulary's
  // tokens, scores, types and merges (262,144 strings in Gemma's files) took ~21 MB of heap for
  // the whole run as JSON, while only the tokenizer, built once at start-up, reads them
  // (ReadArray, MetadataWithLargeArrays). Per-layer arrays are far below it.
  uint64_t held_array_elements = 65536;
};

// Metadata values keep their GGUF kind coarsely: integers (signed or not) as JSON integers,
// floats as JSON numbers, bool, string, and arrays of those.
class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path, const GgufOpenOptions& options = {});
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }

  // Metadata: nullptr when the key is absent or is an array too long to hold
  // (GgufOpenOptions::held_array_elements; read those with ReadArray).
  const nlohmann::json* Find(absl::string_view key) const;
  // The held metadata: every key but the long arrays.
  const std::map<std::string, nlohmann::json, std::less<>>& metadata() const { return metadata_; }
  // An array value read now from the mapping (held or not); nullopt when the key is absent.
  absl::StatusOr<std::optional<nlohmann::json>> ReadArray(absl::string_view key) const;
  // Every key, the long arrays read now: a copy for a caller that needs the vocabulary once.
  absl::StatusOr<std::map<std::string, nlohmann::json, std::less<>>> MetadataWithLargeArrays() const;
  // Typed access with errors that name the file and the key.
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;  // integers accepted
  // "general.architecture": "gemma3", "llama", "qwen2", ...
  absl::StatusOr<std::string> Architecture() const { return GetString("general.architecture"); }

  const GgufTensor* FindTensor(absl::string_view name) const;
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

 private:
  GgufFile() = default;
  absl::Status Parse();
  // The metadata's pages of the mapping (read once into metadata_ or by
  // MetadataWithLargeArrays) out of the resident set: a vocabulary's are several MB.
  void ReleaseHeaderPages() const;

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t header_bytes_ = 0;  // header, metadata and tensor infos: up to the data section
  uint64_t held_array_elements_ = 0;
  std::map<std::string, nlohmann::json, std::less<>> metadata_;
  // The arrays not held: key -> offset of the value (its element kind) in the mapping.
  std::map<std::string, size_t, std::less<>> large_arrays_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// A GGUF file named by --model: FILE.gguf itself, or the one *.gguf in a directory (an error
// lists them when there are several). Nullopt-like NotFound when DIR holds none.
absl::StatusOr<std::string> FindGgufFile(const std::string& model_path);

}  // namespace tpserve
