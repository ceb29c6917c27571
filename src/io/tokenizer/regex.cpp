// Split patterns: Oniguruma semantics (what HF tokenizers compiles them with) on PCRE2.
//
// References: Oniguruma doc/RE (\s: U+0009-000D, U+0085, Zs, Zl, Zp); pcre2pattern(3) (with
// PCRE2_UCP, \s is \p{Z}, \h or \v, which adds U+180E); pcre2jit(3).
// Two differences matter for tokenizer patterns and are rewritten away here:
//   - \s / \S: PCRE2's set has U+180E, Oniguruma's does not; we spell Oniguruma's set out.
//   - \p{L}, \p{N}, \p{P}, \p{S}, \p{M}, ...: PCRE2 10.42 carries Unicode 14 tables, HF's
//     Oniguruma Unicode 15; each general category is extended with the code points utf8proc
//     (Unicode 15) puts in it and PCRE2 does not (computed once per category by matching).
// Constructs whose meaning differs between the engines in ways not rewritten (\w, \b, \h,
// ...) are rejected with an error rather than silently matched differently.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <cstdio>
#include <map>
#include <mutex>

#include "components.h"
#include "microllm/core/error.h"

namespace microllm::io::tokenizer_detail {
namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what,
                       std::string_view pattern) {
  MICROLLM_FAIL("tokenizer", where, ": regex ", what, " in pattern \"", pattern, "\"");
}

std::string pcre2_error_text(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// utf8proc categories making up a general-category name, as a bit mask; 0 if the name is
// not a general category (scripts and other properties are passed through untouched).
uint32_t category_mask(std::string_view name) {
  auto bit = [](int c) { return uint32_t{1} << c; };
  auto range = [&](int lo, int hi) {
    uint32_t m = 0;
    for (int c = lo; c <= hi; ++c) m |= bit(c);
    return m;
  };
  static const std::map<std::string_view, uint32_t> kMasks = {
      {"L", range(UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LO)},
      {"L&", range(UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LT)},
      {"LC", range(UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LT)},
      {"Lu", bit(UTF8PROC_CATEGORY_LU)},
      {"Ll", bit(UTF8PROC_CATEGORY_LL)},
      {"Lt", bit(UTF8PROC_CATEGORY_LT)},
      {"Lm", bit(UTF8PROC_CATEGORY_LM)},
      {"Lo", bit(UTF8PROC_CATEGORY_LO)},
      {"M", range(UTF8PROC_CATEGORY_MN, UTF8PROC_CATEGORY_ME)},
      {"Mn", bit(UTF8PROC_CATEGORY_MN)},
      {"Mc", bit(UTF8PROC_CATEGORY_MC)},
      {"Me", bit(UTF8PROC_CATEGORY_ME)},
      {"N", range(UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NO)},
      {"Nd", bit(UTF8PROC_CATEGORY_ND)},
      {"Nl", bit(UTF8PROC_CATEGORY_NL)},
      {"No", bit(UTF8PROC_CATEGORY_NO)},
      {"P", range(UTF8PROC_CATEGORY_PC, UTF8PROC_CATEGORY_PO)},
      {"Pc", bit(UTF8PROC_CATEGORY_PC)},
      {"Pd", bit(UTF8PROC_CATEGORY_PD)},
      {"Ps", bit(UTF8PROC_CATEGORY_PS)},
      {"Pe", bit(UTF8PROC_CATEGORY_PE)},
      {"Pi", bit(UTF8PROC_CATEGORY_PI)},
      {"Pf", bit(UTF8PROC_CATEGORY_PF)},
      {"Po", bit(UTF8PROC_CATEGORY_PO)},
      {"S", range(UTF8PROC_CATEGORY_SM, UTF8PROC_CATEGORY_SO)},
      {"Sm", bit(UTF8PROC_CATEGORY_SM)},
      {"Sc", bit(UTF8PROC_CATEGORY_SC)},
      {"Sk", bit(UTF8PROC_CATEGORY_SK)},
      {"So", bit(UTF8PROC_CATEGORY_SO)},
      {"Z", range(UTF8PROC_CATEGORY_ZS, UTF8PROC_CATEGORY_ZP)},
      {"Zs", bit(UTF8PROC_CATEGORY_ZS)},
      {"Zl", bit(UTF8PROC_CATEGORY_ZL)},
      {"Zp", bit(UTF8PROC_CATEGORY_ZP)},
      {"C", range(UTF8PROC_CATEGORY_CC, UTF8PROC_CATEGORY_CO) | bit(UTF8PROC_CATEGORY_CN)},
      {"Cc", bit(UTF8PROC_CATEGORY_CC)},
      {"Cf", bit(UTF8PROC_CATEGORY_CF)},
      {"Co", bit(UTF8PROC_CATEGORY_CO)},
      {"Cn", bit(UTF8PROC_CATEGORY_CN)},
  };
  const auto it = kMasks.find(name);
  return it == kMasks.end() ? 0 : it->second;
}

// Code points PCRE2's `pattern` (one character) matches, among the UTF-8 text `subject`.
std::vector<char32_t> pcre2_matching_chars(const std::string& pattern, const std::string& subject) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  MICROLLM_CHECK(code != nullptr, "tokenizer", "internal pattern ", pattern, ": ",
                 pcre2_error_text(error));
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  std::vector<char32_t> found;
  size_t pos = 0;
  while (pos < subject.size()) {
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(),
                               pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    found.push_back(utf8_decode_at(subject, ov[0]));
    pos = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
  }
  pcre2_match_data_free(md);
  pcre2_code_free(code);
  return found;
}

