// StreamingDecoder: decode one id at a time, emitting only complete UTF-8 characters.
//
// A token may end in the middle of a character (byte-level BPE splits e.g. an emoji's four
// bytes over two tokens). push() appends the token's bytes to what is held back, emits the
// longest prefix made of complete characters (ill-formed bytes become U+FFFD as soon as they
// cannot start a valid character) and keeps an incomplete trailing character for the next
// push. Since U+FFFD substitution of maximal subparts decides each subpart from its own
// bytes, the pieces concatenate to exactly what decode() returns for all ids at once.
#include "components.h"

namespace microllm::io {

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : impl_(tokenizer.impl_), skip_special_tokens_(skip_special_tokens) {}

std::string StreamingDecoder::push(int32_t id) {
  impl_->check_id(id);
  if (skip_special_tokens_ && impl_->special[id]) return {};
  if (!impl_->byte_level_decoder && !first_) pending_ += ' ';
  first_ = false;
  pending_ += impl_->decode_bytes[id];
  std::string out;
  const size_t used = tokenizer_detail::append_repaired_utf8(pending_, out, /*final=*/false);
  pending_.erase(0, used);
  return out;
}

std::string StreamingDecoder::finish() {
  std::string out = to_valid_utf8(pending_);
  pending_.clear();
  first_ = true;
  return out;
}

}  // namespace microllm::io
