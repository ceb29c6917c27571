// Tensor factories, metadata, host access and copies: the members core defines (see the
// layer note in tensor.h). Views and to()/clone() live in src/ops/view/, backward() in
// src/autograd/engine.cpp.
#include "microllm/core/tensor.h"

#include <cstring>
#include <sstream>

#include "microllm/core/backend.h"
#include "microllm/core/element.h"
#include "microllm/core/strided_loop.h"

namespace microllm {

// ---- factories ---------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape)
    MICROLLM_CHECK(s >= 0, "Tensor::empty", "negative size in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage =
      Storage::allocate(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  backend_for(device).memset_zero(t.raw_data(), t.nbytes(), device);
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill(value);
  return t;
}

Tensor Tensor::arange(int64_t n, DType dtype, Device device) {
  MICROLLM_CHECK(n >= 0, "Tensor::arange", "negative length ", n);
  // Written on the tensor's device by its backend: no host staging, no copy.
  Tensor t = empty({n}, dtype, device);
  if (n > 0) backend_for(device).arange(t, 0);
  return t;
}

namespace {
// Builds a CPU tensor from host values of element type T (stored as dtype `host_dtype`) and
// converts it to the requested dtype and device.
template <class T>
Tensor from_host(const std::vector<T>& values, const Shape& shape, DType host_dtype, DType dtype,
                 Device device) {
  MICROLLM_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "Tensor::from_vector",
                 values.size(), " values do not fill shape ", shape_str(shape));
  Tensor host = Tensor::empty(shape, host_dtype);
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
  if (dtype == host_dtype && device.is_cpu()) return host;
  Tensor out = Tensor::empty(shape, dtype, device);
  out.copy_from(host);
  return out;
}
}  // namespace

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype,
                           Device device) {
  return from_host(values, shape, DType::F64, dtype, device);
}
Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, DType dtype,
                           Device device) {
  return from_host(values, shape, DType::F32, dtype, device);
}
Tensor Tensor::from_vector(const std::vector<int64_t>& values, const Shape& shape, DType dtype,
                           Device device) {
  return from_host(values, shape, DType::I64, dtype, device);
}

Tensor Tensor::scalar(double value, DType dtype, Device device) {
  return full({}, value, dtype, device);
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, const Shape& shape,
                            const Strides& strides, int64_t offset, DType dtype) {
  MICROLLM_CHECK(shape.size() == strides.size(), "Tensor::from_storage", "shape ", shape_str(shape),
                 " and strides ", shape_str(strides), " differ in rank");
  // The furthest element this view can reach must lie inside the storage.
  int64_t last = offset;
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    MICROLLM_CHECK(shape[d] >= 0 && strides[d] >= 0, "Tensor::from_storage",
                   "negative size or stride in shape ", shape_str(shape), " strides ",
                   shape_str(strides));
    if (shape[d] == 0)
      empty = true;
    else
      last += (shape[d] - 1) * strides[d];
  }
  MICROLLM_CHECK(
      offset >= 0 &&
          (empty || static_cast<size_t>(last + 1) * dtype_size(dtype) <= storage->nbytes()),
      "Tensor::from_storage", "view ", shape_str(shape), " strides ", shape_str(strides),
      " offset ", offset, " of ", dtype, " reaches past the ", storage->nbytes(), "-byte storage");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// ---- metadata ----------------------------------------------------------------------------

void Tensor::check_defined(const char* what) const {
  MICROLLM_CHECK(impl_ != nullptr, what, "the tensor is undefined");
}

const Shape& Tensor::shape() const {
  check_defined("Tensor::shape");
  return impl_->shape;
}
const Strides& Tensor::strides() const {
  check_defined("Tensor::strides");
  return impl_->strides;
}
int64_t Tensor::offset() const {
  check_defined("Tensor::offset");
  return impl_->offset;
}
DType Tensor::dtype() const {
  check_defined("Tensor::dtype");
  return impl_->dtype;
}
Device Tensor::device() const {
  check_defined("Tensor::device");
  return impl_->storage->device();
}
const std::shared_ptr<Storage>& Tensor::storage() const {
  check_defined("Tensor::storage");
  return impl_->storage;
}
int64_t Tensor::numel() const { return shape_numel(shape()); }

