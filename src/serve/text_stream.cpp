// TextStream: streaming decode with stop strings and hold-back (rules in the header).
//
// Why only held_ is searched: a stop string that will occur starting at byte i of the text
// had, at every earlier push, text[i:] as a proper prefix of it, so byte i was held back
// (the longest such tail is held). Every start position of a future occurrence is in held_.
// Both cuts fall on character boundaries: a stop string's first byte starts a character,
// and a valid UTF-8 text cannot end inside a character.
#include "microllm/serve/text_stream.h"

#include <algorithm>
#include <string_view>

#include "microllm/core/error.h"

namespace microllm::serve {
namespace {

constexpr const char* kOp = "text stream";

// Length of the longest tail of `text` that is a proper prefix of `stop`.
size_t prefix_tail(std::string_view text, std::string_view stop) {
  for (size_t len = std::min(text.size(), stop.size() - 1); len > 0; --len)
    if (text.substr(text.size() - len) == stop.substr(0, len)) return len;
  return 0;
}

}  // namespace

TextStream::TextStream(const io::Tokenizer& tokenizer, std::vector<std::string> stop_strings,
                       bool skip_special_tokens)
    : tokenizer_(tokenizer),
      decoder_(tokenizer, skip_special_tokens),
      stop_strings_(std::move(stop_strings)) {
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    MICROLLM_CHECK(!stop_strings_[i].empty(), kOp, "stop string ", i, " is empty");
    MICROLLM_CHECK(io::is_valid_utf8(stop_strings_[i]), kOp, "stop string ", i,
                   " is not valid UTF-8");
  }
}

std::string TextStream::advance(std::string text, bool final) {
  held_ += text;
  // The earliest start of any stop string; on a tie the first listed.
  size_t best = std::string::npos;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const size_t at = held_.find(stop_strings_[i]);
    if (at < best) {
      best = at;
      stop_index_ = static_cast<int64_t>(i);
    }
  }
  if (best != std::string::npos) {
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  size_t keep = 0;
  if (!final)
    for (const std::string& stop : stop_strings_) keep = std::max(keep, prefix_tail(held_, stop));
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TextStream::push(int32_t id) {
  MICROLLM_CHECK(!finished_, kOp, "push after finish()");
  if (stopped() || !tokenizer_.has_token(id)) return {};
  return advance(decoder_.push(id), /*final=*/false);
}

std::string TextStream::finish() {
  MICROLLM_CHECK(!finished_, kOp, "finish() called twice");
  finished_ = true;
  if (stopped()) return {};
  return advance(decoder_.finish(), /*final=*/true);
}

}  // namespace microllm::serve
