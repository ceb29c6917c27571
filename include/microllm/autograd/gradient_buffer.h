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
//
// Adding into a pending buffer (the default; MICROLLM_ADD_INTO_BUFFER=0 turns it off): when the
// gradient summed for a leaf so far in a pass is its buffer (a claimed buffer the engine has
// received and not yet accumulated), a later producer may add its contribution into that
// buffer in place and return no gradient for the leaf, instead of handing the engine a dense
// gradient to sum into a new tensor that the accumulator then copies back. The tied
// embedding does this (ops::embedding): its lookup adds only the rows its ids name into the
// LM head's gradient. A dense gradient that reaches the engine meanwhile (another product of
// the same weight) is added into the pending buffer in place, by add's kernel. The sum is
// the engine's, element for element, except that an untouched element keeps its sign of
// zero where the engine's 0 + (−0) would give +0.
#pragma once

#include "microllm/core/tensor.h"

namespace microllm::autograd {

// Whether claims are on: unless MICROLLM_GRAD_INTO_BUFFER is "0" (read at each call).
bool gradient_claims_enabled();

// Whether adds are on: unless MICROLLM_ADD_INTO_BUFFER is "0" (read at each call).
bool gradient_adds_enabled();

// The gradient buffer of leaf `t` when this pass's gradient for `t` so far is that buffer and
// is still pending at the leaf's accumulator, and adds are on; undefined otherwise (a
// non-leaf, no buffer, nothing received yet, or a gradient received in other memory). The
// caller adds its whole contribution into it in place and returns an undefined gradient for
// `t`.
Tensor pending_gradient_buffer(const Tensor& t);

// Whether `t` is a leaf whose gradient buffer can be claimed now (the rules above).
bool gradient_buffer_claimable(const Tensor& t);

// Claims the memory the gradient of `t` may be written into in this backward pass: a leaf's
// gradient buffer, or for a non-leaf what its producing node claims; undefined when nothing
// can be claimed. The caller writes the whole gradient there and returns that tensor as the
// gradient of `t`.
Tensor claim_gradient_buffer(const Tensor& t);

}  // namespace microllm::autograd