int64_t Tensor::size(int64_t d) const { return shape()[normalize_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const {
  return strides()[normalize_dim(d, dim(), "Tensor::stride")];
}

bool Tensor::is_contiguous() const {
  if (numel() == 0)
    return true;  // no element to be out of place (dense strides of (3, 0) are (1, 1))
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (impl_->shape[d] == 1) continue;  // the stride of a size-1 dimension is irrelevant
    if (impl_->strides[d] != expected) return false;
    expected *= impl_->shape[d];
  }
  return true;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  std::ostringstream out;
  out << dtype() << shape_str(shape()) << ' ' << device();
  return out.str();
}

void* Tensor::raw_data() const {
  check_defined("Tensor::raw_data");
  auto* base = static_cast<char*>(impl_->storage->data());
  return base ? base + impl_->offset * static_cast<int64_t>(dtype_size(impl_->dtype)) : nullptr;
}

// ---- host access -------------------------------------------------------------------------

namespace {
// `t` itself when it already lies on the host in `dtype`, else a dense host copy converted
// to `dtype` (copy_from converts; no autograd is involved).
Tensor host_copy(const Tensor& t, DType dtype) {
  if (t.is_cpu() && t.dtype() == dtype) return t;
  Tensor host = Tensor::empty(t.shape(), dtype, Device::cpu());
  host.copy_from(t);
  return host;
}
}  // namespace

std::vector<double> Tensor::to_vector_f64() const {
  const Tensor host = host_copy(*this, dtype());
  std::vector<double> values(static_cast<size_t>(numel()));
  const void* base = host.raw_data();
  strided_loop<1>(host.shape(), {host.strides()}, [&](int64_t i, const std::array<int64_t, 1>& o) {
    values[i] = load_element(base, o[0], host.dtype());
  });
  return values;
}

std::vector<float> Tensor::to_vector_f32() const {
  std::vector<double> values = to_vector_f64();
  return std::vector<float>(values.begin(), values.end());
}

std::vector<int64_t> Tensor::to_vector_i64() const {
  MICROLLM_CHECK(is_integral(dtype()), "Tensor::to_vector_i64",
                 "expected an integer tensor, found ", describe());
  const Tensor host = host_copy(*this, DType::I64);  // (numel) values in row-major order
  std::vector<int64_t> values(static_cast<size_t>(numel()));
  const int64_t* p = host.data<int64_t>();
  strided_loop<1>(host.shape(), {host.strides()},
                  [&](int64_t i, const std::array<int64_t, 1>& o) { values[i] = p[o[0]]; });
  return values;
}

double Tensor::item() const {
  MICROLLM_CHECK(numel() == 1, "Tensor::item", "expected one element, found ", describe());
  return to_vector_f64()[0];
}

// ---- copies ------------------------------------------------------------------------------

void Tensor::copy_from(const Tensor& src) {
  MICROLLM_CHECK(defined() && src.defined(), "copy", "undefined tensor");
  MICROLLM_CHECK(shape() == src.shape(), "copy", "destination ", describe(), " and source ",
                 src.describe(), " differ in shape");
  if (numel() == 0) return;
  const Device dst_device = device(), src_device = src.device();
  if (dst_device == src_device) {
    backend_for(dst_device).copy_tensor(*this, src);
    return;
  }
  // Across devices only dense bytes of one dtype move; anything else is first made dense in
  // the destination dtype on the source side, or converted after arriving.
  if (src.dtype() == dtype() && src.is_contiguous() && is_contiguous()) {
    DeviceBackend& backend = backend_for(dst_device.is_cpu() ? src_device : dst_device);
    backend.copy(raw_data(), dst_device, src.raw_data(), src_device, nbytes());
    return;
  }
  Tensor staged = Tensor::empty(shape(), dtype(), src_device);
  backend_for(src_device).copy_tensor(staged, src);
  if (is_contiguous()) {
    copy_from(staged);
    return;
  }
  Tensor arrived = Tensor::empty(shape(), dtype(), dst_device);
  arrived.copy_from(staged);
  backend_for(dst_device).copy_tensor(*this, arrived);
}

void Tensor::fill(double value) {
  check_defined("Tensor::fill");
  if (numel() > 0) backend_for(device()).fill(*this, value);
}

// ---- autograd accessors ------------------------------------------------------------------

bool Tensor::requires_grad() const { return defined() && impl_->autograd.requires_grad; }

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  check_defined("Tensor::set_requires_grad");
  MICROLLM_CHECK(!requires_grad || is_floating(dtype()), "Tensor::set_requires_grad",
                 "only floating tensors can require gradients, found ", describe());
  MICROLLM_CHECK(is_leaf(), "Tensor::set_requires_grad",
                 "only leaf tensors can change requires_grad; use detach() first");
  impl_->autograd.requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const {
  check_defined("Tensor::is_leaf");
  return !impl_->autograd.grad_fn;
}
Tensor Tensor::grad() const {
  check_defined("Tensor::grad");
  return impl_->autograd.grad;
}
void Tensor::set_grad(const Tensor& grad) {
  check_defined("Tensor::set_grad");
  MICROLLM_CHECK(!grad.defined() || grad.shape() == shape(), "Tensor::set_grad", "gradient ",
                 grad.describe(), " does not match tensor ", describe());
  impl_->autograd.grad = grad;
  impl_->autograd.grad_buffer_claimed = false;
  impl_->autograd.grad_buffer_pending = false;
}
void Tensor::zero_grad() {
  check_defined("Tensor::zero_grad");
  impl_->autograd.grad = Tensor();
  impl_->autograd.grad_buffer_claimed = false;
  impl_->autograd.grad_buffer_pending = false;
}
void Tensor::set_grad_buffer(const Tensor& buffer) {
  check_defined("Tensor::set_grad_buffer");
  MICROLLM_CHECK(!buffer.defined() || (buffer.shape() == shape() && buffer.dtype() == dtype() &&
                                       buffer.device() == device()),
                 "Tensor::set_grad_buffer", "gradient buffer ", buffer.describe(),
                 " does not match tensor ", describe(), " (shape, dtype and device must agree)");
  impl_->autograd.grad_buffer = buffer;
  impl_->autograd.grad_buffer_claimed = false;
  impl_->autograd.grad_buffer_pending = false;
}
Tensor Tensor::grad_buffer() const {
  check_defined("Tensor::grad_buffer");
  return impl_->autograd.grad_buffer;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  check_defined("Tensor::grad_fn");
  return impl_->autograd.grad_fn;
}
int Tensor::output_nr() const {
  check_defined("Tensor::output_nr");
  return impl_->autograd.output_nr;
}

void Tensor::set_grad_fn(std::shared_ptr<autograd::Node> node, int output_nr) {
  impl_->autograd.grad_fn = std::move(node);
  impl_->autograd.output_nr = output_nr;
  impl_->autograd.requires_grad = impl_->autograd.grad_fn != nullptr;
}

Tensor Tensor::detach() const {
  check_defined("Tensor::detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

}  // namespace microllm
