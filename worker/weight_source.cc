// Checkpoint-backed and dummy WeightSources, and the check that a checkpoint holds nothing
// the model left unread. Tested by tests/safetensors_test.cc, tests/checkpoint_use_test.cc
// and tests/model_test.cc.
#include "worker/weight_source.h"

#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cpu/dequantize.h"
#include "worker/compressed_tensors.h"

namespace tpserve {
namespace {

std::string ShapeStr(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

// A whole 1-D integer tensor of n entries (I64 or I32) as int64.
absl::StatusOr<std::vector<int64_t>> ReadInts(const TensorInfo& t, int64_t n) {
  const std::string where = absl::StrCat(t.file, ": tensor \"", t.name, "\"");
  if (t.shape != std::vector<int64_t>{n}) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has shape ", ShapeStr(t.shape), ", expected [", n, "]"));
  }
  const size_t elem = t.dtype_name == "I64" ? 8 : t.dtype_name == "I32" ? 4 : 0;
  if (elem == 0 || t.nbytes != elem * static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has dtype ", t.dtype_name, "; expected I64 or I32"));
  }
  std::vector<int64_t> out(n);
  for (int64_t i = 0; i < n; ++i) {
    if (elem == 8) {
      std::memcpy(&out[i], t.data + i * 8, 8);
    } else {
      int32_t v;
      std::memcpy(&v, t.data + i * 4, 4);
      out[i] = v;
    }
  }
  return out;
}

// Calls row(i) for i in [0, rows) (in parallel), kReleaseChunkBytes of the source at a time,
// then drops each chunk's source rows (rows0 + i, src_row_bytes each) from the resident set.
void ForEachRowReleasing(int64_t rows, const uint8_t* rows0, size_t src_row_bytes,
                         const std::function<void(int64_t)>& row) {
  const int64_t chunk_rows = static_cast<int64_t>(std::max<size_t>(1, kReleaseChunkBytes / src_row_bytes));
  for (int64_t c0 = 0; c0 < rows; c0 += chunk_rows) {
    const int64_t c1 = std::min(rows, c0 + chunk_rows);
#pragma omp parallel for schedule(static) if (c1 - c0 > 64)
    for (int64_t i = c0; i < c1; ++i) row(i);
    // Whole rows: a column slice (row-parallel layers) touched pages across all of them.
    ReleaseMappedPages(rows0 + c0 * src_row_bytes, (c1 - c0) * src_row_bytes);
  }
}

// A matrix stored by compressed-tensors (worker/compressed_tensors.h): its quantized values,
// their scales as fp32, and the layout of both.
struct CompressedMatrix {
  bool int4 = false;         // packed int4 (else FP8 E4M3)
  const TensorInfo* values;  // F8_E4M3 [n, k], or I32 [n, ceil(k / 8)] for int4
  std::vector<int64_t> shape;  // [n, k]
  std::vector<float> scale;  // the weight_scale tensor as fp32, row-major
  int64_t scale_cols = 1;
  int64_t block_rows = 1;    // weight rows per scale row (fp8)
  int64_t group = 0;         // int4: elements per scale
  std::vector<uint16_t> scale16;  // int4: the scales as fp16, where every one is exact (else empty)
  // The block type it is handed over as (QuantizedDType): kF8_E4M3, kQ4_0, or none (int4 with
  // scales that are not all fp16 values: read widened, `widened` says why).
  std::optional<DType> kept;
  std::string widened;
  std::vector<std::string> names;  // the checkpoint tensors it is made of (all count as read)
};

class CheckpointSource : public WeightSource {
 public:
  CheckpointSource(std::unique_ptr<Checkpoint> ckpt, std::string prefix, CompressedTensorsScheme scheme)
      : ckpt_(std::move(ckpt)), prefix_(std::move(prefix)), scheme_(std::move(scheme)) {}

  bool Has(const std::string& name) const override {
    return Lookup(name) != nullptr || (scheme_.int4 && name.ends_with(".weight") && Lookup(name + "_packed"));
  }

