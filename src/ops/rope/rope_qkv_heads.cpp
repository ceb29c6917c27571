// rope_qkv_heads: validation, dispatch and backward (the kernels: rope_qkv_heads_cpu.cpp,
// rope_qkv_heads_cuda.cu).
#include "../common.h"
#include "microllm/autograd/node.h"
#include "microllm/ops/rope.h"
#include "rope_kernels.h"

namespace microllm::ops {

QkvHeads rope_qkv_heads(const Tensor& qkv, int64_t num_heads, int64_t num_kv_heads,
                        const Tensor& positions, const Tensor& inv_freq) {
  const char* op = "rope_qkv_heads";
  detail::check_floating(op, qkv, "qkv");
  detail::check_index(op, positions, "positions");
  detail::check_floating(op, inv_freq, "inv_freq");
  detail::check_same_device(op, qkv, "qkv", positions, "positions");
  detail::check_rank(op, qkv, "qkv", 4);
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(3);
  const int64_t H = num_heads, Hkv = num_kv_heads;
  MICROLLM_CHECK(H > 0 && Hkv > 0, op, "head counts must be positive, found num_heads ", H,
                 " and num_kv_heads ", Hkv);
  MICROLLM_CHECK(qkv.size(2) == H + 2 * Hkv, op, "qkv must be (B, T, H + 2·Hkv, D) = (B, T, ",
                 H + 2 * Hkv, ", D) for num_heads ", H, " and num_kv_heads ", Hkv, ", found ",
                 qkv.describe());
  MICROLLM_CHECK(D % 2 == 0, op, "head dimension must be even, found qkv ", qkv.describe());
  MICROLLM_CHECK(inv_freq.dim() == 1 && inv_freq.size(0) == D / 2, op, "inv_freq must be (", D / 2,
                 ") for qkv ", qkv.describe(), ", found ", inv_freq.describe());
  MICROLLM_CHECK((positions.dim() == 1 && positions.size(0) == T) ||
                     (positions.dim() == 2 && positions.size(0) == B && positions.size(1) == T),
                 op, "positions must be (T) or (B, T) for qkv ", qkv.describe(), ", found ",
                 positions.describe());
  const Tensor packed = detail::compute_operand(qkv.detach());  // (B, T, H + 2·Hkv, D) dense
  const Tensor pos = positions.contiguous();                    // (T) or (B, T)
  const DType freq_dtype = detail::stat_dtype(packed.dtype());
  const Tensor freq = inv_freq.detach().to(qkv.device()).to(freq_dtype).contiguous();  // (D/2)
  const Device device = qkv.device();
  Tensor q = Tensor::empty({B, H, T, D}, packed.dtype(), device);    // (B, H, T, D)
  Tensor k = Tensor::empty({B, Hkv, T, D}, packed.dtype(), device);  // (B, Hkv, T, D)
  Tensor v = Tensor::empty({B, Hkv, T, D}, packed.dtype(), device);  // (B, Hkv, T, D)
  MICROLLM_KERNEL(device, rope_qkv_heads, packed, q, k, v, pos, freq, H, Hkv, true);
  QkvHeads out{q.to(qkv.dtype()), k.to(qkv.dtype()), v.to(qkv.dtype())};
  autograd::record(op, {qkv}, {&out.q, &out.k, &out.v},
                   [pos, freq, H, Hkv, kernel_dtype = packed.dtype(), dtype = qkv.dtype(),
                    shape = packed.shape()](const std::vector<Tensor>& g) {
                     // Each defined gradient as the kernel reads it: dense, in the kernel's dtype.
                     auto operand = [&](const Tensor& t) {
                       return t.defined() ? t.to(kernel_dtype).contiguous() : Tensor();
                     };
                     const Tensor dq = operand(g[0]), dk = operand(g[1]), dv = operand(g[2]);
                     const Device dev = pos.device();
                     Tensor dqkv = Tensor::empty(shape, kernel_dtype, dev);  // (B, T, H + 2·Hkv, D)
                     MICROLLM_KERNEL(dev, rope_qkv_heads, dqkv, dq, dk, dv, pos, freq, H, Hkv,
                                     false);
                     return std::vector<Tensor>{dqkv.to(dtype)};
                   });
  return out;
}

}  // namespace microllm::ops
