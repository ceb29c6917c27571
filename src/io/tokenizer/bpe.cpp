// The BPE model: a pre-tokenized piece's bytes become one symbol each, then the adjacent
// pair with the lowest merge rank is merged (leftmost first on ties) until no pair merges.
//
// Reference: Sennrich et al. 2016 (BPE); HF tokenizers models/bpe/model.rs (merge_word,
// tokenize_with_cache, ignore_merges) and models/bpe/word.rs (merge_all: a min-heap of
// (rank, position) with stale entries skipped). With a ByteLevel pre-tokenizer every
// character of the byte-level text is one byte, so symbols are built straight from bytes.
// Memory: merges in an open-addressing table keyed by (left id << 32 | right id).
#include <queue>

#include "components.h"
#include "microllm/core/error.h"
#include "microllm/core/hash.h"

namespace microllm::io::tokenizer_detail {
namespace {

constexpr uint64_t kEmptyKey = ~uint64_t{0};

uint64_t pack(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

constexpr auto mix = splitmix64_mix;  // spreads the packed ids over the table

}  // namespace

void BpeModel::finalize(const std::vector<std::pair<std::string, std::string>>& merges,
                        const std::string& where) {
  const auto& alphabet = byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab.find(alphabet[b]);
    byte_id_[b] = it == vocab.end() ? -1 : it->second;
  }
  if (ignore_merges)
    for (const auto& [token, id] : vocab)
      if (auto bytes = unicode_to_bytes(token)) raw_vocab_[*bytes] = id;

  size_t capacity = 16;
  while (capacity < 2 * merges.size()) capacity *= 2;
  merge_keys_.assign(capacity, kEmptyKey);
  merge_values_.assign(capacity, MergeValue{0, -1});
  merge_mask_ = capacity - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& left = merges[rank].first;
    const std::string& right = merges[rank].second;
    auto id_of = [&](const std::string& token) {
      const auto it = vocab.find(token);
      MICROLLM_CHECK(it != vocab.end(), "tokenizer", where, ": model.merges[", rank, "] (\"", left,
                     "\", \"", right, "\") uses \"", token, "\", which is not in model.vocab");
      return it->second;
    };
    const int32_t left_id = id_of(left), right_id = id_of(right), new_id = id_of(left + right);
    const uint64_t key = pack(left_id, right_id);
    uint64_t slot = mix(key) & merge_mask_;
    while (merge_keys_[slot] != kEmptyKey && merge_keys_[slot] != key)
      slot = (slot + 1) & merge_mask_;
    // A repeated pair keeps the later rank, as HF's HashMap collect does.
    merge_keys_[slot] = key;
    merge_values_[slot] = {static_cast<uint32_t>(rank), new_id};
  }
}

const BpeModel::MergeValue* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pack(left, right);
  for (uint64_t slot = mix(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
    if (merge_keys_[slot] == key) return &merge_values_[slot];
    if (merge_keys_[slot] == kEmptyKey) return nullptr;
  }
}

void BpeModel::merge(std::string_view raw, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // neighbours in the linked list, -1 at the ends
    uint32_t len;        // bytes covered; 0 once merged into its left neighbour
  };
  std::vector<Symbol> symbols;
  symbols.reserve(raw.size());
  auto push_symbol = [&](int32_t id, uint32_t len) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1, len});
    if (index > 0) symbols[index - 1].next = index;
  };
  // One symbol per byte; a byte missing from the vocabulary becomes the unknown token
  // (fused with its unknown neighbours when fuse_unk) or, with no unk_token, is dropped.
  int32_t pending_unk_len = 0;
  for (const char ch : raw) {
    const int32_t id = byte_id_[static_cast<unsigned char>(ch)];
    if (id >= 0) {
      if (pending_unk_len > 0) push_symbol(*unk_id, static_cast<uint32_t>(pending_unk_len));
      pending_unk_len = 0;
      push_symbol(id, 1);
    } else if (unk_id) {
      if (pending_unk_len > 0 && !fuse_unk) {
        push_symbol(*unk_id, static_cast<uint32_t>(pending_unk_len));
        pending_unk_len = 0;
      }
      ++pending_unk_len;
    }
  }
  if (pending_unk_len > 0) push_symbol(*unk_id, static_cast<uint32_t>(pending_unk_len));

  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i)
    if (const MergeValue* m = find_merge(symbols[i].id, symbols[i + 1].id))
      queue.push({m->rank, static_cast<int32_t>(i), m->new_id});

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;  // merged away, or now the last symbol
    Symbol& right = symbols[left.next];
    const MergeValue* m = find_merge(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // a stale entry
    // Merge right into left and relink.
    left.id = top.new_id;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    // The new pairs with both neighbours become candidates.
    if (left.prev >= 0)
      if (const MergeValue* pm = find_merge(symbols[left.prev].id, left.id))
        queue.push({pm->rank, left.prev, pm->new_id});
    if (left.next >= 0)
      if (const MergeValue* nm = find_merge(left.id, symbols[left.next].id))
        queue.push({nm->rank, top.pos, nm->new_id});
  }
  for (const Symbol& s : symbols)
    if (s.len != 0) out.push_back(s.id);
}

void BpeModel::encode_word(std::string_view raw, std::vector<int32_t>& ids) const {
  if (raw.empty()) return;
  if (ignore_merges) {  // a piece that is itself a token is taken whole
    if (const auto it = raw_vocab_.find(raw); it != raw_vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const size_t hash = StringHash{}(raw);
  CacheShard& shard = cache_[(hash >> 7) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (const auto it = shard.map.find(raw); it != shard.map.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids.size();
  merge(raw, ids);
  if (raw.size() < kMaxCachedWordBytes) {
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.map.size() < kCacheEntriesPerShard)
      shard.map.emplace(
          std::string(raw),
          std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end()));
  }
}

}  // namespace microllm::io::tokenizer_detail
