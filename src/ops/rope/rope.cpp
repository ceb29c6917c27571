// rope: validation, dispatch and backward.
#include "microllm/ops/rope.h"

#include <cmath>

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
  std::vector<float> values(static_cast<size_t>(head_dim / 2));  // (D/2)
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power = static_cast<float>(
        std::pow(static_cast<double>(static_cast<float>(theta)), static_cast<double>(exponent)));
    values[i] = 1.0f / power;
  }
  return Tensor::from_vector(values, {head_dim / 2});
}

Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  detail::check_floating("rope", x, "x");
  detail::check_index("rope", positions, "positions");
  detail::check_floating("rope", inv_freq, "inv_freq");
  detail::check_same_device("rope", x, "x", positions, "positions");
  detail::check_rank("rope", x, "x", 4);
  const int64_t B = x.size(0), T = x.size(2), D = x.size(3);
  MICROLLM_CHECK(D % 2 == 0, "rope", "head dimension must be even, found x ", x.describe());
  MICROLLM_CHECK(inv_freq.dim() == 1 && inv_freq.size(0) == D / 2, "rope", "inv_freq must be (",
                 D / 2, ") for x ", x.describe(), ", found ", inv_freq.describe());
  MICROLLM_CHECK((positions.dim() == 1 && positions.size(0) == T) ||
                     (positions.dim() == 2 && positions.size(0) == B && positions.size(1) == T),
                 "rope", "positions must be (T) or (B, T) for x ", x.describe(), ", found ",
                 positions.describe());
  const Tensor xc = detail::compute_operand(x.detach());  // (B, H, T, D)
  // (T) → (B, T) so the kernel sees one layout.
  const Tensor pos = (positions.dim() == 1 ? positions.unsqueeze(0).expand({B, T}) : positions)
                         .to(DType::I64)
                         .contiguous();
  // Frequencies in the kernel's arithmetic dtype: F32, or F64 for an F64 reference.
  const DType freq_dtype = detail::stat_dtype(xc.dtype());
  const Tensor freq = inv_freq.detach().to(x.device()).to(freq_dtype).contiguous();  // (D/2)
  Tensor y = Tensor::empty(xc.shape(), xc.dtype(), x.device());                      // (B, H, T, D)
  MICROLLM_KERNEL(x.device(), rope, xc, pos, freq, false, y);
  Tensor out = y.to(x.dtype());  // (B, H, T, D)
  autograd::record(
      "rope", {x}, {&out},
      [pos, freq, kernel_dtype = xc.dtype(), dtype = x.dtype()](const std::vector<Tensor>& g) {
        const Tensor dy = detail::compute_operand(g[0].to(kernel_dtype));  // (B, H, T, D)
        Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());    // (B, H, T, D)
        MICROLLM_KERNEL(dy.device(), rope, dy, pos, freq, true, dx);
        return std::vector<Tensor>{dx.to(dtype)};
      });
  return out;
}

}  // namespace microllm::ops
