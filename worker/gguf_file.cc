// GGUF container parsing over a read-only memory mapping. Tested by tests/gguf_test.cc.
#include "worker/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

struct LayoutEntry {
  GgmlType type;
  GgmlTypeLayout layout;
};

// ggml's type traits (ggml.c type_traits: blck_size, type_size).
constexpr LayoutEntry kLayouts[] = {
    {GgmlType::kF32, {"F32", 1, 4}},          {GgmlType::kF16, {"F16", 1, 2}},
    {GgmlType::kQ4_0, {"Q4_0", 32, 18}},      {GgmlType::kQ4_1, {"Q4_1", 32, 20}},
    {GgmlType::kQ5_0, {"Q5_0", 32, 22}},      {GgmlType::kQ5_1, {"Q5_1", 32, 24}},
    {GgmlType::kQ8_0, {"Q8_0", 32, 34}},      {GgmlType::kQ8_1, {"Q8_1", 32, 40}},
    {GgmlType::kQ2_K, {"Q2_K", 256, 84}},     {GgmlType::kQ3_K, {"Q3_K", 256, 110}},
    {GgmlType::kQ4_K, {"Q4_K", 256, 144}},    {GgmlType::kQ5_K, {"Q5_K", 256, 176}},
    {GgmlType::kQ6_K, {"Q6_K", 256, 210}},    {GgmlType::kQ8_K, {"Q8_K", 256, 292}},
    {GgmlType::kIQ2_XXS, {"IQ2_XXS", 256, 66}}, {GgmlType::kIQ2_XS, {"IQ2_XS", 256, 74}},
    {GgmlType::kIQ3_XXS, {"IQ3_XXS", 256, 98}}, {GgmlType::kIQ1_S, {"IQ1_S", 256, 50}},
    {GgmlType::kIQ4_NL, {"IQ4_NL", 32, 18}},  {GgmlType::kIQ3_S, {"IQ3_S", 256, 110}},
    {GgmlType::kIQ2_S, {"IQ2_S", 256, 82}},   {GgmlType::kIQ4_XS, {"IQ4_XS", 256, 136}},
    {GgmlType::kI8, {"I8", 1, 1}},            {GgmlType::kI16, {"I16", 1, 2}},
    {GgmlType::kI32, {"I32", 1, 4}},          {GgmlType::kI64, {"I64", 1, 8}},
    {GgmlType::kF64, {"F64", 1, 8}},          {GgmlType::kIQ1_M, {"IQ1_M", 256, 56}},
    {GgmlType::kBF16, {"BF16", 1, 2}},        {GgmlType::kTQ1_0, {"TQ1_0", 256, 54}},
    {GgmlType::kTQ2_0, {"TQ2_0", 256, 66}},   {GgmlType::kMXFP4, {"MXFP4", 32, 17}},  {GgmlType::kNVFP4, {"NVFP4", 64, 36}},
    {GgmlType::kQ1_0, {"Q1_0", 128, 18}},
};

// GGUF metadata value kinds (gguf_type).
enum ValueKind : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32v = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64v = 12,
};

