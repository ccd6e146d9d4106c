// Bounds on the text one token stands for, from a tokenizer.json's normalizer and
// pre-tokenizer sections (already validated by their parsers). Tested by
// tests/tokenizer_test.cc.
#include "coordinator/text/tokenizer_text_bound.h"

#include <string>

namespace tpserve::tokenizer_internal {
namespace {

std::string TypeOf(const Json& j) {
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

std::optional<int64_t> NormalizerShrinkFactor(const Json* normalizer) {
  if (normalizer == nullptr || normalizer->is_null()) return 1;
  const std::string type = TypeOf(*normalizer);
  if (type == "Sequence") {
    int64_t factor = 1;
    const auto steps = normalizer->find("normalizers");
    if (steps == normalizer->end() || !steps->is_array()) return std::nullopt;
    for (const Json& step : *steps) {
      const std::optional<int64_t> f = NormalizerShrinkFactor(&step);
      if (!f || factor > (int64_t{1} << 20)) return std::nullopt;
      factor *= *f;
    }
    return factor;
  }
  if (type == "Prepend" || type == "ByteLevel" || type == "Strip") return 1;
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD" || type == "Lowercase") return 4;
  if (type == "Replace") {
    const auto pattern = normalizer->find("pattern");
    const auto content = normalizer->find("content");
    if (pattern == normalizer->end() || content == normalizer->end() || !content->is_string()) return std::nullopt;
    const auto literal = pattern->find("String");
    if (literal == pattern->end() || !literal->is_string()) return std::nullopt;  // a regex
    return content->get<std::string>().size() >= literal->get<std::string>().size() ? std::optional<int64_t>(1)
                                                                                     : std::nullopt;
  }
  return std::nullopt;  // StripAccents, and anything new
}

bool PreTokenizerDropsText(const Json* pre_tokenizer) {
  if (pre_tokenizer == nullptr || pre_tokenizer->is_null()) return false;
  const std::string type = TypeOf(*pre_tokenizer);
  if (type == "Sequence") {
    const auto steps = pre_tokenizer->find("pretokenizers");
    if (steps == pre_tokenizer->end() || !steps->is_array()) return true;
    for (const Json& step : *steps) {
      if (PreTokenizerDropsText(&step)) return true;
    }
    return false;
  }
  if (type == "Split") {
    const auto behavior = pre_tokenizer->find("behavior");
    return behavior == pre_tokenizer->end() || !behavior->is_string() || *behavior == "Removed";
  }
  return type != "ByteLevel" && type != "Metaspace" && type != "Digits";
}

}  // namespace tpserve::tokenizer_internal
