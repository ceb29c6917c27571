// TextStream: generated ids → text safe to emit now, with stop strings (OpenAI `stop`),
// shared by the CLI and the server above the engine (the engine knows no text).
//
// Over io::StreamingDecoder (complete UTF-8 characters only), TextStream holds back the
// longest tail of the text that is a proper prefix of a stop string: it may still become
// one. When a stop string occurs in the text seen so far (across token boundaries; the
// earliest start wins when several occur), stopped() turns true and the text before that
// start is the last emitted: never the stop string, never anything after it. The caller then
// aborts the request. finish() flushes what was held back (the decoder's incomplete bytes
// become U+FFFD, as decode() does). Invariant: the concatenation of every push() and the
// finish() equals decode(the ids pushed until stopped()) truncated before the earliest
// stop-string occurrence; ids pushed after stopped() are ignored.
// Reference: OpenAI's `stop` (the stop sequence is not returned). A fixed hold-back of
// len(longest stop) − 1 characters (vLLM's) gives the same text; holding back only a tail
// that matches emits it sooner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "microllm/io/tokenizer.h"

namespace microllm::serve {

class TextStream {
 public:
  // Throws microllm::Error (op "text stream") for an empty stop string or one that is not
  // valid UTF-8. `skip_special_tokens`: special tokens decode to nothing (OpenAI's output).
  TextStream(const io::Tokenizer& tokenizer, std::vector<std::string> stop_strings,
             bool skip_special_tokens = true);

  // The text of `id` that is safe to emit now (possibly empty); "" once stopped().
  // An id the tokenizer has no token for (a model's LM head is often wider than its
  // vocabulary) adds no text, as HF's decode skips it.
  std::string push(int32_t id);
  // What was held back (none once stopped()); the stream is then done.
  std::string finish();

  bool stopped() const { return stop_index_ >= 0; }
  // Index in stop_strings of the stop string that matched; −1 when none did.
  int64_t stop_index() const { return stop_index_; }
  // Bytes received but not yet emitted (held back as a possible stop-string start).
  size_t held_back_bytes() const { return held_.size(); }

 private:
  // Emits what is safe of held_ + text, finding a completed stop string first.
  std::string advance(std::string text, bool final);

  const io::Tokenizer& tokenizer_;
  io::StreamingDecoder decoder_;
  std::vector<std::string> stop_strings_;
  std::string held_;  // text received, not yet emitted
  int64_t stop_index_ = -1;
  bool finished_ = false;
};

}  // namespace microllm::serve
