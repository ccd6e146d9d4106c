// The GPT-2 byte-to-character table that ByteLevel pre-tokenizers, normalizers and
// decoders share. Tested through tests/tokenizer_test.cc.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tpserve::tokenizer_internal {

// UTF-8 of the printable character that stands for each byte (0x21 '!' for '!',
// U+0120 'Ġ' for ' ', ...).
const std::array<std::string, 256>& ByteLevelChars();

// The byte a ByteLevel character stands for, or -1 when `cp` is not one of them.
int ByteLevelCharToByte(char32_t cp);

// Maps every byte of `text` to its ByteLevel character.
std::string ToByteLevel(std::string_view text);

}  // namespace tpserve::tokenizer_internal
