// CPU RoPE, rotate-half pairs (i, i + D/2). Angles are formed as in Hugging Face:
// θ = float(position) · inv_freq in the compute dtype, then cos/sin.
#include "../common.h"
#include "rope_kernels.h"
#include "rope_rotate_cpu.h"

namespace microllm::ops {

void rope_cpu(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse,
              const Tensor& y) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), half = x.size(3) / 2;
  detail::dispatch_float(x.dtype(), [&](auto tag) {
    using T_ = decltype(tag);
    const T_* px = x.data<T_>();  // (B, H, T, D), rows of D contiguous
    // positions (B, T), or (T) shared by the batch (row stride 0); I64 or I32.
    const int64_t pos_stride = positions.dim() == 2 ? T : 0;
    const bool pos64 = positions.dtype() == DType::I64;
    const int64_t* pp64 = pos64 ? positions.data<int64_t>() : nullptr;
    const int32_t* pp32 = pos64 ? nullptr : positions.data<int32_t>();
    const T_* pf = inv_freq.data<T_>();  // (D/2)
    T_* py = y.data<T_>();               // (B, H, T, D), rows of D contiguous
    const T_ sign = inverse ? T_(-1) : T_(1);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t k = b * pos_stride + t;
          const T_ position = static_cast<T_>(pos64 ? pp64[k] : pp32[k]);
          const T_* xr = px + b * x.stride(0) + h * x.stride(1) + t * x.stride(2);
          T_* yr = py + b * y.stride(0) + h * y.stride(1) + t * y.stride(2);
          cpu_detail::rope_rotate_row(xr, yr, half, position, pf, sign);
        }
  });
}

}  // namespace microllm::ops