// Bounds-checked little-endian reads from the mapping; every failure names the file and
// what was being read when the bytes ran out.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  size_t offset() const { return pos_; }

  template <typename T>
  absl::Status Read(T* out, absl::string_view what) {
    if (size_ - pos_ < sizeof(T)) return Truncated(what);
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadString(std::string* out, absl::string_view what) {
    uint64_t n = 0;
    TP_RETURN_IF_ERROR(Read(&n, what));
    if (n > size_ - pos_) return Truncated(what);
    out->assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return absl::OkStatus();
  }

  absl::Status Truncated(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": truncated or corrupt GGUF file (ran out of bytes reading ",
                                                   what, " at offset ", pos_, " of ", size_, ")"));
  }

  size_t remaining() const { return size_ - pos_; }

  absl::Status Skip(uint64_t n, absl::string_view what) {
    if (n > size_ - pos_) return Truncated(what);
    pos_ += n;
    return absl::OkStatus();
  }
  void Seek(size_t pos) { pos_ = std::min(pos, size_); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

absl::Status ReadScalar(Reader& r, uint32_t kind, nlohmann::json* out, absl::string_view what) {
  switch (kind) {
#define TP_GGUF_SCALAR(K, T)            \
  case K: {                             \
    T v{};                              \
    TP_RETURN_IF_ERROR(r.Read(&v, what)); \
    *out = v;                           \
    return absl::OkStatus();            \
  }
    TP_GGUF_SCALAR(kU8, uint8_t)
    TP_GGUF_SCALAR(kI8, int8_t)
    TP_GGUF_SCALAR(kU16, uint16_t)
    TP_GGUF_SCALAR(kI16, int16_t)
    TP_GGUF_SCALAR(kU32, uint32_t)
    TP_GGUF_SCALAR(kI32, int32_t)
    TP_GGUF_SCALAR(kF32v, float)
    TP_GGUF_SCALAR(kU64, uint64_t)
    TP_GGUF_SCALAR(kI64, int64_t)
    TP_GGUF_SCALAR(kF64v, double)
#undef TP_GGUF_SCALAR
    case kBool: {
      uint8_t v = 0;
      TP_RETURN_IF_ERROR(r.Read(&v, what));
      *out = v != 0;
      return absl::OkStatus();
    }
    case kString: {
      std::string s;
      TP_RETURN_IF_ERROR(r.ReadString(&s, what));
      *out = std::move(s);
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown metadata value type ", kind, " in ", what));
  }
}

// Smallest encoded size of one value of `kind` (to reject absurd array lengths before
// allocating for them).
size_t MinValueBytes(uint32_t kind) {
  switch (kind) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32v: return 4;
    case kString: case kU64: case kI64: case kF64v: return 8;
    default: return 12;  // a nested array's header
  }
}

struct ArrayHeader {
  uint32_t elem_kind = 0;
  uint64_t n = 0;
};

// An array value's element kind and count, checked against the nesting depth and against the
// bytes left (to reject absurd lengths before allocating for them).
absl::StatusOr<ArrayHeader> ReadArrayHeader(Reader& r, absl::string_view what, int depth) {
  if (depth > 4) return absl::InvalidArgumentError(absl::StrCat("arrays nested too deep in ", what));
  ArrayHeader h;
  TP_RETURN_IF_ERROR(r.Read(&h.elem_kind, what));
  TP_RETURN_IF_ERROR(r.Read(&h.n, what));
  if (h.n > r.remaining() / MinValueBytes(h.elem_kind)) return r.Truncated(what);
  return h;
}

absl::Status ReadValue(Reader& r, uint32_t kind, nlohmann::json* out, absl::string_view what, int depth) {
  if (kind != kArray) return ReadScalar(r, kind, out, what);
  TP_ASSIGN_OR_RETURN(const ArrayHeader h, ReadArrayHeader(r, what, depth));
  *out = nlohmann::json::array();
  out->get_ref<nlohmann::json::array_t&>().reserve(h.n);
  for (uint64_t i = 0; i < h.n; ++i) {
    nlohmann::json v;
    TP_RETURN_IF_ERROR(ReadValue(r, h.elem_kind, &v, what, depth + 1));
    out->push_back(std::move(v));
  }
  return absl::OkStatus();
}

// Walks over one value of `kind` (an array's elements included) without building it, with
// the bounds checks ReadValue makes: a held-back array is as well-formed as a held one.
absl::Status SkipValue(Reader& r, uint32_t kind, absl::string_view what, int depth) {
  switch (kind) {
    case kString: {
      uint64_t n = 0;
      TP_RETURN_IF_ERROR(r.Read(&n, what));
      return r.Skip(n, what);
    }
    case kArray: {
      TP_ASSIGN_OR_RETURN(const ArrayHeader h, ReadArrayHeader(r, what, depth));
      if (h.elem_kind != kString && h.elem_kind != kArray) {
        if (MinValueBytes(h.elem_kind) == 12) {  // not a scalar kind either
          return absl::InvalidArgumentError(absl::StrCat("unknown metadata value type ", h.elem_kind, " in ", what));
        }
        return r.Skip(h.n * MinValueBytes(h.elem_kind), what);
      }
      for (uint64_t i = 0; i < h.n; ++i) TP_RETURN_IF_ERROR(SkipValue(r, h.elem_kind, what, depth + 1));
      return absl::OkStatus();
    }
    default: {
      nlohmann::json scalar;
      return ReadScalar(r, kind, &scalar, what);
    }
  }
}

}  // namespace

