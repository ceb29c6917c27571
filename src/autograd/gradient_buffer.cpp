// Claims of gradient buffers (see microllm/autograd/gradient_buffer.h).
#include "microllm/autograd/gradient_buffer.h"

#include "microllm/autograd/node.h"
#include "microllm/core/switch.h"

namespace microllm::autograd {

bool gradient_claims_enabled() { return !switch_off("MICROLLM_GRAD_INTO_BUFFER"); }

bool gradient_adds_enabled() { return !switch_off("MICROLLM_ADD_INTO_BUFFER"); }

Tensor pending_gradient_buffer(const Tensor& t) {
  if (!t.defined() || !t.is_leaf() || !t.requires_grad() || !gradient_adds_enabled())
    return Tensor();
  const AutogradMeta& meta = t.impl()->autograd;
  return meta.grad_buffer_pending && !meta.grad.defined() ? meta.grad_buffer : Tensor();
}

bool gradient_buffer_claimable(const Tensor& t) {
  if (!t.defined() || !t.is_leaf() || !t.requires_grad() || !gradient_claims_enabled())
    return false;
  const AutogradMeta& meta = t.impl()->autograd;
  return meta.grad_buffer.defined() && meta.grad_buffer.is_contiguous() && !meta.grad.defined() &&
         !meta.grad_buffer_claimed;
}

Tensor claim_gradient_buffer(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return Tensor();
  if (!t.is_leaf()) return t.grad_fn()->claim_gradient(t.output_nr());
  if (!gradient_buffer_claimable(t)) return Tensor();
  AutogradMeta& meta = t.impl()->autograd;
  meta.grad_buffer_claimed = true;
  return meta.grad_buffer;
}

}  // namespace microllm::autograd
