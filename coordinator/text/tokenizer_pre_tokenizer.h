// The `pre_tokenizer` stage of a tokenizer.json pipeline: splits normalized text into
// the words the model encodes one by one. Tested through tests/tokenizer_test.cc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/text/tokenizer_json.h"

namespace tpserve::tokenizer_internal {

struct PreToken {
  std::string text;
  // True when this piece begins at offset 0 of the caller's input (Metaspace's
  // prepend_scheme "first" adds its space only there).
  bool at_input_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` with their splits; empty pieces are dropped.
  virtual void PreTokenize(std::vector<PreToken>* pieces) const = 0;
};

// Supported types: Sequence, Split, ByteLevel, Metaspace, Digits. Anything else is an
// error naming the type.
absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& j, const JsonPath& at);

}  // namespace tpserve::tokenizer_internal
