// How much input text one token can stand for, read off a tokenizer.json's pipeline: what
// lets the front end refuse a prompt that cannot fit max_model_len before tokenizing it
// (Tokenizer::max_text_bytes_per_token). Tested by tests/tokenizer_test.cc.
#pragma once

#include <cstdint>
#include <optional>

#include "coordinator/text/tokenizer_json.h"

namespace tpserve::tokenizer_internal {

// The most a normalizer (a parsed "normalizer" section, null for none) can shrink text
// other than whitespace: normalized bytes >= input bytes / factor. 1 for none, Prepend,
// Strip (it deletes whitespace only), a Replace with content at least as long as its literal
// pattern, and ByteLevel; 4 for Unicode normal forms and Lowercase (NFKC maps the 4-byte
// U+1D400 to "A"); Sequence multiplies. Nullopt when it can delete text without bound
// (StripAccents, a Replace by a regex or by shorter content, an unknown type).
std::optional<int64_t> NormalizerShrinkFactor(const Json* normalizer);

// Whether a pre-tokenizer (null for none) can drop text: a Split with behavior "Removed".
bool PreTokenizerDropsText(const Json* pre_tokenizer);

}  // namespace tpserve::tokenizer_internal
