// Python `str` operations with Python's meaning, for the chat templates (Jinja2 calls them on
// Python strings). Reference: CPython Objects/unicodectype.c (_PyUnicode_IsWhitespace, the
// code points whose bidirectional class is WS, B or S, or that are Zs) and str.split/strip.
// Strings are UTF-8; whitespace is found by decoding one code point at either end.
#include <array>
#include <cstdint>
#include <cstdio>
#include <ctime>

#include "chat_template_internal.h"

namespace microllm::io::chat {
namespace {

bool py_isspace(uint32_t cp) {
  // \t \n \v \f \r, the four separators U+001C..U+001F, and space.
  if (cp <= 0x20) return (cp >= 0x09 && cp <= 0x0D) || cp >= 0x1C;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Length of the UTF-8 sequence that starts with `lead` (1 for a stray byte).
size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

uint32_t decode_at(std::string_view s, size_t pos, size_t len) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[pos + i]); };
  if (len == 1) return byte(0);
  uint32_t cp = byte(0) & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (byte(i) & 0x3F);
  return cp;
}

// Bytes of leading whitespace.
size_t leading_space(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t len = sequence_length(static_cast<unsigned char>(s[pos]));
    if (pos + len > s.size() || !py_isspace(decode_at(s, pos, len))) break;
    pos += len;
  }
  return pos;
}

// Bytes of trailing whitespace.
size_t trailing_space(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;  // back up over continuation bytes to the lead byte
    while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
      --start;
    const size_t len = sequence_length(static_cast<unsigned char>(s[start]));
    if (start + len != end || !py_isspace(decode_at(s, start, len))) break;
    end = start;
  }
  return s.size() - end;
}

}  // namespace

std::string_view py_lstrip(std::string_view s) { return s.substr(leading_space(s)); }
std::string_view py_rstrip(std::string_view s) { return s.substr(0, s.size() - trailing_space(s)); }
std::string_view py_strip(std::string_view s) { return py_rstrip(py_lstrip(s)); }

std::string_view py_lstrip(std::string_view s, char c) {
  const size_t pos = s.find_first_not_of(c);
  return pos == std::string_view::npos ? std::string_view() : s.substr(pos);
}
std::string_view py_rstrip(std::string_view s, char c) {
  const size_t pos = s.find_last_not_of(c);
  return pos == std::string_view::npos ? std::string_view() : s.substr(0, pos + 1);
}
std::string_view py_strip(std::string_view s, char c) { return py_rstrip(py_lstrip(s, c), c); }

std::string_view py_split_first(std::string_view s, std::string_view sep) {
  const size_t pos = s.find(sep);
  return pos == std::string_view::npos ? s : s.substr(0, pos);
}
std::string_view py_split_last(std::string_view s, std::string_view sep) {
  const size_t pos = s.rfind(sep);
  return pos == std::string_view::npos ? s : s.substr(pos + sep.size());
}
bool py_contains(std::string_view s, std::string_view needle) {
  return s.find(needle) != std::string_view::npos;
}

std::string today_date_string() {
  static constexpr std::array<const char*, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char out[32];
  std::snprintf(out, sizeof out, "%02d %s %04d", local.tm_mday, kMonths[local.tm_mon],
                local.tm_year + 1900);
  return out;
}

}  // namespace microllm::io::chat
