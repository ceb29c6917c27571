// GPT-2's byte-level alphabet: every byte has a printable stand-in character, so a BPE
// vocabulary over those characters covers any byte string without an unknown token.
//
// Reference: openai/gpt-2 src/encoder.py bytes_to_unicode(); HF tokenizers
// pre_tokenizers/byte_level.rs bytes_char(). Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF
// stand for themselves (as code points); the other 68 bytes map, in order, to U+0100 + n
// (so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ').
#include "components.h"

namespace microllm::io::tokenizer_detail {
namespace {

struct Tables {
  std::array<std::string, 256> byte_to_text;  // UTF-8 of each byte's stand-in
  std::array<int16_t, 0x144> code_to_byte;    // inverse over U+0000..U+0143, -1 if none
};

const Tables& tables() {
  static const Tables t = [] {
    Tables tables;
    std::array<char32_t, 256> code{};
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) code[b] = direct[b] ? static_cast<char32_t>(b) : next++;
    tables.code_to_byte.fill(-1);
    for (int b = 0; b < 256; ++b) {
      utf8_append(tables.byte_to_text[b], code[b]);
      tables.code_to_byte[code[b]] = static_cast<int16_t>(b);
    }
    return tables;
  }();
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() { return tables().byte_to_text; }

std::optional<std::string> unicode_to_bytes(std::string_view token) {
  const Tables& t = tables();
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const char32_t cp = utf8_decode_at(token, i);
    if (cp >= t.code_to_byte.size() || t.code_to_byte[cp] < 0) return std::nullopt;
    bytes += static_cast<char>(t.code_to_byte[cp]);
    i += utf8_char_size(token, i);
  }
  return bytes;
}

}  // namespace microllm::io::tokenizer_detail
