// Pre-tokenization: the Split steps (a regex and a delimiter behavior) and ByteLevel.
//
// Reference: HF tokenizers pre_tokenizers/split.rs, tokenizer/normalizer.rs split() (the
// five SplitDelimiterBehavior folds), tokenizer/pattern.rs (Invert), utils/onig.rs
// find_matches(), pre_tokenizers/byte_level.rs. Each step runs on every piece the previous
// step produced; empty pieces are dropped (PreTokenizedString::split).
#include <algorithm>

#include "components.h"

namespace microllm::io::tokenizer_detail {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void SplitStep::split(std::string_view piece, std::vector<std::string_view>& out,
                      std::vector<std::pair<size_t, size_t>>& scratch) const {
  if (piece.empty()) return;
  scratch.clear();
  regex->find_all(piece, scratch);

  // The pattern's matches and the gaps between them, in order, flagged (HF find_matches).
  struct Part {
    size_t begin, end;
    bool match;
  };
  std::vector<Part> parts;
  parts.reserve(2 * scratch.size() + 1);
  size_t prev = 0;
  for (const auto& [s, e] : scratch) {
    if (prev != s) parts.push_back({prev, s, invert});
    parts.push_back({s, e, !invert});
    prev = e;
  }
  if (prev != piece.size()) parts.push_back({prev, piece.size(), invert});

  auto emit = [&](size_t b, size_t e) {
    if (e > b) out.push_back(piece.substr(b, e - b));
  };
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const Part& p : parts)
        if (!p.match) emit(p.begin, p.end);
      return;
    case SplitBehavior::Isolated:
      for (const Part& p : parts) emit(p.begin, p.end);
      return;
    default:
      break;
  }
  // The merging behaviors fold parts into ranges before emitting them.
  std::vector<std::pair<size_t, size_t>> ranges;
  bool previous_match = false;
  if (behavior == SplitBehavior::Contiguous || behavior == SplitBehavior::MergedWithPrevious) {
    for (const Part& p : parts) {
      const bool extend = behavior == SplitBehavior::Contiguous ? p.match == previous_match
                                                                : p.match && !previous_match;
      if (extend && !ranges.empty())
        ranges.back().second = p.end;
      else
        ranges.emplace_back(p.begin, p.end);
      previous_match = p.match;
    }
  } else {  // MergedWithNext: the same fold from the right
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
      if (it->match && !previous_match && !ranges.empty())
        ranges.back().first = it->begin;
      else
        ranges.emplace_back(it->begin, it->end);
      previous_match = it->match;
    }
    std::reverse(ranges.begin(), ranges.end());
  }
  for (const auto& [b, e] : ranges) emit(b, e);
}

namespace {

// Runs steps[k..] on `piece`, depth first so that pieces come out in text order.
void run_splits(const std::vector<SplitStep>& steps, size_t k, std::string_view piece,
                std::vector<std::vector<std::string_view>>& levels,
                std::vector<std::pair<size_t, size_t>>& scratch,
                const std::function<void(std::string_view)>& emit) {
  if (k == steps.size()) {
    emit(piece);
    return;
  }
  std::vector<std::string_view>& pieces = levels[k];
  pieces.clear();
  steps[k].split(piece, pieces, scratch);
  // Deeper levels reuse their own vectors, so this level's list stays valid while we walk it.
  for (size_t i = 0; i < levels[k].size(); ++i)
    run_splits(steps, k + 1, levels[k][i], levels, scratch, emit);
}

}  // namespace

void PreTokenizer::run(std::string_view text,
                       const std::function<void(std::string_view)>& emit) const {
  std::vector<std::vector<std::string_view>> levels(splits.size());
  std::vector<std::pair<size_t, size_t>> scratch;
  std::string prefixed;
  std::vector<std::pair<size_t, size_t>> matches;
  run_splits(splits, 0, text, levels, scratch, [&](std::string_view piece) {
    std::string_view word = piece;
    if (add_prefix_space && word[0] != ' ') {
      prefixed.assign(1, ' ');
      prefixed.append(word);
      word = prefixed;
    }
    if (!byte_level_regex) {
      emit(word);
      return;
    }
    // ByteLevel with use_regex: GPT-2's pattern, Isolated.
    matches.clear();
    byte_level_regex->find_all(word, matches);
    size_t prev = 0;
    for (const auto& [s, e] : matches) {
      if (s > prev) emit(word.substr(prev, s - prev));
      if (e > s) emit(word.substr(s, e - s));
      prev = e;
    }
    if (prev < word.size()) emit(word.substr(prev));
  });
}

}  // namespace microllm::io::tokenizer_detail