  std::string Describe() const override {
    return absl::StrCat("safetensors:", ckpt_->dir(), scheme_.present ? absl::StrCat(" (", scheme_.description, ")") : "");
  }

  std::optional<DType> QuantizedDType(const std::string& name) const override {
    if (!scheme_.present) return std::nullopt;
    absl::StatusOr<const CompressedMatrix*> m = Compressed(name);
    return m.ok() && *m != nullptr ? (*m)->kept : std::nullopt;
  }

  std::string WidenedReason(const std::string& name) const override {
    if (!scheme_.present) return "";
    absl::StatusOr<const CompressedMatrix*> m = Compressed(name);
    return m.ok() && *m != nullptr ? (*m)->widened : "";
  }

  absl::Status Read(const SliceRequest& r, DType dtype, void* dst) const override {
    if (scheme_.present) {
      TP_ASSIGN_OR_RETURN(const CompressedMatrix* m, Compressed(r.name));
      if (m != nullptr) return ReadCompressed(*m, r, dtype, dst);
    }
    const TensorInfo* t = Lookup(r.name);
    if (t == nullptr) {
      return absl::NotFoundError(absl::StrCat(ckpt_->dir(), ": missing tensor \"", prefix_, r.name, "\""));
    }
    {
      absl::MutexLock lock(&mu_);
      read_.insert(t->name);
    }
    const std::string where = absl::StrCat(t->file, ": tensor \"", t->name, "\"");
    // 1-element tensors may be stored as [] or [1].
    std::vector<int64_t> shape = t->shape;
    if (shape.empty()) shape = {1};
    if (shape != r.shape) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has shape ", ShapeStr(t->shape), ", expected ",
                                                     ShapeStr(r.shape), " from config.json"));
    }
    if (!t->dtype_supported) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has dtype ", t->dtype_name,
                                                     "; supported: F32, BF16, F16"));
    }
    TP_RETURN_IF_ERROR(CheckSlice(r, where));
    const int64_t full_cols = shape.size() == 1 ? shape[0] : shape[1];
    const size_t src_elem = DTypeSize(t->dtype), dst_elem = DTypeSize(dtype);
    const size_t src_row_bytes = static_cast<size_t>(full_cols) * src_elem;
    uint8_t* out = static_cast<uint8_t*>(dst);
    ForEachRowReleasing(r.rows, t->data + r.row0 * src_row_bytes, src_row_bytes, [&](int64_t i) {
      const uint8_t* src = t->data + ((r.row0 + i) * full_cols + r.col0) * src_elem;
      ConvertRow(src, t->dtype, r.cols, dtype, out + i * r.cols * dst_elem);
    });
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<int64_t>> ReadInt64(const std::string& name, int64_t n) const override {
    const TensorInfo* t = Lookup(name);
    if (t == nullptr) {
      return absl::NotFoundError(absl::StrCat(ckpt_->dir(), ": missing tensor \"", prefix_, name, "\""));
    }
    TP_ASSIGN_OR_RETURN(std::vector<int64_t> out, ReadInts(*t, n));
    absl::MutexLock lock(&mu_);
    read_.insert(t->name);
    return out;
  }

  absl::Status CheckAllUsed(const TensorFilter& elsewhere) const override {
    std::vector<std::string> unused;
    {
      absl::MutexLock lock(&mu_);
      for (const std::string& name : ckpt_->Names()) {  // sorted
        if (read_.count(name) || IsIgnorableCheckpointTensor(name)) continue;
        if (elsewhere && absl::StartsWith(name, prefix_) && elsewhere(std::string_view(name).substr(prefix_.size()))) {
          continue;
        }
        if (elsewhere && (name == "lm_head.weight" || name == "language_model.lm_head.weight") &&
            elsewhere("lm_head.weight")) {
          continue;
        }
        unused.push_back(name);
      }
    }
    return UnreadTensorsStatus(absl::StrCat("checkpoint ", ckpt_->dir()), unused);
  }

 private:
  // The compressed matrix stored for `name` ("....weight"), built once; nullptr where the
  // tensor is stored as a float; an error where its parts disagree.
  absl::StatusOr<const CompressedMatrix*> Compressed(const std::string& name) const {
    absl::MutexLock lock(&mu_);
    auto it = compressed_.find(name);
    if (it != compressed_.end()) {
      if (!it->second.ok()) return it->second.status();
      return it->second->get();
    }
    absl::StatusOr<std::unique_ptr<CompressedMatrix>> m = BuildCompressed(name);
    const auto& slot = compressed_.emplace(name, std::move(m)).first->second;
    if (!slot.ok()) return slot.status();
    return slot->get();
  }

  absl::StatusOr<std::unique_ptr<CompressedMatrix>> BuildCompressed(const std::string& name) const {
    if (!name.ends_with(".weight")) return nullptr;
    auto m = std::make_unique<CompressedMatrix>();
    const TensorInfo* scale = Lookup(name + "_scale");
    if (const TensorInfo* packed = scheme_.int4 ? Lookup(name + "_packed") : nullptr) {
      const TensorInfo* shape = Lookup(name + "_shape");
      const std::string where = absl::StrCat(packed->file, ": tensor \"", packed->name, "\"");
      if (shape == nullptr || scale == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": packed int4 weights without their ", prefix_, name,
                                                       shape == nullptr ? "_shape" : "_scale", " tensor"));
      }
      for (const char* extra : {"_zero_point", "_g_idx"}) {
        if (Lookup(name + extra) != nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": ", name, extra,
                                                         " (asymmetric or activation-ordered int4) is not supported"));
        }
      }
      TP_ASSIGN_OR_RETURN(m->shape, ReadInts(*shape, 2));
      m->int4 = true;
      m->values = packed;
      const int64_t n = m->shape[0], k = m->shape[1];
      if (packed->dtype_name != "I32" || packed->shape != std::vector<int64_t>{n, (k + 7) / 8}) {
        return absl::InvalidArgumentError(absl::StrCat(where, " is ", packed->dtype_name, " ", ShapeStr(packed->shape),
                                                       "; int4 weights of shape ", ShapeStr(m->shape),
                                                       " pack into I32 [", n, ", ", (k + 7) / 8, "]"));
      }
      if (scale->shape.size() != 2 || scale->shape[0] != n || scale->shape[1] <= 0 || k % scale->shape[1] != 0 ||
          (k / scale->shape[1]) % 32 != 0) {
        return absl::InvalidArgumentError(absl::StrCat(scale->file, ": tensor \"", scale->name, "\" has shape ",
                                                       ShapeStr(scale->shape), "; int4 weights of shape ",
                                                       ShapeStr(m->shape), " want [", n, ", k / group] with a group of 32j"));
      }
      m->group = k / scale->shape[1];
      m->scale_cols = scale->shape[1];
    } else {
      const TensorInfo* values = Lookup(name);
      if (values == nullptr || values->dtype_name != "F8_E4M3") return nullptr;
      const std::string where = absl::StrCat(values->file, ": tensor \"", values->name, "\"");
      if (!scheme_.fp8) {
        return absl::InvalidArgumentError(absl::StrCat(where, " is F8_E4M3 but quantization_config has no fp8 group"));
      }
      if (scale == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(where, " is F8_E4M3 without its ", prefix_, name, "_scale tensor"));
      }
      if (Lookup(name.substr(0, name.size() - 6) + "input_scale") != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": static activation scales (input_scale) are not supported"));
      }
      if (values->shape.size() != 2) return absl::InvalidArgumentError(absl::StrCat(where, " is not a matrix"));
      m->values = values;
      m->shape = values->shape;
      const int64_t n = m->shape[0], k = m->shape[1];
      const std::vector<int64_t>& ss = scale->shape;
      int64_t numel = 1;
      for (int64_t d : ss) numel *= d;
      if (numel == 1) {
        m->block_rows = n;  // one scale for the whole tensor
      } else if (ss == std::vector<int64_t>{n, 1}) {
        m->block_rows = 1;
      } else if (ss == std::vector<int64_t>{(n + 127) / 128, (k + 127) / 128}) {
        m->block_rows = 128;
        m->scale_cols = ss[1];
      } else {
        return absl::InvalidArgumentError(absl::StrCat(scale->file, ": tensor \"", scale->name, "\" has shape ",
                                                       ShapeStr(ss), "; fp8 weights of shape ", ShapeStr(m->shape),
                                                       " want [1], [", n, ", 1] or 128x128 blocks [", (n + 127) / 128,
                                                       ", ", (k + 127) / 128, "]"));
      }
    }
    if (!scale->dtype_supported) {
      return absl::InvalidArgumentError(absl::StrCat(scale->file, ": tensor \"", scale->name, "\" has dtype ",
                                                     scale->dtype_name, "; supported: F32, BF16, F16"));
    }
    int64_t count = 1;
    for (int64_t d : scale->shape) count *= d;
    m->scale.resize(count);
    ToF32(scale->data, scale->dtype, count, m->scale.data());
    if (m->int4) {
      m->scale16.resize(count);
      for (int64_t i = 0; i < count; ++i) {
        m->scale16[i] = F32ToF16(m->scale[i]);
        if (F16ToF32(m->scale16[i]) != m->scale[i]) {
          m->scale16.clear();
          break;
        }
      }
    }
    if (!m->int4) {
      m->kept = DType::kF8_E4M3;
    } else if (!m->scale16.empty()) {
      m->kept = DType::kQ4_0;
    } else {
      m->widened = "int4 (compressed-tensors): group scales that are not all fp16 values (Q4_0 holds fp16 scales)";
    }
    for (const TensorInfo* t : {m->values, scale, m->int4 ? Lookup(name + "_shape") : nullptr}) {
      if (t != nullptr) m->names.push_back(t->name);
    }
    return m;
  }


  absl::Status ReadCompressed(const CompressedMatrix& m, const SliceRequest& r, DType dtype, void* dst) const {
    {
      absl::MutexLock lock(&mu_);
      read_.insert(m.names.begin(), m.names.end());
    }
    const std::string where = absl::StrCat(m.values->file, ": tensor \"", m.values->name, "\"");
    if (m.shape != r.shape) {
      return absl::InvalidArgumentError(absl::StrCat(where, " holds a matrix of shape ", ShapeStr(m.shape),
                                                     ", expected ", ShapeStr(r.shape), " from config.json"));
    }
    TP_RETURN_IF_ERROR(CheckSlice(r, where));
    const bool blocks = IsQuantized(dtype);
    if (blocks && (dtype != m.kept || r.col0 % BlockElems(dtype) != 0 || r.cols % BlockElems(dtype) != 0)) {
      return absl::InternalError(absl::StrCat(where, ": cannot be read as ", std::string(DTypeName(dtype)),
                                              " columns [", r.col0, ", ", r.col0 + r.cols, ")"));
    }
    const size_t src_row_bytes = m.int4 ? static_cast<size_t>((m.shape[1] + 7) / 8) * 4 : m.shape[1];
    const size_t out_row_bytes = RowBytes(dtype, r.cols);
    uint8_t* out = static_cast<uint8_t*>(dst);
    ForEachRowReleasing(r.rows, m.values->data + r.row0 * src_row_bytes, src_row_bytes, [&](int64_t i) {
      const int64_t row = r.row0 + i;
      const uint8_t* src = m.values->data + row * src_row_bytes;
      uint8_t* o = out + i * out_row_bytes;
      if (blocks && m.int4) {
        Int4RowToQ4_0(src, m.scale16.data() + row * m.scale_cols, m.group, r.col0, r.cols, o);
      } else if (blocks) {
        Fp8RowToBlocks(src, m.scale.data(), m.scale_cols, m.block_rows, row, r.col0, r.cols, o);
      } else {
        thread_local std::vector<float> wide;
        wide.resize(r.cols);
        if (m.int4) {
          Int4RowToF32(src, m.scale.data() + row * m.scale_cols, m.group, r.col0, r.cols, wide.data());
        } else {
          Fp8RowToF32(src, m.scale.data(), m.scale_cols, m.block_rows, row, r.col0, r.cols, wide.data());
        }
        ConvertRow(reinterpret_cast<const uint8_t*>(wide.data()), DType::kF32, r.cols, dtype, o);
      }
    });
    return absl::OkStatus();
  }

  const TensorInfo* Lookup(const std::string& name) const {
    if (name.starts_with("lm_head.")) {  // lm_head.weight and, quantized, its parts
      for (const char* p : {"", "language_model."}) {
        if (const TensorInfo* t = ckpt_->Find(p + name)) return t;
      }
      return nullptr;
    }
    return ckpt_->Find(prefix_ + name);
  }

  std::unique_ptr<Checkpoint> ckpt_;
  std::string prefix_;
  CompressedTensorsScheme scheme_;
  mutable absl::Mutex mu_;
  mutable std::set<std::string> read_ ABSL_GUARDED_BY(mu_);  // full names of tensors read
  mutable std::map<std::string, absl::StatusOr<std::unique_ptr<CompressedMatrix>>> compressed_ ABSL_GUARDED_BY(mu_);
};

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t HashName(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return SplitMix64(h);
}

