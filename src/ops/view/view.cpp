// Tensor views (share storage) and the copies contiguous / clone / to(dtype) / to(device),
// each with its backward. Views never move data: they compute a new shape, strides and offset.
#include <algorithm>
#include <numeric>
#include <optional>

#include "microllm/autograd/node.h"
#include "microllm/core/tensor.h"
#include "microllm/ops/reduce.h"

namespace microllm {
namespace {

// A new TensorImpl over the same storage.
Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

// Replaces one -1 by the size that keeps numel; checks the product matches.
Shape infer_shape(const Shape& requested, int64_t numel, const Shape& from, const char* op) {
  Shape shape = requested;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      MICROLLM_CHECK(infer_at < 0, op, "only one dimension can be -1, found ",
                     shape_str(requested));
      infer_at = static_cast<int64_t>(i);
    } else {
      MICROLLM_CHECK(shape[i] >= 0, op, "invalid size in shape ", shape_str(requested));
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    MICROLLM_CHECK(known != 0 && numel % known == 0, op, "cannot reshape ", shape_str(from),
                   " into ", shape_str(requested));
    shape[infer_at] = numel / known;
  }
  MICROLLM_CHECK(shape_numel(shape) == numel, op, "cannot reshape ", shape_str(from), " (", numel,
                 " elements) into ", shape_str(requested));
  return shape;
}

// Strides that let `shape` view the same elements as (old_shape, old_strides) in row-major
// order, or nullopt when none exist. The old dimensions are grouped into runs that are
// contiguous with each other ("chunks"); each chunk must be split exactly by consecutive new
// dimensions, which then take strides inside the chunk.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides,
                                    const Shape& shape) {
  if (shape_numel(old_shape) == 0) return contiguous_strides(shape);
  struct Chunk {
    int64_t numel;
    int64_t inner_stride;  // stride of the chunk's last dimension
  };
  std::vector<Chunk> chunks;
  for (size_t d = 0; d < old_shape.size(); ++d) {
    if (old_shape[d] == 1) continue;  // size-1 dimensions carry no layout
    if (!chunks.empty() && chunks.back().inner_stride == old_strides[d] * old_shape[d]) {
      chunks.back().numel *= old_shape[d];
      chunks.back().inner_stride = old_strides[d];
    } else {
      chunks.push_back({old_shape[d], old_strides[d]});
    }
  }
  Strides strides(shape.size(), 1);
  int64_t chunk = static_cast<int64_t>(chunks.size()) - 1;
  int64_t inner = 1;  // product of the new sizes already placed in the current chunk
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) {
      strides[d] = chunk >= 0 ? chunks[chunk].inner_stride * inner : 1;
      continue;
    }
    if (chunk < 0) return std::nullopt;
    strides[d] = chunks[chunk].inner_stride * inner;
    inner *= shape[d];
    if (inner == chunks[chunk].numel) {
      --chunk;
      inner = 1;
    } else if (chunks[chunk].numel % inner != 0) {
      return std::nullopt;  // this new dimension straddles two chunks
    }
  }
  if (chunk != -1 || inner != 1) return std::nullopt;
  return strides;
}

void record_view(const char* name, const Tensor& input, Tensor& out,
                 std::function<Tensor(const Tensor&)> backward) {
  autograd::record(name, {input}, {&out},
                   [backward = std::move(backward)](const std::vector<Tensor>& g) {
                     return std::vector<Tensor>{g[0].defined() ? backward(g[0]) : Tensor()};
                   });
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  const Shape shape = infer_shape(requested, numel(), this->shape(), "view");
  std::optional<Strides> strides = view_strides(this->shape(), this->strides(), shape);
  MICROLLM_CHECK(strides.has_value(), "view", "a tensor of shape ", shape_str(this->shape()),
                 " and strides ", shape_str(this->strides()), " cannot be viewed as ",
                 shape_str(shape), "; use reshape() (which copies) or contiguous() first");
  Tensor out = make_view(*this, shape, *strides, offset());
  const Shape old_shape = this->shape();
  record_view("view", *this, out, [old_shape](const Tensor& g) { return g.reshape(old_shape); });
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  const Shape shape = infer_shape(requested, numel(), this->shape(), "reshape");
  if (view_strides(this->shape(), this->strides(), shape)) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  const int64_t rank = dim();
  MICROLLM_CHECK(static_cast<int64_t>(dims.size()) == rank, "permute", "expected ", rank,
                 " dimensions for a tensor of shape ", shape_str(shape()), ", found ",
                 shape_str(dims));
  std::vector<int64_t> order(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape shape(dims.size());
  Strides strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = normalize_dim(dims[i], rank, "permute");
    MICROLLM_CHECK(!seen[d], "permute", "dimension ", d, " repeats in ", shape_str(dims));
    seen[d] = true;
    order[i] = d;
    shape[i] = this->shape()[d];
    strides[i] = this->strides()[d];
  }
  Tensor out = make_view(*this, shape, strides, offset());
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = static_cast<int64_t>(i);
  record_view("permute", *this, out, [inverse](const Tensor& g) { return g.permute(inverse); });
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  std::vector<int64_t> dims(static_cast<size_t>(dim()));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[normalize_dim(dim0, dim(), "transpose")],
            dims[normalize_dim(dim1, dim(), "transpose")]);
  return permute(dims);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = normalize_dim(d, dim(), "narrow");
  const int64_t size = shape()[d];
  MICROLLM_CHECK(start >= 0 && length >= 0 && start + length <= size, "narrow", "range [", start,
                 ", ", start + length, ") is outside dimension ", d, " of size ", size,
                 " in shape ", shape_str(shape()));
  Shape shape = this->shape();
  shape[d] = length;
  Tensor out = make_view(*this, shape, strides(), offset() + start * strides()[d]);
  const Shape old_shape = this->shape();
  const DType dtype = this->dtype();
  const Device device = this->device();
  record_view("narrow", *this, out, [=](const Tensor& g) {
    Tensor full = Tensor::zeros(old_shape, dtype, device);
    full.narrow(d, start, length).copy_from(g);
    return full;
  });
  return out;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  return narrow(d, start, end - start);
}

