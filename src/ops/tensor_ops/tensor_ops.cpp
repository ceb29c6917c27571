// cast, concat and index_select: validation, CPU copies and backward.
#include "microllm/ops/tensor_ops.h"

#include <cstring>

#include "../common.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {

Tensor cast(const Tensor& x, DType dtype) {
  detail::check_defined("cast", x, "x");
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  out.copy_from(x);
  if (is_floating(dtype)) {
    autograd::record("cast", {x}, {&out}, [source = x.dtype()](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].to(source)};
    });
  }
  return out;
}

Tensor concat(const std::vector<Tensor>& tensors, int64_t dim) {
  MICROLLM_CHECK(!tensors.empty(), "concat", "expected at least one tensor");
  const Tensor& first = tensors[0];
  detail::check_defined("concat", first, "tensors[0]");
  dim = normalize_dim(dim, first.dim(), "concat");
  Shape shape = first.shape();
  shape[dim] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::string name = "tensors[" + std::to_string(i) + "]";
    detail::check_defined("concat", t, name.c_str());
    detail::check_same_dtype("concat", first, "tensors[0]", t, name.c_str());
    detail::check_same_device("concat", first, "tensors[0]", t, name.c_str());
    bool compatible = t.dim() == first.dim();
    for (int64_t d = 0; compatible && d < t.dim(); ++d)
      compatible = d == dim || t.shape()[d] == first.shape()[d];
    MICROLLM_CHECK(compatible, "concat", "tensor ", i, " ", t.describe(),
                   " does not match tensor 0 ", first.describe(), " outside dimension ", dim);
    shape[dim] += t.shape()[dim];
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::vector<int64_t> starts;
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    out.narrow(dim, start, t.shape()[dim]).copy_from(t);
    starts.push_back(start);
    start += t.shape()[dim];
  }
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) sizes.push_back(t.shape()[dim]);
  autograd::record("concat", tensors, {&out}, [dim, starts, sizes](const std::vector<Tensor>& g) {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < starts.size(); ++i) grads.push_back(g[0].narrow(dim, starts[i], sizes[i]).contiguous());
    return grads;
  });
  return out;
}

namespace {
// Views x as (outer, n, inner) around `dim`.
void split_around(const Shape& shape, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) inner *= shape[d];
}
}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined("index_select", x, "x");
  detail::check_index("index_select", index, "index");
  detail::check_same_device("index_select", x, "x", index, "index");
  detail::check_cpu("index_select", x);
  MICROLLM_CHECK(index.dim() == 1, "index_select", "index must be 1-D, found ", index.describe());
  dim = normalize_dim(dim, x.dim(), "index_select");
  const int64_t n = x.shape()[dim], K = index.size(0);
  const Tensor ic = index.contiguous();
  for (int64_t i = 0; i < K; ++i) {
    const int64_t id = detail::load_index(ic, i);
    MICROLLM_CHECK(id >= 0 && id < n, "index_select", "index ", id, " at position ", i,
                   " is outside [0, ", n, ") for dimension ", dim, " of ", x.describe());
  }
  int64_t outer, inner;
  split_around(x.shape(), dim, outer, inner);
  Shape shape = x.shape();
  shape[dim] = K;
  const Tensor xc = x.detach().contiguous();  // (outer, n, inner)
  Tensor out = Tensor::empty(shape, x.dtype());  // (outer, K, inner)
  const size_t width = dtype_size(x.dtype());
  const size_t row_bytes = static_cast<size_t>(inner) * width;
  const char* src = static_cast<const char*>(xc.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < K; ++k)
      std::memcpy(dst + (o * K + k) * row_bytes, src + (o * n + detail::load_index(ic, k)) * row_bytes, row_bytes);

  autograd::record("index_select", {x, index}, {&out},
                   [ic, dim, n, outer, inner, K, x_shape = x.shape(), dtype = x.dtype()](const std::vector<Tensor>& g) {
    // dx[o, index[k], i] += dout[o, k, i], in k order (deterministic).
    const Tensor dy = detail::cpu_operand(g[0]).contiguous();
    Tensor dx = Tensor::zeros(x_shape, dy.dtype());
    detail::dispatch_float(dy.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* pdy = dy.data<T>();
      T* pdx = dx.data<T>();
#pragma omp parallel for schedule(static)
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < K; ++k) {
          const int64_t id = detail::load_index(ic, k);
          for (int64_t i = 0; i < inner; ++i) pdx[(o * n + id) * inner + i] += pdy[(o * K + k) * inner + i];
        }
    });
    return std::vector<Tensor>{dx.to(dtype), Tensor()};
  });
  return out;
}

}  // namespace microllm::ops