class DummySource : public WeightSource {
 public:
  DummySource(const ModelConfig& c, uint64_t seed) : config_(c), seed_(seed) {}

  bool Has(const std::string& name) const override {
    if (name == "lm_head.weight") return !config_.tie_word_embeddings;
    return true;
  }
  std::string Describe() const override { return absl::StrCat("dummy(seed=", seed_, ")"); }
  // Every name it is asked for exists; there is no list of tensors to have left unread.
  absl::Status CheckAllUsed(const TensorFilter&) const override { return absl::OkStatus(); }

  absl::Status Read(const SliceRequest& r, DType dtype, void* dst) const override {
    TP_RETURN_IF_ERROR(CheckSlice(r, r.name));
    const uint64_t h = HashName(r.name, seed_);
    const int64_t full_cols = r.shape.size() == 1 ? r.shape[0] : r.shape[1];
    // Norm weights near their identity, scalars 1, matrices uniform with variance 1/fan_in.
    float center = 0.0f, amp = std::sqrt(3.0f / static_cast<float>(full_cols));
    const bool is_norm = r.name.find("norm") != std::string::npos;
    if (is_norm) {
      center = config_.norm_kind == cpu::NormKind::kOnePlusScale ? 0.0f : 1.0f;
      amp = 0.1f;
    } else if (r.name.find("layer_scalar") != std::string::npos) {
      center = 1.0f;
      amp = 0.0f;
    } else if (r.name.find("bias") != std::string::npos) {
      amp = 0.02f;
    } else if (r.name.find("embed_tokens") != std::string::npos) {
      amp = 1.0f;  // scaled by sqrt(hidden) at lookup, divided back by the norms
    }
    uint8_t* out = static_cast<uint8_t*>(dst);
    const size_t elem = DTypeSize(dtype);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < r.rows; ++i) {
      const uint64_t row_base = static_cast<uint64_t>(r.row0 + i) * static_cast<uint64_t>(full_cols);
      for (int64_t j = 0; j < r.cols; ++j) {
        const uint64_t bits = SplitMix64(h ^ (row_base + static_cast<uint64_t>(r.col0 + j)));
        const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
        const float v = center + amp * u;
        void* p = out + (i * r.cols + j) * elem;
        if (dtype == DType::kF32) {
          *static_cast<float*>(p) = v;
        } else {
          *static_cast<uint16_t*>(p) = dtype == DType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  ModelConfig config_;
  uint64_t seed_;
};

}  // namespace

absl::StatusOr<std::vector<int64_t>> WeightSource::ReadInt64(const std::string& name, int64_t /*n*/) const {
  return absl::UnimplementedError(absl::StrCat(Describe(), ": reading integer tensor \"", name, "\" is not supported"));
}

void ReleaseMappedPages(const void* p, size_t bytes) {
  if (bytes == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) / page * page;
  // Advice only: where the kernel refuses, the pages just stay resident.
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void ConvertRow(const uint8_t* src, DType src_dtype, int64_t n, DType dst_dtype, void* dst) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, n * DTypeSize(src_dtype));
    return;
  }
  if (dst_dtype == DType::kF32) {
    ToF32(src, src_dtype, n, static_cast<float*>(dst));
    return;
  }
  // To a 16-bit type: through fp32, a chunk at a time (one ToF32 call per chunk).
  constexpr int64_t kChunk = 256;
  float buf[kChunk];
  uint16_t* o = static_cast<uint16_t*>(dst);
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    ToF32(src + i0 * DTypeSize(src_dtype), src_dtype, m, buf);
    for (int64_t i = 0; i < m; ++i) o[i0 + i] = dst_dtype == DType::kBF16 ? F32ToBf16(buf[i]) : F32ToF16(buf[i]);
  }
}

