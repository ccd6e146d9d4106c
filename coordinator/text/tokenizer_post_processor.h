// The `post_processor` stage of a tokenizer.json pipeline: adds special tokens such as
// BOS around an encoded sequence. Tested through tests/tokenizer_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/text/tokenizer_json.h"

namespace tpserve::tokenizer_internal {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens of a single-sequence encoding when `add_special_tokens`.
  virtual void Process(std::vector<int32_t>* ids, bool add_special_tokens) const = 0;
  // The id the processor puts first, if it always starts with one special token.
  virtual std::optional<int32_t> LeadingId() const { return std::nullopt; }
};

// Supported types: TemplateProcessing, Sequence, ByteLevel (ids unchanged),
// BertProcessing, RobertaProcessing. Anything else is an error naming the type.
absl::StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const Json& j,
                                                                  const JsonPath& at);

// `[prefix...] $A [suffix...]`, as transformers builds from add_bos_token/add_eos_token.
std::unique_ptr<PostProcessor> MakeWrapProcessor(std::vector<int32_t> prefix,
                                                 std::vector<int32_t> suffix);

}  // namespace tpserve::tokenizer_internal
