// rope: validation, dispatch and backward; rope_out, the allocation-free form, runs the
// same kernel (rope calls it); rope_qkv_heads, the joined projection's attention operands, with
// the same checks.
#include "microllm/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "../common.h"
#include "microllm/autograd/node.h"
#include "rope_kernels.h"

namespace microllm::ops {

Tensor rope_inv_freq(int64_t head_dim, double theta) {
  MICROLLM_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope_inv_freq",
                 "head_dim must be positive and even, found ", head_dim);
  MICROLLM_CHECK(theta > 0.0, "rope_inv_freq", "theta must be positive, found ", theta);
  // Hugging Face's F32 sequence 1 / theta^(arange(0, D, 2) / D), with each step correctly
  // rounded: the exponent in F32, theta^exponent evaluated in F64 and rounded once, the
  // reciprocal in F32. This reproduces PyTorch's CPU values in all but a few elements where
  // its pow is an ulp off (14 of 2,520 over D ≤ 256 and the usual bases); libm's powf
  // differed in 305 of 1,800.
  std::vector<float> values(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power = static_cast<float>(
        std::pow(static_cast<double>(static_cast<float>(theta)), static_cast<double>(exponent)));
    values[i] = 1.0f / power;
  }
  return Tensor::from_vector(values, {head_dim / 2});
}

