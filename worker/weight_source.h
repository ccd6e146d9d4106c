// Where a rank's weight slices come from: a safetensors checkpoint (real weights) or a
// deterministic generator (--load-format dummy). Each layer asks only for the slice it
// owns; afterwards the source says whether any checkpoint tensor went unread. Tested by
// tests/safetensors_test.cc, tests/checkpoint_use_test.cc and tests/model_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/base.h"
#include "worker/model_config.h"
#include "worker/safetensors.h"

namespace tpserve {

// A 2-D slice request: rows [row0, row0 + rows) and columns [col0, col0 + cols) of a
// tensor whose full shape must be `shape` (1-D tensors are read as [1, n]).
struct SliceRequest {
  std::string name;  // without the checkpoint's prefix, e.g. "layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Copies the slice into dst (rows x cols, dense) converted to `dtype`.
  virtual absl::Status Read(const SliceRequest& req, DType dtype, void* dst) const = 0;
  // Whether the (unprefixed) tensor exists.
  virtual bool Has(const std::string& name) const = 0;
  // The block-quantized dtype (kernels/base.h) the tensor is stored in, where the source can
  // hand its blocks over as they are: Read with that dtype then copies whole blocks (the
  // slice's columns must start and end on block boundaries). nullopt for float tensors and
  // for sources that only convert. Default: nullopt.
  virtual std::optional<DType> QuantizedDType(const std::string& /*name*/) const { return std::nullopt; }
  // Where the tensor is stored quantized but QuantizedDType is empty (the source can only hand
  // it over widened), why: for the start-up log's tally. Default: empty.
  virtual std::string WidenedReason(const std::string& /*name*/) const { return ""; }
  virtual std::string Describe() const = 0;  // for logs and run records

  // Called once the whole model has been loaded from this source (Model::Load does).
  // An error naming the tensors (the first few and the count) that the source holds,
  // that no Read asked for, and that are not known to be safe to skip; OkStatus when there
  // are none or the source has no fixed tensor list (the dummy generator). Has() is not a
  // use. Reads from several threads (ranks sharing one source) all count. Relies on every
  // rank reading a slice of every tensor its pipeline stage uses, so one rank's load
  // suffices. `elsewhere` (null: none) names the tensors, by their unprefixed engine names
  // ("layers.7.mlp.up_proj.weight", "lm_head.weight"), that other pipeline stages read:
  // not an error here.
  using TensorFilter = std::function<bool(std::string_view name)>;
  virtual absl::Status CheckAllUsed(const TensorFilter& elsewhere = nullptr) const = 0;

  // A whole 1-D integer tensor of n entries (safetensors I64 or I32), e.g. the MTP
  // drafter's token_ordering; counts as a use. Default: Unimplemented (sources without
  // integer tensors).
  virtual absl::StatusOr<std::vector<int64_t>> ReadInt64(const std::string& name, int64_t n) const;
};

// Drops [p, p + bytes) of a read-only file mapping from this process's resident set, once a
// rank has copied what it needs from it. The pages stay in the page cache (reclaimable, and
// shared with other processes reading the file) and fault back in if read again; they no
// longer count beside the copy, so a loaded rank holds its weights once (issue 21). Rounds
// outward to whole pages, which is harmless: a read-only mapping has no changes to lose.
void ReleaseMappedPages(const void* p, size_t bytes);
// Sources copy a tensor this many source bytes at a time and release each chunk's pages
// before the next, so that loading holds at most this much of the file beside the copies.
inline constexpr size_t kReleaseChunkBytes = size_t{16} << 20;

// Copies n elements of `src` (dtype src_dtype) to `dst` as dst_dtype.
void ConvertRow(const uint8_t* src, DType src_dtype, int64_t n, DType dst_dtype, void* dst);
// An InternalError naming `where` unless the slice lies inside r.shape (1-D or 2-D).
absl::Status CheckSlice(const SliceRequest& r, const std::string& where);

// Opens DIR's safetensors and finds the language model's weight prefix ("model.",
// "model.language_model.", "language_model.model."). CheckAllUsed skips only other
// towers of multimodal checkpoints (IsIgnorableCheckpointTensor); any other tensor no
// layer read is an error.
absl::StatusOr<std::unique_ptr<WeightSource>> OpenCheckpointSource(const std::string& dir);
// DIR's safetensors with every name read as `prefix` + the name asked for (no search for
// a language-model prefix): for checkpoints whose tensors do not all sit under one, such
// as the Gemma 4 MTP assistant's (model.layers.*, pre_projection.weight), read with "".
absl::StatusOr<std::unique_ptr<WeightSource>> OpenCheckpointSourceWithPrefix(const std::string& dir,
                                                                            const std::string& prefix);

// Whether a checkpoint tensor (full name, as stored) may go unread without losing part of
// the language model: vision/audio towers and their projectors ([model.]vision_tower.*,
// multi_modal_projector.*, audio_tower.*, embed_vision.*, embed_audio.*), rotary
// *.inv_freq buffers (recomputed from the config), and lm_head.weight (unread only when
// tie_word_embeddings makes it the embedding's duplicate; untied, it is read).
bool IsIgnorableCheckpointTensor(std::string_view name);

// What CheckAllUsed returns for `unread` (sorted names as the file spells them) in
// `where` ("checkpoint DIR", "GGUF file F"): OkStatus when empty, else an
// InvalidArgument naming the first five and counting the rest.
absl::Status UnreadTensorsStatus(const std::string& where, const std::vector<std::string>& unread);

// `inner` with its float matrices quantized at load to `target`: DType::kQ8_0 (int8 with an
// fp16 scale per 32 weights, tpserve's --quantization int8) or DType::kF8_E4M3 (FP8 E4M3 with
// an fp32 scale per 128 weights, --quantization fp8). QuantizedDType names `target` for every
// tensor inner holds whose own QuantizedDType is empty, and Read with `target` reads the slice
// in fp32 and quantizes each row (kernels/cpu/dequantize.h QuantizeRowQ8_0 /
// QuantizeRowF8E4M3). The layers ask only for their matrices that way; norms and everything
// else pass through.
std::unique_ptr<WeightSource> QuantizeAtLoad(std::unique_ptr<WeightSource> inner, DType target);

// Deterministic random weights with the real shapes: a tensor element's value depends only
// on (seed, tensor name, row, column), so every tensor-parallel split sees the same model.
std::unique_ptr<WeightSource> MakeDummySource(const ModelConfig& config, uint64_t seed);

}  // namespace tpserve
