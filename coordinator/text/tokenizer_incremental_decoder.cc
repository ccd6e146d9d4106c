// Incremental detokenization with the prefix/read offset scheme.
// Tested by tests/tokenizer_test.cc.
#include "coordinator/text/tokenizer_incremental_decoder.h"

#include <string_view>

#include "coordinator/text/tokenizer_unicode.h"

namespace tpserve {
namespace {

bool EndsWithReplacement(std::string_view text) {
  const std::string_view r = tokenizer_internal::kReplacementChar;
  return text.size() >= r.size() && text.substr(text.size() - r.size()) == r;
}

// First character boundary at or after `pos` in valid UTF-8 `text`.
size_t CharBoundaryAtOrAfter(std::string_view text, size_t pos) {
  while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
  return pos;
}

}  // namespace

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDecoder::Push(int32_t id) {
  ids_.push_back(id);
  // A skipped special token adds no text; it must not release text held back.
  if (skip_special_tokens_ && tokenizer_.IsSpecial(id)) return "";
  const absl::Span<const int32_t> all(ids_);
  const std::string prefix = tokenizer_.Decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string text = tokenizer_.Decode(all.subspan(prefix_offset_), skip_special_tokens_);
  if (text.size() <= prefix.size() || EndsWithReplacement(text)) return "";
  // The window normally extends the previous one; if a decoder rewrote the prefix,
  // cut at a character boundary so the chunk stays valid UTF-8.
  const size_t cut = text.compare(0, prefix.size(), prefix) == 0
                         ? prefix.size()
                         : CharBoundaryAtOrAfter(text, prefix.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  // Only the window is ever decoded again; drop older ids.
  if (prefix_offset_ > 0) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_));
    read_offset_ -= prefix_offset_;
    prefix_offset_ = 0;
  }
  return text.substr(cut);
}

std::string IncrementalDecoder::Flush() {
  const absl::Span<const int32_t> all(ids_);
  const std::string prefix = tokenizer_.Decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string text = tokenizer_.Decode(all.subspan(prefix_offset_), skip_special_tokens_);
  std::string rest;
  if (text.size() > prefix.size()) {
    const size_t cut = text.compare(0, prefix.size(), prefix) == 0
                           ? prefix.size()
                           : CharBoundaryAtOrAfter(text, prefix.size());
    rest = text.substr(cut);
  }
  ids_.clear();
  prefix_offset_ = 0;
  read_offset_ = 0;
  return rest;
}

}  // namespace tpserve