namespace {

// x (…, D) with its sequence (T) at dimension seq_dim and the batch at 0; positions (T) or
// (B, T); inv_freq (D/2). `name` is x's argument name in the messages.
void check_rope_args(const char* op, const Tensor& x, const char* name, int64_t seq_dim,
                     const Tensor& positions, const Tensor& inv_freq) {
  detail::check_floating(op, x, name);
  detail::check_index(op, positions, "positions");
  detail::check_floating(op, inv_freq, "inv_freq");
  detail::check_same_device(op, x, name, positions, "positions");
  detail::check_rank(op, x, name, 4);
  const int64_t B = x.size(0), T = x.size(seq_dim), D = x.size(3);
  MICROLLM_CHECK(D % 2 == 0, op, "head dimension must be even, found ", name, " ", x.describe());
  MICROLLM_CHECK(inv_freq.dim() == 1 && inv_freq.size(0) == D / 2, op, "inv_freq must be (", D / 2,
                 ") for ", name, " ", x.describe(), ", found ", inv_freq.describe());
  MICROLLM_CHECK((positions.dim() == 1 && positions.size(0) == T) ||
                     (positions.dim() == 2 && positions.size(0) == B && positions.size(1) == T),
                 op, "positions must be (T) or (B, T) for ", name, " ", x.describe(), ", found ",
                 positions.describe());
}

// inv_freq as the kernels read it for the operand x: dense on x's device, in the kernels'
// arithmetic dtype (F32, or F64 for an F64 reference).
Tensor kernel_frequencies(const Tensor& inv_freq, const Tensor& x) {
  return inv_freq.detach().to(x.device()).to(detail::stat_dtype(x.dtype())).contiguous();
}

// True when x's rows of D are contiguous (the layout the kernels take with any outer strides).
bool contiguous_rows(const Tensor& x) { return x.stride(3) == 1 || x.size(3) <= 1; }

// x as the kernels read it: as it is when its rows of D are contiguous and its dtype is one
// the device's kernels compute in (a transposed (B, T, H, D) projection is not copied), else
// the dense compute operand.
Tensor rows_operand(const Tensor& x) {
  const bool kernel_dtype =
      x.is_cuda() ? x.dtype() != DType::F64 : detail::cpu_compute_dtype(x.dtype()) == x.dtype();
  if (kernel_dtype && contiguous_rows(x)) return x;
  return detail::compute_operand(x);
}

// An uninitialized tensor of `shape` whose memory order follows `strides` (dims by decreasing
// stride): the gradient of a transposed view is dense once transposed back.
Tensor empty_in_layout(const Shape& shape, const Strides& strides, DType dtype, Device device) {
  std::vector<int64_t> order(shape.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = static_cast<int64_t>(d);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  Shape dense_shape;
  std::vector<int64_t> back(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    dense_shape.push_back(shape[order[k]]);
    back[static_cast<size_t>(order[k])] = static_cast<int64_t>(k);
  }
  return Tensor::empty(dense_shape, dtype, device).permute(back);
}

}  // namespace

void rope_out(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, const Tensor& out) {
  const char* op = "rope_out";
  check_rope_args(op, x, "x", 2, positions, inv_freq);
  detail::check_out_dtype(op, x, "x");
  MICROLLM_CHECK(contiguous_rows(x), op,
                 "x must have unit stride along D (rows of D contiguous), found ", x.describe(),
                 " with strides (", x.stride(0), ", ", x.stride(1), ", ", x.stride(2), ", ",
                 x.stride(3), ")");
  detail::check_dense(op, positions, "positions");
  const DType freq_dtype = detail::stat_dtype(x.dtype());
  MICROLLM_CHECK(inv_freq.dtype() == freq_dtype && inv_freq.device() == x.device(), op,
                 "inv_freq must be ", freq_dtype, " on ", x.device(), " for x ", x.describe(),
                 " (rope converts it; rope_out does not), found ", inv_freq.describe());
  detail::check_dense(op, inv_freq, "inv_freq");
  detail::check_out_tensor(op, out, "out", x, "x");
  detail::check_out_shape(op, out, "out", x, "x");
  detail::check_apart_or_same(op, out, "out", x, "x");
  detail::check_apart(op, out, "out", positions, "positions");
  detail::check_apart(op, out, "out", inv_freq, "inv_freq");
  MICROLLM_KERNEL(x.device(), rope, x, positions, inv_freq, false, out);
}

Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  check_rope_args("rope", x, "x", 2, positions, inv_freq);
  const Tensor xc = rows_operand(x.detach());            // (B, H, T, D), rows of D contiguous
  const Tensor pos = positions.contiguous();             // (T) or (B, T); the kernel reads either
  const Tensor freq = kernel_frequencies(inv_freq, xc);  // (D/2)
  Tensor y = Tensor::empty(xc.shape(), xc.dtype(), x.device());
  rope_out(xc, pos, freq, y);
  Tensor out = y.to(x.dtype());
  // dx is laid out as x is (a transposed view's gradient is dense after the transpose back).
  autograd::record("rope", {x}, {&out},
                   [pos, freq, kernel_dtype = xc.dtype(), dtype = x.dtype(), shape = x.shape(),
                    strides = x.strides()](const std::vector<Tensor>& g) {
                     const Tensor dy = rows_operand(g[0].to(kernel_dtype));
                     Tensor dx = empty_in_layout(shape, strides, dy.dtype(), dy.device());
                     MICROLLM_KERNEL(dy.device(), rope, dy, pos, freq, true, dx);
                     return std::vector<Tensor>{dx.to(dtype)};
                   });
  return out;
}

// rope_qkv_heads: the kernels are rope_qkv_heads_cpu.cpp and rope_qkv_heads_cuda.cu.
QkvHeads rope_qkv_heads(const Tensor& qkv, int64_t num_heads, int64_t num_kv_heads,
                        const Tensor& positions, const Tensor& inv_freq) {
  const char* op = "rope_qkv_heads";
  check_rope_args(op, qkv, "qkv", 1, positions, inv_freq);
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(3);
  const int64_t H = num_heads, Hkv = num_kv_heads;
  MICROLLM_CHECK(H > 0 && Hkv > 0, op, "head counts must be positive, found num_heads ", H,
                 " and num_kv_heads ", Hkv);
  MICROLLM_CHECK(qkv.size(2) == H + 2 * Hkv, op, "qkv must be (B, T, H + 2·Hkv, D) = (B, T, ",
                 H + 2 * Hkv, ", D) for num_heads ", H, " and num_kv_heads ", Hkv, ", found ",
                 qkv.describe());
  const Tensor packed = detail::compute_operand(qkv.detach());  // (B, T, H + 2·Hkv, D) dense
  const Tensor pos = positions.contiguous();                    // (T) or (B, T)
  const Tensor freq = kernel_frequencies(inv_freq, packed);     // (D/2)
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