struct Augmentation {
  std::string extra_ranges;  // "\x{..}-\x{..}..." that PCRE2's class lacks
  size_t surplus = 0;        // code points PCRE2's class has that Unicode 15 does not
};

// What \p{name} needs to mean what Unicode 15 (utf8proc) says. Computed once per name: one
// PCRE2 scan over the members and one over the non-members (a few milliseconds).
const Augmentation& augmentation(const std::string& name, uint32_t mask) {
  static std::mutex mutex;
  static std::map<std::string, Augmentation> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(name); it != cache.end()) return it->second;
  std::string members, others;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const int c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    utf8_append(((mask >> c) & 1) ? members : others, cp);
  }
  Augmentation aug;
  const std::vector<char32_t> missing = pcre2_matching_chars("\\P{" + name + "}", members);
  aug.surplus = pcre2_matching_chars("\\p{" + name + "}", others).size();
  char buf[40];
  for (size_t i = 0; i < missing.size();) {
    size_t j = i;
    while (j + 1 < missing.size() && missing[j + 1] == missing[j] + 1) ++j;
    if (j == i)
      std::snprintf(buf, sizeof(buf), "\\x{%X}", static_cast<unsigned>(missing[i]));
    else
      std::snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", static_cast<unsigned>(missing[i]),
                    static_cast<unsigned>(missing[j]));
    aug.extra_ranges += buf;
    i = j + 1;
  }
  return cache.emplace(name, std::move(aug)).first->second;
}

// Oniguruma's \s as the inside of a character class.
const std::string& space_class_body() {
  static const std::string body = "\\t-\\r\\x{85}\\p{Z}";
  return body;
}

// Appends \p{name} (negated: \P{name}) with Unicode 15 membership.
void append_property(std::string& out, std::string name, bool negated, bool in_class,
                     const std::string& where, std::string_view pattern) {
  if (!name.empty() && name[0] == '^') {  // Oniguruma's \p{^L} = \P{L}
    negated = !negated;
    name.erase(0, 1);
  }
  const uint32_t mask = category_mask(name);
  std::string extra;
  if (mask != 0) {
    const Augmentation& aug = augmentation(name, mask);
    if (aug.surplus != 0)
      fail(where,
           "\\p{" + name + "} (PCRE2's Unicode tables include code points Unicode 15 excludes)",
           pattern);
    extra = aug.extra_ranges;
  }
  const std::string prop = "\\p{" + name + "}";
  if (!negated) {
    out += in_class || extra.empty() ? prop + extra : "[" + prop + extra + "]";
  } else if (!in_class) {
    out += "[^" + prop + extra + "]";
  } else if (extra.empty()) {
    out += "\\P{" + name + "}";
  } else {
    fail(where, "\\P{" + name + "} inside a character class (unsupported)", pattern);
  }
}

}  // namespace

