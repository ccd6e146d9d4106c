// Memory-mapped safetensors checkpoints: one file, or many through
// model.safetensors.index.json. Headers are validated on open so a truncated or corrupt
// file is an error that names it. Tested by tests/safetensors_test.cc.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/base.h"

namespace tpserve {

struct TensorInfo {
  std::string name;
  std::string dtype_name;  // as in the header ("BF16", "F32", "I64", ...)
  bool dtype_supported = false;
  DType dtype = DType::kF32;  // valid when dtype_supported
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping
  size_t nbytes = 0;
  std::string file;  // path, for error messages
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const TensorInfo* Find(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<std::string, TensorInfo> tensors_;
};

// All tensors of a checkpoint directory.
class Checkpoint {
 public:
  // DIR/model.safetensors.index.json if present, else DIR/model.safetensors, else every
  // DIR/*.safetensors.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const TensorInfo* Find(const std::string& name) const;
  std::vector<std::string> Names() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

}  // namespace tpserve
