// The GPT-2 byte-to-character table. Tested through tests/tokenizer_test.cc.
#include "coordinator/text/tokenizer_byte_level.h"

#include "coordinator/text/tokenizer_unicode.h"

namespace tpserve::tokenizer_internal {
namespace {

// Printable Latin-1 bytes stand for themselves; the other 68 bytes map, in order,
// to U+0100, U+0101, ...
bool StandsForItself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<std::string, 256> chars;
  std::array<int16_t, 0x200> char_to_byte;  // code points < 0x200 only
  Tables() {
    char_to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = StandsForItself(b) ? static_cast<char32_t>(b) : 0x100 + next++;
      AppendUtf8(cp, &chars[b]);
      char_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables* const tables = new Tables();
  return *tables;
}

}  // namespace

const std::array<std::string, 256>& ByteLevelChars() { return GetTables().chars; }

int ByteLevelCharToByte(char32_t cp) { return cp < 0x200 ? GetTables().char_to_byte[cp] : -1; }

std::string ToByteLevel(std::string_view text) {
  const auto& chars = ByteLevelChars();
  std::string out;
  out.reserve(text.size() * 2);
  for (char ch : text) out.append(chars[static_cast<unsigned char>(ch)]);
  return out;
}

}  // namespace tpserve::tokenizer_internal