absl::Status CheckSlice(const SliceRequest& r, const std::string& where) {
  const auto bad = [&] { return absl::InternalError(absl::StrCat(where, ": bad slice request")); };
  if (r.shape.empty() || r.shape.size() > 2) return bad();
  const int64_t full_rows = r.shape.size() == 1 ? 1 : r.shape[0];
  const int64_t full_cols = r.shape.size() == 1 ? r.shape[0] : r.shape[1];
  if (r.row0 < 0 || r.col0 < 0 || r.rows < 0 || r.cols < 0 || r.row0 + r.rows > full_rows ||
      r.col0 + r.cols > full_cols) {
    return bad();
  }
  return absl::OkStatus();
}

absl::Status UnreadTensorsStatus(const std::string& where, const std::vector<std::string>& unread) {
  if (unread.empty()) return absl::OkStatus();
  constexpr size_t kNamed = 5;
  const size_t n = unread.size();
  std::string names = absl::StrJoin(unread.begin(), unread.begin() + std::min(n, kNamed), ", ");
  if (n > kNamed) absl::StrAppend(&names, ", ... (", n - kNamed, " more)");
  return absl::InvalidArgumentError(absl::StrCat(where, " has ", n, n == 1 ? " tensor" : " tensors",
                                                 " no layer read: ", names,
                                                 " (a different architecture or an unsupported option?)"));
}