absl::StatusOr<GgmlTypeLayout> GgmlLayout(uint32_t type) {
  for (const LayoutEntry& e : kLayouts) {
    if (static_cast<uint32_t>(e.type) == type) return e.layout;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown ggml tensor type ", type));
}

int64_t GgufTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

size_t GgufTensor::row_bytes() const {
  const GgmlTypeLayout l = *GgmlLayout(static_cast<uint32_t>(type));  // checked on open
  return static_cast<size_t>(ne.empty() ? 1 : ne[0]) / l.block_elems * l.block_bytes;
}

GgufFile::~GgufFile() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path, const GgufOpenOptions& options) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->held_array_elements_ = options.held_array_elements;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < 24) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a GGUF file (", st.st_size, " bytes)"));
  }
  f->map_bytes_ = static_cast<size_t>(st.st_size);
  void* m = mmap(nullptr, f->map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
  f->map_ = m;
  TP_RETURN_IF_ERROR(f->Parse());
  return f;
}

absl::Status GgufFile::Parse() {
  const auto* base = static_cast<const uint8_t*>(map_);
  Reader r(base, map_bytes_, path_);
  char magic[4];
  TP_RETURN_IF_ERROR(r.Read(&magic, "the magic"));
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": not a GGUF file (no \"GGUF\" magic)"));
  }
  TP_RETURN_IF_ERROR(r.Read(&version_, "the version"));
  if (version_ != 2 && version_ != 3) {
    // A big-endian file's version reads byte-swapped (0x03000000).
    const bool swapped = version_ == 0x02000000u || version_ == 0x03000000u;
    return absl::InvalidArgumentError(absl::StrCat(
        path_, swapped ? ": a big-endian GGUF file; only little-endian files are supported"
                       : absl::StrCat(": GGUF version ", version_, " is not supported (2 and 3 are)")));
  }
  uint64_t n_tensors = 0, n_kv = 0;
  TP_RETURN_IF_ERROR(r.Read(&n_tensors, "the tensor count"));
  TP_RETURN_IF_ERROR(r.Read(&n_kv, "the metadata count"));
  if (n_kv > r.remaining() / 13 || n_tensors > r.remaining() / 24) return r.Truncated("the header counts");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    TP_RETURN_IF_ERROR(r.ReadString(&key, absl::StrCat("metadata key #", i)));
    uint32_t kind = 0;
    TP_RETURN_IF_ERROR(r.Read(&kind, key));
    if (metadata_.count(key) != 0 || large_arrays_.count(key) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": metadata key \"", key, "\" appears twice"));
    }
    const std::string what = absl::StrCat("metadata \"", key, "\"");
    if (kind == kArray) {
      const size_t at = r.offset();
      absl::StatusOr<ArrayHeader> h = ReadArrayHeader(r, what, 0);
      if (!h.ok()) return absl::InvalidArgumentError(absl::StrCat(path_, ": ", h.status().message()));
      r.Seek(at);
      if (h->n > held_array_elements_) {
        absl::Status s = SkipValue(r, kind, what, 0);
        if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(path_, ": ", s.message()));
        large_arrays_.emplace(key, at);
        continue;
      }
    }
    nlohmann::json value;
    absl::Status s = ReadValue(r, kind, &value, what, 0);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(path_, ": ", s.message()));
    metadata_.emplace(key, std::move(value));
  }
  if (const nlohmann::json* a = Find("general.alignment")) {
    if (!a->is_number_integer() || a->get<int64_t>() <= 0 || (a->get<int64_t>() & (a->get<int64_t>() - 1)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": general.alignment ", a->dump(),
                                                     " is not a positive power of two"));
    }
    alignment_ = a->get<size_t>();
  }

  std::vector<uint64_t> offsets;  // into the data section, until its start is known
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    TP_RETURN_IF_ERROR(r.ReadString(&t.name, absl::StrCat("tensor info #", i)));
    uint32_t n_dims = 0;
    TP_RETURN_IF_ERROR(r.Read(&n_dims, t.name));
    if (n_dims == 0 || n_dims > 4) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor \"", t.name, "\" has ", n_dims, " dimensions"));
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      TP_RETURN_IF_ERROR(r.Read(&ne, t.name));
      if (ne == 0 || ne > (uint64_t{1} << 40)) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor \"", t.name, "\" has dimension ", ne));
      }
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    uint32_t type = 0;
    uint64_t offset = 0;
    TP_RETURN_IF_ERROR(r.Read(&type, t.name));
    TP_RETURN_IF_ERROR(r.Read(&offset, t.name));
    absl::StatusOr<GgmlTypeLayout> layout = GgmlLayout(type);
    if (!layout.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor \"", t.name, "\": ", layout.status().message()));
    }
    if (t.ne[0] % layout->block_elems != 0) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor \"", t.name, "\" (", layout->name,
                                                     ") has rows of ", t.ne[0], " elements, not a multiple of its ",
                                                     layout->block_elems, "-element blocks"));
    }
    t.type = static_cast<GgmlType>(type);
    t.nbytes = static_cast<size_t>(t.elements() / layout->block_elems * layout->block_bytes);
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor \"", t.name, "\" appears twice"));
    }
    tensors_.push_back(std::move(t));
    offsets.push_back(offset);
  }
  const size_t data_start = (r.offset() + alignment_ - 1) / alignment_ * alignment_;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensor& t = tensors_[i];
    const uint64_t off = offsets[i];
    if (off % alignment_ != 0 || data_start > map_bytes_ || off > map_bytes_ - data_start ||
        t.nbytes > map_bytes_ - data_start - off) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor \"", t.name, "\" (", t.nbytes,
                                                     " bytes at data offset ", off, ") lies outside the file (",
                                                     map_bytes_, " bytes): truncated or corrupt"));
    }
    t.data = base + data_start + off;
  }
  header_bytes_ = std::min(data_start, map_bytes_);
  ReleaseHeaderPages();
  return absl::OkStatus();
}

