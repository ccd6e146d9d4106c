// Streams the text of a growing list of token ids, as serving needs for each request.
// Tested by tests/tokenizer_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/text/tokenizer.h"

namespace tpserve {

// Push(id) returns the text that the new id makes final. Text is held back while the
// decode ends in U+FFFD (bytes of a character still split across byte tokens), so no
// chunk ever ends inside a character, and each character is released as soon as its
// last byte arrives. Decoders that look at neighbouring tokens (a
// stripped leading space, byte runs) are handled by decoding a short window of ids
// and emitting what it adds over the previous window (the prefix/read offset scheme).
// The concatenation of all Push results and Flush() equals Decode(all ids), with one
// exception: ids whose bytes are not valid UTF-8 (ByteFallback decodes a whole
// <0xNN> run to U+FFFDs when any byte of it is invalid; the stream keeps characters
// it already released). Every chunk is valid UTF-8 regardless.
class IncrementalDecoder {
 public:
  // `tokenizer` must outlive this object.
  IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);

  std::string Push(int32_t id);
  // Returns whatever is still held back (e.g. a trailing incomplete character as
  // U+FFFD) and resets the stream.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // start of the window that is decoded
  size_t read_offset_ = 0;    // ids before this are already emitted
};

}  // namespace tpserve
