// A typed dense view at a byte offset of a U8 buffer: how the engine and the sampler read
// the arrays of their one packed buffer (the step's inputs, the sampler's outputs).
#pragma once

#include "microllm/core/error.h"
#include "microllm/core/tensor.h"

namespace microllm::infer {

// `buffer` (bytes) U8; `byte_offset` a multiple of dtype's size.
inline Tensor byte_view(const Tensor& buffer, int64_t byte_offset, const Shape& shape,
                        DType dtype) {
  const auto size = static_cast<int64_t>(dtype_size(dtype));
  MICROLLM_CHECK(byte_offset % size == 0, "byte_view", "byte offset ", byte_offset,
                 " is not a multiple of ", dtype, "'s ", size, " bytes");
  return Tensor::from_storage(buffer.storage(), shape, contiguous_strides(shape),
                              (buffer.offset() + byte_offset) / size, dtype);
}

}  // namespace microllm::infer