bool IsIgnorableCheckpointTensor(std::string_view name) {
  if (name == "lm_head.weight" || name == "language_model.lm_head.weight") return true;
  if (name.ends_with(".inv_freq")) return true;
  // Towers sit beside the language model, at the top level or under "model.".
  std::string_view rest = name;
  if (rest.starts_with("model.")) rest.remove_prefix(6);
  const std::string_view top = rest.substr(0, rest.find('.'));
  for (std::string_view tower :
       {"vision_tower", "multi_modal_projector", "audio_tower", "embed_vision", "embed_audio"}) {
    if (top == tower && rest.size() > top.size()) return true;
  }
  return false;
}

namespace {

// DIR/config.json's compressed-tensors scheme (none where there is no config.json).
absl::StatusOr<CompressedTensorsScheme> CheckpointScheme(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(path);
  if (!in) return CompressedTensorsScheme{};
  std::stringstream text;
  text << in.rdbuf();
  return ParseCompressedTensorsConfig(text.str(), path);
}

}  // namespace

absl::StatusOr<std::unique_ptr<WeightSource>> OpenCheckpointSource(const std::string& dir) {
  TP_ASSIGN_OR_RETURN(CompressedTensorsScheme scheme, CheckpointScheme(dir));
  TP_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(dir));
  for (const char* prefix : {"model.", "model.language_model.", "language_model.model.", ""}) {
    if (ckpt->Find(std::string(prefix) + "embed_tokens.weight") != nullptr) {
      return std::unique_ptr<WeightSource>(new CheckpointSource(std::move(ckpt), prefix, std::move(scheme)));
    }
  }
  return absl::NotFoundError(absl::StrCat(
      dir, ": missing tensor \"model.embed_tokens.weight\" (also looked for model.language_model.embed_tokens.weight "
           "and language_model.model.embed_tokens.weight): not a supported checkpoint layout"));
}

