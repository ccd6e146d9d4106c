// The `normalizer` stage of a tokenizer.json pipeline: rewrites each stretch of input
// text between added tokens before pre-tokenization. Tested through tests/tokenizer_test.cc.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/text/tokenizer_json.h"

namespace tpserve::tokenizer_internal {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8 and stays so.
  virtual void Normalize(std::string* text) const = 0;
};

// Supported types: Sequence, Replace, Prepend, NFC, NFD, NFKC, NFKD, Lowercase, Strip,
// StripAccents, ByteLevel. Anything else is an error naming the type.
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& j, const JsonPath& at);

}  // namespace tpserve::tokenizer_internal
