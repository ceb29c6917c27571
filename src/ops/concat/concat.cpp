// concat: validation, a copy of each input into its slice of the output, and the backward
// that hands each input its slice of the gradient; join (concat as a view where the inputs
// are neighbours in memory) and split (views, with a backward that joins).
#include "microllm/ops/concat.h"

#include "../common.h"
#include "microllm/autograd/gradient_buffer.h"
#include "microllm/autograd/node.h"

namespace microllm::ops {

namespace {

// The shape of the tensors joined along `dim` (normalized by the caller's name `op`),
// checking they can be.
Shape joined_shape(const char* op, const std::vector<Tensor>& tensors, int64_t& dim) {
  MICROLLM_CHECK(!tensors.empty(), op, "expected at least one tensor");
  const Tensor& first = tensors[0];
  detail::check_defined(op, first, "tensors[0]");
  dim = normalize_dim(dim, first.dim(), op);
  Shape shape = first.shape();
  shape[dim] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::string name = "tensors[" + std::to_string(i) + "]";
    detail::check_defined(op, t, name.c_str());
    detail::check_same_dtype(op, first, "tensors[0]", t, name.c_str());
    detail::check_same_device(op, first, "tensors[0]", t, name.c_str());
    bool compatible = t.dim() == first.dim();
    for (int64_t d = 0; compatible && d < t.dim(); ++d)
      compatible = d == dim || t.shape()[d] == first.shape()[d];
    MICROLLM_CHECK(compatible, op, "tensor ", i, " ", t.describe(), " does not match tensor 0 ",
                   first.describe(), " outside dimension ", dim);
    shape[dim] += t.shape()[dim];
  }
  return shape;
}

// Whether the tensors (of joinable shapes) lie side by side along `dim` in one storage.
bool side_by_side(const std::vector<Tensor>& tensors, int64_t dim) {
  const Tensor& first = tensors[0];
  int64_t next = first.offset();
  for (const Tensor& t : tensors) {
    if (t.storage() != first.storage() || t.strides() != first.strides() || t.offset() != next ||
        t.stride(dim) <= 0)
      return false;
    next = t.offset() + t.shape()[dim] * t.stride(dim);
  }
  return true;
}

}  // namespace

Tensor concat(const std::vector<Tensor>& tensors, int64_t dim) {
  const Shape shape = joined_shape("concat", tensors, dim);
  const Tensor& first = tensors[0];
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
    for (size_t i = 0; i < starts.size(); ++i)
      grads.push_back(g[0].narrow(dim, starts[i], sizes[i]).contiguous());
    return grads;
  });
  return out;
}

Tensor join(const std::vector<Tensor>& tensors, int64_t dim) {
  const Shape shape = joined_shape("join", tensors, dim);
  if (!side_by_side(tensors, dim)) return concat(tensors, dim);
  const Tensor& first = tensors[0];
  Tensor out =
      Tensor::from_storage(first.storage(), shape, first.strides(), first.offset(), first.dtype());
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) sizes.push_back(t.shape()[dim]);
  // The joined gradient may be written straight into the parts' gradient buffers when they
  // lie side by side as the parts do: one view over them, claimed for all parts or none
  // (autograd/gradient_buffer.h). The parts' handles are kept only for that.
  autograd::Node::ClaimFn claim;
  if (autograd::gradient_claims_enabled())
    claim = [parts = tensors, dim, shape](int) {
      std::vector<Tensor> buffers;  // each (shape of its part)
      for (const Tensor& part : parts) {
        if (!autograd::gradient_buffer_claimable(part)) return Tensor();
        buffers.push_back(part.grad_buffer());
      }
      if (!side_by_side(buffers, dim)) return Tensor();
      const Tensor& first = buffers[0];
      // (shape) over the buffers; dense, so it is exactly their elements
      Tensor joined = Tensor::from_storage(first.storage(), shape, first.strides(), first.offset(),
                                           first.dtype());
      if (!joined.is_contiguous()) return Tensor();
      for (const Tensor& part : parts) autograd::claim_gradient_buffer(part);
      return joined;
    };
  autograd::record(
      "join", tensors, {&out},
      [dim, sizes](const std::vector<Tensor>& g) {
        std::vector<Tensor> grads;
        int64_t start = 0;
        for (int64_t size : sizes) {
          grads.push_back(g[0].narrow(dim, start, size));
          start += size;
        }
        return grads;
      },
      std::move(claim));
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes) {
  detail::check_defined("split", x, "x");
  dim = normalize_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t size : sizes) {
    MICROLLM_CHECK(size >= 0, "split", "part sizes must not be negative, found ", size);
    total += size;
  }
  MICROLLM_CHECK(!sizes.empty() && total == x.size(dim), "split", "part sizes add up to ", total,
                 ", expected ", x.describe(), "'s size ", x.size(dim), " along dimension ", dim);
  std::vector<Tensor> parts;
  const Tensor base = x.detach();  // (shape of x) the same storage, no history
  int64_t start = 0;
  for (int64_t size : sizes) {
    parts.push_back(base.narrow(dim, start, size));
    start += size;
  }
  std::vector<Tensor*> outputs;
  for (Tensor& part : parts) outputs.push_back(&part);
  std::vector<Shape> shapes;
  for (const Tensor& part : parts) shapes.push_back(part.shape());
  autograd::record(
      "split", {x}, outputs,
      [dim, shapes, dtype = x.dtype(), device = x.device()](const std::vector<Tensor>& g) {
        std::vector<Tensor> grads;  // one per part, zeros where none arrived
        for (size_t i = 0; i < shapes.size(); ++i)
          grads.push_back(g[i].defined() ? g[i] : Tensor::zeros(shapes[i], dtype, device));
        return std::vector<Tensor>{join(grads, dim)};
      });
  return parts;
}

}  // namespace microllm::ops