void GgufFile::ReleaseHeaderPages() const {
  // Whole pages only, so that the first tensor's are left alone; advice only: where the
  // kernel refuses, the pages stay resident.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = header_bytes_ / page * page;
  if (bytes > 0) madvise(map_, bytes, MADV_DONTNEED);
}

absl::StatusOr<std::optional<nlohmann::json>> GgufFile::ReadArray(absl::string_view key) const {
  if (const nlohmann::json* held = Find(key)) return *held;
  const auto it = large_arrays_.find(key);
  if (it == large_arrays_.end()) return std::nullopt;
  Reader r(static_cast<const uint8_t*>(map_), map_bytes_, path_);
  r.Seek(it->second);
  nlohmann::json value;
  absl::Status s = ReadValue(r, kArray, &value, absl::StrCat("metadata \"", key, "\""), 0);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(path_, ": ", s.message()));
  return value;
}

absl::StatusOr<std::map<std::string, nlohmann::json, std::less<>>> GgufFile::MetadataWithLargeArrays() const {
  std::map<std::string, nlohmann::json, std::less<>> all = metadata_;
  for (const auto& [key, offset] : large_arrays_) {
    TP_ASSIGN_OR_RETURN(std::optional<nlohmann::json> value, ReadArray(key));
    all.emplace(key, *std::move(value));
  }
  ReleaseHeaderPages();
  return all;
}

const nlohmann::json* GgufFile::Find(absl::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat(path_, ": metadata \"", key, "\" is missing"));
  if (!v->is_string()) return absl::InvalidArgumentError(absl::StrCat(path_, ": metadata \"", key, "\" is not a string"));
  return v->get<std::string>();
}

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat(path_, ": metadata \"", key, "\" is missing"));
  if (!v->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": metadata \"", key, "\" is not an integer"));
  }
  return v->get<int64_t>();
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat(path_, ": metadata \"", key, "\" is missing"));
  if (!v->is_number()) return absl::InvalidArgumentError(absl::StrCat(path_, ": metadata \"", key, "\" is not a number"));
  return v->get<double>();
}

const GgufTensor* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<std::string> FindGgufFile(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(model_path, ec)) return model_path;
  if (!fs::is_directory(model_path, ec)) return absl::NotFoundError(absl::StrCat(model_path, ": no such file or directory"));
  std::vector<std::string> found;
  for (const fs::directory_entry& e : fs::directory_iterator(model_path, ec)) {
    if (e.is_regular_file() && e.path().extension() == ".gguf") found.push_back(e.path().string());
  }
  std::sort(found.begin(), found.end());
  if (found.empty()) return absl::NotFoundError(absl::StrCat(model_path, " holds no .gguf file"));
  if (found.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(model_path, " holds ", found.size(), " .gguf files (",
                                                   absl::StrJoin(found, ", "),
                                                   "); pass the one to load as --model FILE.gguf"));
  }
  return found[0];
}

}  // namespace tpserve
