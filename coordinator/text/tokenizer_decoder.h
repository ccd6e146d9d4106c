// The `decoder` stage of a tokenizer.json pipeline: turns token strings back into
// text. Tested through tests/tokenizer_test.cc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/text/tokenizer_json.h"

namespace tpserve::tokenizer_internal {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings in place; the caller concatenates the result. Valid
  // UTF-8 in, valid UTF-8 out.
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
};

// Supported types: Sequence, ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace.
// Anything else is an error naming the type.
absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& j, const JsonPath& at);

}  // namespace tpserve::tokenizer_internal
