// Safetensors parsing and mmap. Tested by tests/safetensors_test.cc.
#include "worker/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using json = nlohmann::json;

bool ParseStDType(const std::string& s, DType* out, size_t* elem_bytes) {
  if (s == "F32") { *out = DType::kF32; *elem_bytes = 4; return true; }
  if (s == "BF16") { *out = DType::kBF16; *elem_bytes = 2; return true; }
  if (s == "F16") { *out = DType::kF16; *elem_bytes = 2; return true; }
  return false;
}

size_t ElemBytesAny(const std::string& s) {
  if (s == "F64" || s == "I64" || s == "U64") return 8;
  if (s == "F32" || s == "I32" || s == "U32") return 4;
  if (s == "F16" || s == "BF16" || s == "I16" || s == "U16") return 2;
  if (s == "I8" || s == "U8" || s == "BOOL" || s.rfind("F8", 0) == 0) return 1;
  return 0;
}

}  // namespace

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  auto f = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  f->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open (", std::strerror(errno), ")"));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": stat failed (", std::strerror(errno), ")"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, ": truncated safetensors file (", size, " bytes, no header)"));
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": mmap failed (", std::strerror(errno), ")"));
  f->map_ = map;
  f->map_bytes_ = size;
  const uint8_t* base = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);  // little-endian on every platform we build for
  if (header_len > size - 8 || header_len > (100u << 20)) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt or truncated safetensors header (header length ",
                                            header_len, ", file size ", size, ")"));
  }
  const uint8_t* data = base + 8 + header_len;
  const size_t data_bytes = size - 8 - header_len;
  json h = json::parse(base + 8, base + 8 + header_len, nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded() || !h.is_object()) {
    return absl::DataLossError(absl::StrCat(path, ": safetensors header is not a JSON object"));
  }
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json& e = it.value();
    const std::string where = absl::StrCat(path, ": tensor \"", it.key(), "\"");
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      return absl::DataLossError(absl::StrCat(where, ": malformed header entry"));
    }
    TensorInfo t;
    t.name = it.key();
    t.file = path;
    t.dtype_name = e["dtype"].get<std::string>();
    size_t elem = 0;
    t.dtype_supported = ParseStDType(t.dtype_name, &t.dtype, &elem);
    if (!t.dtype_supported) elem = ElemBytesAny(t.dtype_name);
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return absl::DataLossError(absl::StrCat(where, ": bad shape"));
      t.shape.push_back(d.get<int64_t>());
      numel *= static_cast<uint64_t>(d.get<int64_t>());
    }
    const json& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return absl::DataLossError(absl::StrCat(where, ": bad data_offsets"));
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_bytes) {
      return absl::DataLossError(absl::StrCat(where, ": data [", begin, ", ", end, ") lies beyond the end of the file (",
                                              data_bytes, " data bytes): the file is truncated"));
    }
    if (elem != 0 && end - begin != numel * elem) {
      return absl::DataLossError(absl::StrCat(where, ": ", end - begin, " bytes do not match shape and dtype ",
                                              t.dtype_name, " (", numel * elem, " bytes)"));
    }
    t.data = data + begin;
    t.nbytes = end - begin;
    f->tensors_.emplace(t.name, std::move(t));
  }
  return f;
}

const TensorInfo* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  namespace fs = std::filesystem;
  auto c = std::make_unique<Checkpoint>();
  c->dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return absl::NotFoundError(absl::StrCat(dir, ": not a directory"));
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::vector<std::string> files;
  std::map<std::string, std::string> weight_map;
  if (fs::exists(index_path, ec)) {
    std::ifstream in(index_path);
    std::stringstream ss;
    ss << in.rdbuf();
    json j = json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": not valid JSON with a \"weight_map\" object"));
    }
    std::set<std::string> seen;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map entry \"", it.key(), "\" is not a file name"));
      }
      weight_map[it.key()] = it.value().get<std::string>();
      if (seen.insert(it.value().get<std::string>()).second) files.push_back(it.value().get<std::string>());
    }
  } else if (fs::exists(dir + "/model.safetensors", ec)) {
    files.push_back("model.safetensors");
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors") files.push_back(e.path().filename().string());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      return absl::NotFoundError(absl::StrCat(dir, ": no model.safetensors, model.safetensors.index.json or *.safetensors"));
    }
  }
  for (const auto& name : files) {
    TP_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(dir + "/" + name));
    for (const auto& [tname, info] : f->tensors()) {
      auto wm = weight_map.find(tname);
      if (!weight_map.empty() && (wm == weight_map.end() || wm->second != name)) continue;
      c->index_[tname] = &info;
    }
    c->files_.push_back(std::move(f));
  }
  for (const auto& [tname, file] : weight_map) {
    if (!c->index_.count(tname)) {
      return absl::NotFoundError(absl::StrCat(dir, "/", file, ": tensor \"", tname,
                                              "\" listed in model.safetensors.index.json is missing from the file"));
    }
  }
  return c;
}

const TensorInfo* Checkpoint::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> n;
  for (const auto& [k, v] : index_) n.push_back(k);
  return n;
}

}  // namespace tpserve