Tensor Tensor::expand(const Shape& requested) const {
  const int64_t rank = dim();
  const int64_t new_rank = static_cast<int64_t>(requested.size());
  MICROLLM_CHECK(new_rank >= rank, "expand", "cannot expand shape ", shape_str(shape()), " to ",
                 shape_str(requested), " (fewer dimensions)");
  Shape shape(requested.size());
  Strides strides(requested.size());
  for (int64_t i = 0; i < new_rank; ++i) {
    const int64_t old = i - (new_rank - rank);  // aligned from the right
    const int64_t want = requested[i];
    if (old < 0) {
      MICROLLM_CHECK(want >= 0, "expand", "new leading dimension must be sized, found ",
                     shape_str(requested));
      shape[i] = want;
      strides[i] = 0;
    } else if (want == -1 || want == this->shape()[old]) {
      shape[i] = this->shape()[old];
      strides[i] = this->strides()[old];
    } else {
      MICROLLM_CHECK(this->shape()[old] == 1, "expand", "cannot expand shape ",
                     shape_str(this->shape()), " to ", shape_str(requested), " (dimension ", old,
                     " has size ", this->shape()[old], ", not 1)");
      shape[i] = want;
      strides[i] = 0;
    }
  }
  Tensor out = make_view(*this, shape, strides, offset());
  const Shape old_shape = this->shape();
  record_view("expand", *this, out,
              [old_shape](const Tensor& g) { return ops::sum_to_shape(g, old_shape); });
  return out;
}

Tensor Tensor::squeeze(int64_t d) const {
  d = normalize_dim(d, dim(), "squeeze");
  if (shape()[d] != 1) return *this;  // as torch.squeeze(dim): only size-1 dimensions go
  Shape shape = this->shape();
  Strides strides = this->strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  Tensor out = make_view(*this, shape, strides, offset());
  const Shape old_shape = this->shape();
  record_view("squeeze", *this, out, [old_shape](const Tensor& g) { return g.reshape(old_shape); });
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = normalize_dim(d, dim() + 1, "unsqueeze");
  Shape shape = this->shape();
  Strides strides = this->strides();
  const int64_t stride = d < dim() ? strides[d] * shape[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  Tensor out = make_view(*this, shape, strides, offset());
  const Shape old_shape = this->shape();
  record_view("unsqueeze", *this, out,
              [old_shape](const Tensor& g) { return g.reshape(old_shape); });
  return out;
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = normalize_dim(start_dim, dim(), "flatten");
  end_dim = normalize_dim(end_dim, dim(), "flatten");
  MICROLLM_CHECK(start_dim <= end_dim, "flatten", "start_dim ", start_dim, " is after end_dim ",
                 end_dim);
  Shape shape(this->shape().begin(), this->shape().begin() + start_dim);
  int64_t merged = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) merged *= this->shape()[d];
  shape.push_back(merged);
  shape.insert(shape.end(), this->shape().begin() + end_dim + 1, this->shape().end());
  return reshape(shape);
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape(), dtype(), device());
  out.copy_from(*this);
  record_view("clone", *this, out, [](const Tensor& g) { return g; });
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  Tensor out = Tensor::empty(shape(), dtype, device());
  out.copy_from(*this);
  // Differentiable between floating dtypes: the gradient goes back in the source dtype.
  if (is_floating(dtype)) {
    const DType source = this->dtype();
    record_view("cast", *this, out, [source](const Tensor& g) { return g.to(source); });
  }
  return out;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor out = Tensor::empty(shape(), dtype(), device);
  out.copy_from(*this);
  const Device source = this->device();
  record_view("to_device", *this, out, [source](const Tensor& g) { return g.to(source); });
  return out;
}

}  // namespace microllm
