// apply_penalties: host validation of shapes, dtypes and devices, then dispatch. Nothing
// here allocates or reads device memory (graph-capturable).
#include "microllm/ops/penalties.h"

#include <bit>

#include "../common.h"
#include "penalties_kernels.h"

namespace microllm::ops {
namespace {

void check_dense(const char* op, const Tensor& t, const char* name, const Shape& shape, DType dtype,
                 Device device) {
  detail::check_defined(op, t, name);
  MICROLLM_CHECK(t.shape() == shape && t.dtype() == dtype, op, "'", name, "' must be ",
                 dtype_name(dtype), shape_str(shape), ", found ", t.describe());
  MICROLLM_CHECK(t.device() == device, op, "'", name, "' must be on ", device.str(),
                 " with the logits, found ", t.describe());
  MICROLLM_CHECK(t.is_contiguous(), op, "'", name, "' must be dense (no copy is made), found ",
                 t.describe(), " with strides ", shape_str(t.strides()));
}

}  // namespace

size_t penalties_workspace_bytes(int64_t batch, int64_t history_len) {
  MICROLLM_CHECK(batch >= 0 && history_len >= 0, "penalties_workspace_bytes",
                 "batch and history length must be >= 0, found ", batch, " and ", history_len);
  if (history_len == 0) return 0;
  return static_cast<size_t>(batch) * std::bit_ceil(static_cast<uint64_t>(history_len)) * 4u;
}

void apply_penalties(const Tensor& logits, const Tensor& history, const Tensor& prompt_lens,
                     const PenaltyTensors& penalties, const Tensor& workspace) {
  const char* op = "apply_penalties";
  detail::check_defined(op, logits, "logits");
  detail::check_rank(op, logits, "logits", 2);
  const int64_t batch = logits.size(0), vocab = logits.size(1);
  const Device device = logits.device();
  MICROLLM_CHECK(vocab <= (int64_t{1} << 30), op, "vocabulary of at most 2^30 ids, found ",
                 logits.describe());
  check_dense(op, logits, "logits", {batch, vocab}, DType::F32, device);
  detail::check_defined(op, history, "history");
  detail::check_rank(op, history, "history", 2);
  const int64_t length = history.size(1);
  check_dense(op, history, "history", {batch, length}, DType::I32, device);
  check_dense(op, prompt_lens, "prompt_lens", {batch}, DType::I32, device);
  check_dense(op, penalties.repetition, "repetition", {batch}, DType::F32, device);
  check_dense(op, penalties.frequency, "frequency", {batch}, DType::F32, device);
  check_dense(op, penalties.presence, "presence", {batch}, DType::F32, device);
  const size_t bytes = penalties_workspace_bytes(batch, length);
  if (bytes > 0) {
    detail::check_defined(op, workspace, "workspace");
    MICROLLM_CHECK(workspace.dtype() == DType::U8 && workspace.device() == device &&
                       workspace.is_contiguous() && workspace.nbytes() >= bytes,
                   op, "'workspace' must be a dense u8 tensor of at least ", bytes, " bytes on ",
                   device.str(), " (penalties_workspace_bytes), found ", workspace.describe());
    MICROLLM_CHECK(reinterpret_cast<uintptr_t>(workspace.raw_data()) % 4 == 0, op,
                   "'workspace' must start on a 4-byte boundary, found offset ",
                   workspace.offset());
  }
  if (batch == 0 || length == 0 || vocab == 0) return;
  MICROLLM_KERNEL(device, apply_penalties, logits, history, prompt_lens, penalties, workspace);
}

}  // namespace microllm::ops
