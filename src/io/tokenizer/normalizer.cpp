// Unicode normalizers (NFC, NFD, NFKC, NFKD) and their Sequence, with utf8proc.
//
// Reference: Unicode Standard Annex #15; utf8proc_map(3) (UTF8PROC_STABLE | COMPOSE = NFC).
// HF applies the normalizer to each piece left between added tokens with normalized=false,
// never across them; tokenizer.cpp calls apply() piece by piece for that reason.
#include <utf8proc.h>

#include <cstdlib>

#include "components.h"
#include "microllm/core/error.h"

namespace microllm::io::tokenizer_detail {
namespace {

bool is_ascii(std::string_view s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

std::string normalize_one(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::NFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::NFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::NFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &result,
                                          static_cast<utf8proc_option_t>(options));
  MICROLLM_CHECK(n >= 0, "tokenizer", "normalizer: utf8proc failed (", utf8proc_errmsg(n), ") on ",
                 text.size(), " bytes");
  std::string out(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
  std::free(result);
  return out;
}

}  // namespace

std::string Normalizer::apply(std::string_view text) const {
  // Every normal form leaves ASCII unchanged: skip utf8proc for the common case.
  if (steps.empty() || is_ascii(text)) return std::string(text);
  std::string current(text);
  for (const NormalForm form : steps) current = normalize_one(current, form);
  return current;
}

}  // namespace microllm::io::tokenizer_detail
