// stop_check: the id-level stopping rules (EOS ids, stop ids, max_new_tokens, context).
#include "microllm/infer/sequence.h"

#include <algorithm>

namespace microllm::infer {

const char* to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::None:
      return "";
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Abort:
      return "abort";
  }
  return "";
}

FinishReason stop_check(const Sequence& seq, std::span<const int32_t> eos_ids,
                        int64_t max_model_len) {
  if (!seq.output_ids.empty()) {
    const int32_t last = seq.output_ids.back();
    const auto contains = [last](const auto& ids) {
      return std::find(ids.begin(), ids.end(), last) != ids.end();
    };
    if (!seq.params.ignore_eos && contains(eos_ids)) return FinishReason::Stop;
    if (contains(seq.params.stop_token_ids)) return FinishReason::Stop;
    if (seq.num_output_tokens() >= seq.params.max_new_tokens) return FinishReason::Length;
  }
  if (seq.num_tokens() >= max_model_len) return FinishReason::Length;
  return FinishReason::None;
}

}  // namespace microllm::infer
