// Shared operator helpers that are not inline (see common.h).
#include "common.h"

namespace microllm::ops::detail {

int64_t check_index_range(const char* op, const Tensor& ids, int64_t limit, const char* what,
                          const char* where, const Tensor& context, int64_t skip) {
  const Tensor host = ids.to(Device::cpu()).contiguous();
  int64_t kept = 0;
  for (int64_t i = 0; i < host.numel(); ++i) {
    const int64_t id = load_index(host, i);
    if (id == skip) continue;
    MICROLLM_CHECK(
        id >= 0 && id < limit, op, what, " ", id, " at ", where, " ", i, " is outside [0, ", limit,
        ")",
        skip == INT64_MIN ? std::string() : " and is not the ignore index " + std::to_string(skip),
        " (", what, "s ", ids.describe(), ", ", context.describe(), ")");
    ++kept;
  }
  return kept;
}

}  // namespace microllm::ops::detail
