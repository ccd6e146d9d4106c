// A fixed-size set of token ids as 64-bit words: the allowed-next-token mask that
// FillNextTokenMask (token_matcher.h) writes and a sampler reads. Tested by
// tests/structured_output_test.cc.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tpserve {

class BitMask {
 public:
  BitMask() = default;
  explicit BitMask(int32_t size) { Resize(size); }

  // Sets the size and clears every bit.
  void Resize(int32_t size) {
    size_ = size;
    words_.assign((static_cast<size_t>(size) + 63) / 64, 0);
  }
  void ClearAll() { std::fill(words_.begin(), words_.end(), 0); }
  int32_t size() const { return size_; }

  void Set(int32_t i) { words_[i >> 6] |= uint64_t{1} << (i & 63); }
  void Reset(int32_t i) { words_[i >> 6] &= ~(uint64_t{1} << (i & 63)); }
  bool Test(int32_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }
  // Bitwise OR of another mask's words (same size).
  void OrWords(absl::Span<const uint64_t> words) {
    for (size_t w = 0; w < words.size() && w < words_.size(); ++w) words_[w] |= words[w];
  }
  int32_t Count() const {
    int32_t n = 0;
    for (const uint64_t w : words_) n += std::popcount(w);
    return n;
  }
  absl::Span<const uint64_t> words() const { return words_; }

 private:
  int32_t size_ = 0;
  std::vector<uint64_t> words_;
};

}  // namespace tpserve
