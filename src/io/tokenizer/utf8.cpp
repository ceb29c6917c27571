// UTF-8 validation, lossy repair and the two Unicode properties the added-token flags need.
//
// Reference: The Unicode Standard §3.9, Table 3-7 (well-formed byte sequences) and "U+FFFD
// substitution of maximal subparts" — the rule Rust's String::from_utf8_lossy, CPython's
// errors="replace" and the WHATWG decoder follow. HF tokenizers takes Rust &str (valid
// UTF-8 only), so microllm repairs input this way before encoding, and its decoder (like
// HF's) repairs the decoded bytes the same way.
#include <utf8proc.h>

#include "components.h"

namespace microllm::io {
namespace tokenizer_detail {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The valid range of the second byte after `lead` (Table 3-7); later bytes are 80..BF.
struct LeadInfo {
  int length;  // total bytes, 0 for a byte that cannot start a character
  unsigned char lo, hi;
};
LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

size_t append_repaired_utf8(std::string_view in, std::string& out, bool final) {
  const auto* s = reinterpret_cast<const unsigned char*>(in.data());
  const size_t n = in.size();
  size_t i = 0;
  while (i < n) {
    // Copy a run of ASCII at once.
    size_t j = i;
    while (j < n && s[j] < 0x80) ++j;
    out.append(in.data() + i, j - i);
    i = j;
    if (i >= n) break;
    const LeadInfo info = lead_info(s[i]);
    if (info.length == 0) {  // a byte that never starts a character
      out.append(kReplacement);
      ++i;
      continue;
    }
    // Count the bytes of the maximal valid prefix.
    size_t k = 1;
    while (k < static_cast<size_t>(info.length) && i + k < n) {
      const unsigned char lo = k == 1 ? info.lo : 0x80, hi = k == 1 ? info.hi : 0xBF;
      if (s[i + k] < lo || s[i + k] > hi) break;
      ++k;
    }
    if (k == static_cast<size_t>(info.length)) {
      out.append(in.data() + i, k);
      i += k;
    } else if (i + k == n && !final) {
      return i;  // an incomplete character at the end: wait for more bytes
    } else {
      out.append(kReplacement);  // the maximal subpart s[i, i+k) becomes one U+FFFD
      i += k;
    }
  }
  return n;
}

size_t utf8_char_size(std::string_view s, size_t i) {
  if (i >= s.size()) return 1;
  const auto b = static_cast<unsigned char>(s[i]);
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

char32_t utf8_decode_at(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  if (p[0] < 0x80) return p[0];
  if (p[0] < 0xE0) return (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
  if (p[0] < 0xF0)
    return (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
         (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

char32_t utf8_decode_before(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return utf8_decode_at(s, i);
}

void utf8_append(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

bool is_unicode_whitespace(char32_t cp) {
  if (cp >= 0x09 && cp <= 0x0D) return true;
  if (cp == 0x20 || cp == 0x85) return true;
  if (cp < 0xA0) return false;
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

bool is_word_character(char32_t cp) {
  if (cp < 0x80)
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;  // Join_Control
  // Other_Alphabetic symbols (circled and squared letters) are Alphabetic but not L or M.
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
      (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189))
    return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

}  // namespace tokenizer_detail

bool is_valid_utf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    const auto info = tokenizer_detail::lead_info(s[i]);
    if (info.length == 0 || i + static_cast<size_t>(info.length) > n) return false;
    if (s[i + 1] < info.lo || s[i + 1] > info.hi) return false;
    for (int k = 2; k < info.length; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return false;
    i += static_cast<size_t>(info.length);
  }
  return true;
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + 8);
  tokenizer_detail::append_repaired_utf8(bytes, out, /*final=*/true);
  return out;
}

}  // namespace microllm::io
