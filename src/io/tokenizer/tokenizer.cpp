// Tokenizer: encode (added tokens → normalizer → pre-tokenizer → BPE → post-processor) and
// decode (ids → token bytes → UTF-8 with U+FFFD for ill-formed sequences).
//
// Reference: HF tokenizers tokenizer/mod.rs (encode_single_sequence, decode),
// added_vocabulary.rs extract_and_normalize() (two passes: tokens with normalized=false on
// the raw text, then the normalizer and tokens with normalized=true on each remaining piece),
// decoders/byte_level.rs. Loading lives in tokenizer_json.cpp.
#include "components.h"
#include "microllm/core/error.h"

namespace microllm::io {

using tokenizer_detail::Segment;

void Tokenizer::Impl::for_each_piece(
    std::string_view text, const std::function<void(std::string_view, int32_t)>& emit) const {
  std::vector<Segment> raw_segments, normalized_segments;
  std::string normalized;
  raw_matcher.split(text, raw_segments);
  for (const Segment& raw : raw_segments) {
    const std::string_view piece = text.substr(raw.begin, raw.end - raw.begin);
    if (raw.id >= 0) {
      emit(piece, raw.id);
      continue;
    }
    if (piece.empty()) continue;
    std::string_view norm = piece;
    if (!normalizer.identity()) {
      normalized = normalizer.apply(piece);
      norm = normalized;
    }
    normalized_segments.clear();
    normalized_matcher.split(norm, normalized_segments);
    for (const Segment& seg : normalized_segments) {
      const std::string_view sub = norm.substr(seg.begin, seg.end - seg.begin);
      if (seg.id >= 0) {
        emit(sub, seg.id);
      } else if (!sub.empty()) {
        pre_tokenizer.run(sub, [&](std::string_view word) { emit(word, -1); });
      }
    }
  }
}

void Tokenizer::Impl::encode_into(std::string_view text, std::vector<int32_t>& ids) const {
  for_each_piece(text, [&](std::string_view piece, int32_t id) {
    if (id >= 0)
      ids.push_back(id);
    else
      model.encode_word(piece, ids);
  });
}

void Tokenizer::Impl::check_id(int32_t id) const {
  MICROLLM_CHECK(id >= 0 && static_cast<size_t>(id) < known.size() && known[id], "tokenizer", "id ",
                 id, " is not a token of ", source, " (vocabulary of ", known.size(), " ids)");
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {  // HF takes only valid UTF-8: repair first (docs/tokenizer.md)
    repaired = to_valid_utf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  impl_->encode_into(text, ids);
  if (add_special_tokens) impl_->post_processor.apply(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  bool first = true;
  for (const int32_t id : ids) {
    impl_->check_id(id);
    if (skip_special_tokens && impl_->special[id]) continue;
    if (!impl_->byte_level_decoder && !first)
      bytes += ' ';  // HF joins tokens with ' ' without a decoder
    bytes += impl_->decode_bytes[id];
    first = false;
  }
  return is_valid_utf8(bytes) ? bytes : to_valid_utf8(bytes);
}

std::string Tokenizer::normalize(std::string_view text) const {
  return impl_->normalizer.apply(is_valid_utf8(text) ? std::string(text) : to_valid_utf8(text));
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  const std::string valid = is_valid_utf8(text) ? std::string(text) : to_valid_utf8(text);
  std::vector<std::string> pieces;
  impl_->for_each_piece(valid,
                        [&](std::string_view piece, int32_t) { pieces.emplace_back(piece); });
  return pieces;
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->known.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end())
    return it->second;
  if (const auto it = impl_->model.vocab.find(token); it != impl_->model.vocab.end())
    return it->second;
  return std::nullopt;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  impl_->check_id(id);
  return impl_->token_text[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id];
}

bool Tokenizer::has_token(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->known.size() && impl_->known[id];
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added_tokens; }
const TokenizerConfig& Tokenizer::config() const { return impl_->config; }
const std::string& Tokenizer::source() const { return impl_->source; }

}  // namespace microllm::io
