// Fuzz target: Tokenizer::Encode on arbitrary bytes (invalid UTF-8 included), Decode and the
// IncrementalDecoder on arbitrary ids (negative and out of range included), for every fixture
// tokenizer. Replayed by ctest as tokenizer_replay; see tests/fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/text/tokenizer.h"
#include "coordinator/text/tokenizer_incremental_decoder.h"
#include "tests/fuzz/fuzz_fixtures.h"

namespace tpserve::fuzz {
namespace {

// One of each pre-tokenizer/normalizer/decoder family the loader supports.
constexpr const char* kTokenizers[] = {"gemma", "gpt2", "llama2", "llama3", "mistral", "qwen2"};
constexpr size_t kNumTokenizers = sizeof(kTokenizers) / sizeof(kTokenizers[0]);

const std::vector<std::unique_ptr<Tokenizer>>& Tokenizers() {
  static const auto* tokenizers = [] {
    auto* all = new std::vector<std::unique_ptr<Tokenizer>>;
    for (const char* name : kTokenizers) {
      all->push_back(OrDie(Tokenizer::FromFile(Fixture(std::string("tokenizers/") + name + "/tokenizer.json")), name));
    }
    return all;
  }();
  return *tokenizers;
}

// Ids are little-endian int16s, which reach negative, in-vocabulary (the fixtures have
// ~1-2k ids) and out-of-range values alike; -32768 escapes to a raw int32 that follows.
std::vector<int32_t> ReadIds(const uint8_t* data, size_t size) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i + 2 <= size) {
    int16_t short_id;
    std::memcpy(&short_id, data + i, 2);
    i += 2;
    if (short_id == INT16_MIN && i + 4 <= size) {
      int32_t id;
      std::memcpy(&id, data + i, 4);
      i += 4;
      ids.push_back(id);
    } else {
      ids.push_back(short_id);
    }
  }
  return ids;
}

void CheckDecode(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special) {
  Check(IsValidUtf8(tokenizer.Decode(ids, skip_special)), "Decode returned invalid UTF-8");
  IncrementalDecoder decoder(tokenizer, skip_special);
  for (int32_t id : ids) Check(IsValidUtf8(decoder.Push(id)), "IncrementalDecoder::Push returned invalid UTF-8");
  Check(IsValidUtf8(decoder.Flush()), "IncrementalDecoder::Flush returned invalid UTF-8");
  for (int32_t id : ids) tokenizer.IdToToken(id);
}

// Byte 0 picks the tokenizer, byte 1 the mode: bit 0 encode (else decode), bit 1
// add_special_tokens / skip_special_tokens. The rest is the text or the ids.
void FuzzOne(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const Tokenizer& tokenizer = *Tokenizers()[data[0] % kNumTokenizers];
  const bool encode = data[1] & 1;
  const bool special = data[1] & 2;
  data += 2;
  size -= 2;
  if (encode) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const std::vector<int32_t> ids = tokenizer.Encode(text, special);
    for (int32_t id : ids) Check(id >= 0 && id < tokenizer.vocab_size(), "Encode returned an id outside the vocabulary");
    CheckDecode(tokenizer, ids, special);
  } else {
    CheckDecode(tokenizer, ReadIds(data, size), special);
  }
}

}  // namespace
}  // namespace tpserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tpserve::fuzz::FuzzOne(data, size);
  return 0;
}