absl::StatusOr<std::unique_ptr<WeightSource>> OpenCheckpointSourceWithPrefix(const std::string& dir,
                                                                            const std::string& prefix) {
  TP_ASSIGN_OR_RETURN(CompressedTensorsScheme scheme, CheckpointScheme(dir));
  TP_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(dir));
  return std::unique_ptr<WeightSource>(new CheckpointSource(std::move(ckpt), prefix, std::move(scheme)));
}

namespace {

// Floats QuantizingSource reads at a time (16 MiB).
constexpr int64_t kQuantizeChunkFloats = int64_t{4} << 20;

class QuantizingSource : public WeightSource {
 public:
  QuantizingSource(std::unique_ptr<WeightSource> inner, DType target) : inner_(std::move(inner)), target_(target) {}
  bool Has(const std::string& name) const override { return inner_->Has(name); }
  std::optional<DType> QuantizedDType(const std::string& name) const override {
    if (std::optional<DType> own = inner_->QuantizedDType(name)) return own;
    if (!inner_->Has(name)) return std::nullopt;
    return target_;
  }
  std::string Describe() const override {
    return absl::StrCat(inner_->Describe(), " (matrices quantized at load to ", std::string(DTypeName(target_)), ")");
  }
  absl::Status Read(const SliceRequest& req, DType dtype, void* dst) const override {
    if (dtype != target_ || inner_->QuantizedDType(req.name)) return inner_->Read(req, dtype, dst);
    if (req.cols % BlockElems(target_) != 0) {
      return absl::InternalError(absl::StrCat(req.name, ": ", req.cols, " columns are not whole ",
                                              std::string(DTypeName(target_)), " blocks"));
    }
    // Read as fp32 a bounded run of rows at a time: a whole matrix in fp32 is twice its bf16
    // bytes (the 262,144-row embedding of a Gemma is 5.6 GB at 31B), all of it on top of the
    // quantized weights at the load's peak.
    const int64_t chunk_rows = std::max<int64_t>(1, kQuantizeChunkFloats / std::max<int64_t>(1, req.cols));
    std::vector<float> rows(static_cast<size_t>(std::min(req.rows, chunk_rows) * req.cols));
    const size_t row_bytes = RowBytes(target_, req.cols);
    for (int64_t r0 = 0; r0 < req.rows; r0 += chunk_rows) {
      SliceRequest part = req;
      part.row0 = req.row0 + r0;
      part.rows = std::min(chunk_rows, req.rows - r0);
      TP_RETURN_IF_ERROR(inner_->Read(part, DType::kF32, rows.data()));
      for (int64_t r = 0; r < part.rows; ++r) {
        uint8_t* out = static_cast<uint8_t*>(dst) + (r0 + r) * row_bytes;
        if (target_ == DType::kQ8_0) {
          cpu::QuantizeRowQ8_0(rows.data() + r * req.cols, req.cols, out);
        } else {
          cpu::QuantizeRowF8E4M3(rows.data() + r * req.cols, req.cols, out);
        }
      }
    }
    return absl::OkStatus();
  }
  absl::Status CheckAllUsed(const TensorFilter& elsewhere) const override { return inner_->CheckAllUsed(elsewhere); }
  absl::StatusOr<std::vector<int64_t>> ReadInt64(const std::string& name, int64_t n) const override {
    return inner_->ReadInt64(name, n);
  }

 private:
  std::unique_ptr<WeightSource> inner_;
  DType target_;
};

}  // namespace

std::unique_ptr<WeightSource> QuantizeAtLoad(std::unique_ptr<WeightSource> inner, DType target) {
  TP_CHECK(target == DType::kQ8_0 || target == DType::kF8_E4M3);
  return std::make_unique<QuantizingSource>(std::move(inner), target);
}

std::unique_ptr<WeightSource> MakeDummySource(const ModelConfig& config, uint64_t seed) {
  return std::make_unique<DummySource>(config, seed);
}

}  // namespace tpserve
