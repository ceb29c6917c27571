// Added tokens (special and not) found in text before pre-tokenization.
//
// Reference: HF tokenizers tokenizer/added_vocabulary.rs, find_matches(): a leftmost-longest
// automaton (daachorse) over the token contents; a match failing `single_word` is dropped
// and the search resumes after it; `lstrip` extends a kept match left over whitespace (never
// past the previous match), `rstrip` right over whitespace. Whitespace is Unicode
// White_Space and a word character Rust regex's Unicode \w, as in HF's regexes.
// Layout: a byte trie (sorted child lists); entries_ holds the token of each accepting node.
#include <algorithm>

#include "components.h"

namespace microllm::io::tokenizer_detail {

void AddedTokenMatcher::build(const std::vector<const AddedToken*>& tokens,
                              const std::vector<std::string>& patterns) {
  nodes_.assign(1, Node{});
  entries_.clear();
  first_byte_.fill(false);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& pattern = patterns[t];
    if (pattern.empty()) continue;  // HF ignores empty added tokens
    int32_t node = 0;
    for (const char ch : pattern) {
      const auto byte = static_cast<unsigned char>(ch);
      auto& children = nodes_[node].children;
      auto it =
          std::lower_bound(children.begin(), children.end(), byte,
                           [](const auto& child, unsigned char b) { return child.first < b; });
      if (it == children.end() || it->first != byte) {
        const auto child = static_cast<int32_t>(nodes_.size());
        it = children.insert(it, {byte, child});
        nodes_.emplace_back();
      }
      node = it->second;
    }
    // Two tokens with one pattern: the later one wins, as a later HashMap entry does in HF.
    if (nodes_[node].entry < 0) {
      nodes_[node].entry = static_cast<int32_t>(entries_.size());
      entries_.push_back({tokens[t], pattern.size()});
    } else {
      entries_[nodes_[node].entry].token = tokens[t];
    }
    first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto& children = nodes_[node].children;
    const auto it =
        std::lower_bound(children.begin(), children.end(), byte,
                         [](const auto& child, unsigned char b) { return child.first < b; });
    if (it == children.end() || it->first != byte) break;
    node = it->second;
    if (nodes_[node].entry >= 0) best = nodes_[node].entry;
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  const size_t n = text.size();
  if (entries_.empty() || n == 0) {
    out.push_back({0, n, -1});
    return;
  }
  size_t start_offset = 0;  // end of the last emitted segment
  size_t pos = 0;           // where the automaton resumes
  while (pos < n) {
    // Leftmost match, longest at that position.
    size_t at = pos;
    int32_t entry = -1;
    for (; at < n; ++at) {
      if (!first_byte_[static_cast<unsigned char>(text[at])]) continue;
      entry = longest_at(text, at);
      if (entry >= 0) break;
    }
    if (entry < 0) break;
    const AddedToken& token = *entries_[entry].token;
    size_t start = at, stop = at + entries_[entry].length;
    pos = stop;
    if (token.single_word) {
      const bool start_space = start == 0 || !is_word_character(utf8_decode_before(text, start));
      const bool stop_space = stop == n || !is_word_character(utf8_decode_at(text, stop));
      if (!start_space || !stop_space) continue;  // inside a word: not this token
    }
    if (token.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t prev = s - 1;
        while (prev > 0 && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
        if (!is_unicode_whitespace(utf8_decode_at(text, prev))) break;
        s = prev;
      }
      start = std::max(s, start_offset);
    }
    if (token.rstrip) {
      while (stop < n && is_unicode_whitespace(utf8_decode_at(text, stop)))
        stop += utf8_char_size(text, stop);
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset != n) out.push_back({start_offset, n, -1});
}

}  // namespace microllm::io::tokenizer_detail