std::string translate_oniguruma_pattern(std::string_view p, const std::string& where) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  bool class_start = false;  // just after '[' or '[^': a ']' here is a literal
  for (size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) fail(where, "ends with a backslash", p);
      const char e = p[i + 1];
      class_start = false;
      switch (e) {
        case 's':
          out += in_class ? space_class_body() : "[" + space_class_body() + "]";
          i += 2;
          continue;
        case 'S':
          if (in_class) fail(where, "\\S inside a character class (unsupported)", p);
          out += "[^" + space_class_body() + "]";
          i += 2;
          continue;
        case 'd':
        case 'D':
          append_property(out, "Nd", e == 'D', in_class, where, p);
          i += 2;
          continue;
        case 'p':
        case 'P': {
          std::string name;
          size_t next = i + 2;
          if (next < p.size() && p[next] == '{') {
            const size_t close = p.find('}', next);
            if (close == std::string_view::npos) fail(where, "has an unterminated \\p{", p);
            name = std::string(p.substr(next + 1, close - next - 1));
            next = close + 1;
          } else if (next < p.size()) {
            name = std::string(1, p[next]);
            next += 1;
          } else {
            fail(where, "ends inside \\p", p);
          }
          append_property(out, name, e == 'P', in_class, where, p);
          i = next;
          continue;
        }
        case 'w':
        case 'W':
        case 'h':
        case 'H':
        case 'b':
        case 'B':
        case 'Q':
        case 'E':
        case 'X':
        case 'R':
        case 'K':
        case 'y':
        case 'Y':
        case 'O':
          fail(where,
               std::string("escape \\") + e +
                   " (Oniguruma and PCRE2 read it differently; unsupported)",
               p);
        default: {
          const size_t n = utf8_char_size(p, i + 1);
          out.append(p.substr(i, 1 + n));
          i += 1 + n;
          continue;
        }
      }
    }
    if (in_class) {
      if (c == '[') {
        const size_t close =
            p.substr(i).starts_with("[:") ? p.find(":]", i + 2) : std::string_view::npos;
        if (close == std::string_view::npos) fail(where, "nested character class (unsupported)", p);
        out.append(p.substr(i, close + 2 - i));  // POSIX class [:alpha:]
        i = close + 2;
        class_start = false;
        continue;
      }
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&')
        fail(where, "class intersection && (unsupported)", p);
      if (c == ']' && !class_start) in_class = false;
      class_start = false;
      out += c;
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      class_start = true;
      out += '[';
      ++i;
      if (i < p.size() && p[i] == '^') {
        out += '^';
        ++i;
      }
      continue;
    }
    const size_t n = utf8_char_size(p, i);
    out.append(p.substr(i, n));
    i += n;
  }
  if (in_class) fail(where, "has an unterminated character class", p);
  return out;
}

namespace {

// Per-thread PCRE2 match state: match data for group 0 and a JIT stack large enough for
// long pieces (the default 32 KiB stack fails on long whitespace or letter runs).
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

Regex::Regex(std::string_view oniguruma_pattern, const std::string& where)
    : pattern_(translate_oniguruma_pattern(oniguruma_pattern, where)) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr)
    fail(where,
         "does not compile (" + pcre2_error_text(error) + " at offset " + std::to_string(offset) +
             ")",
         oniguruma_pattern);
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  MatchState& state = match_state();
  const auto* code = static_cast<const pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (pos <= n) {
    // The text was validated as UTF-8 once, before splitting: skip PCRE2's per-call check.
    const int rc =
        pcre2_match(code, subject, n, pos, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    MICROLLM_CHECK(rc >= 0, "tokenizer", "regex match failed (", pcre2_error_text(rc),
                   ") for pattern \"", pattern_, "\" on a piece of ", n, " bytes");
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    const size_t s = ov[0], e = ov[1];
    if (s == e) {
      // An empty match: move one character on; one right after a match is not reported.
      const bool skip = have_last && last_end == e;
      pos = e < n ? e + utf8_char_size(text, e) : n + 1;
      if (skip) continue;
    } else {
      pos = e;
    }
    have_last = true;
    last_end = e;
    out.emplace_back(s, e);
  }
}

}  // namespace microllm::io::tokenizer_detail
