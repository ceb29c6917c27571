// Gradients written straight into their leaves' gradient buffers (the default;
// MICROLLM_GRAD_INTO_BUFFER=0 copies every first gradient instead, the reference form).
//
// A leaf with a gradient buffer (Tensor::set_grad_buffer: a view into a flat gradient
// buffer) receives its first gradient of a pass by a copy into the buffer. A backward
// function can instead claim the buffer and write the gradient there itself (linear writes
// dW through matmul_out); the leaf's accumulator then finds the gradient already in its
// buffer and copies nothing. The values are the same either way: the claim changes where a
// product is written, never what is summed or in which order.
//
// Rules: a leaf's buffer is claimable while the switch is on, the leaf requires a gradient,
// its buffer is dense, it has no gradient yet and its buffer was not claimed since the last
// zero_grad (or set_grad / set_grad_buffer). One claim a pass: a second producer of the same
// leaf's gradient allocates, and the engine's sum is copied into the buffer as before. A
// non-leaf hands out what its producing node claims for it (Node::claim_gradient): `join`
// claims one view over leaves whose buffers lie side by side as the leaves do, all or none.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::autograd {

// Whether claims are on: unless MICROLLM_GRAD_INTO_BUFFER is "0" (read at each call).
bool gradient_claims_enabled();

// Whether `t` is a leaf whose gradient buffer can be claimed now (the rules above).
bool gradient_buffer_claimable(const Tensor& t);

// Claims the memory the gradient of `t` may be written into in this backward pass: a leaf's
// gradient buffer, or for a non-leaf what its producing node claims; undefined when nothing
// can be claimed. The caller writes the whole gradient there and returns that tensor as the
// gradient of `t`.
Tensor claim_gradient_buffer(const Tensor& t);

}  // namespace microllm::autograd
