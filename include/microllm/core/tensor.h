// Tensor: a view (shape, strides in elements, offset, dtype) into a Storage on one device,
// plus the autograd metadata that lets reverse mode find its way back.
//
// A Tensor is a cheap handle: copies share the same TensorImpl (like torch.Tensor). View
// methods (reshape, permute, narrow, expand, ...) return new tensors that share storage and
// are differentiable; contiguous(), to(dtype) and to(device) copy only when they must.
//
// Layers: the class is declared here, but members that record autograd are defined above
// core. The views, contiguous(), to(dtype), to(device) and clone() are defined in
// src/ops/view/view.cpp; backward() in src/autograd/engine.cpp. Everything else (factories,
// metadata, host access, copy_from, fill, the autograd accessors) is src/core/tensor.cpp.
// Core itself calls none of the members defined above it (it copies with empty + copy_from)
// and includes nothing from ops/ or autograd/; scripts/check_layers.sh checks the includes.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "microllm/core/device.h"
#include "microllm/core/dtype.h"
#include "microllm/core/error.h"
#include "microllm/core/shape.h"
#include "microllm/core/storage.h"

namespace microllm {

namespace autograd {
class Node;
}

struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor (no storage); defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories -------------------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32,
                     Device device = Device::cpu());
  // 0, 1, ..., n-1
  static Tensor arange(int64_t n, DType dtype = DType::I64, Device device = Device::cpu());
  // Copies host values into a new tensor of `shape` (numel must match), converted to `dtype`.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                            DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape,
                            DType dtype = DType::I64, Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = DType::F32, Device device = Device::cpu());
  // A view over existing storage.
  static Tensor from_storage(std::shared_ptr<Storage> storage, const Shape& shape,
                             const Strides& strides, int64_t offset, DType dtype);

  // ---- metadata --------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Strides& strides() const;
  int64_t offset() const;  // in elements, from the start of storage
  DType dtype() const;
  Device device() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t dim) const;    // negative dims count from the end
  int64_t stride(int64_t dim) const;  // negative dims count from the end
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  bool is_contiguous() const;
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  const std::shared_ptr<Storage>& storage() const;
  // "f32(2, 3) cpu"
  std::string describe() const;

  // Address of element 0 of this view. The typed form checks the dtype matches T.
  void* raw_data() const;
  template <class T>
  T* data() const;

  // ---- views (share storage, differentiable) ---------------------------------------------
  Tensor reshape(const Shape& shape) const;  // a view when strides allow, else a copy
  Tensor view(const Shape& shape) const;     // always a view; Error when strides do not allow
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;  // [start, end)
  Tensor expand(const Shape& shape) const;                      // size-1 dims → stride 0
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;

  // ---- copies when needed (differentiable) -----------------------------------------------
  Tensor contiguous() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor clone() const;  // always a new dense copy

  // ---- host access (for tests, tools and small values) -----------------------------------
  std::vector<double> to_vector_f64() const;  // any dtype, any device, any strides
  std::vector<float> to_vector_f32() const;
  std::vector<int64_t> to_vector_i64() const;  // integral dtypes
  double item() const;                         // one-element tensors

  // Copies `src` into this tensor (same shape; dtypes converted; devices may differ).
  // Not recorded by autograd.
  void copy_from(const Tensor& src);
  void fill(double value);  // not recorded by autograd

  // ---- autograd --------------------------------------------------------------------------
  bool requires_grad() const;
  // Marks a leaf as needing a gradient (floating dtypes only). Returns *this.
  Tensor& set_requires_grad(bool requires_grad);
  bool is_leaf() const;
  Tensor grad() const;  // undefined until a backward pass reaches this leaf
  void set_grad(const Tensor& grad);
  void zero_grad();  // drops the gradient (like set_to_none in PyTorch); keeps grad_buffer
  // Where this leaf keeps its gradient (a tensor of its shape, dtype and device, such as a
  // view into a flat gradient buffer): backward copies a pass's first gradient into it and
  // adds later ones in place, and .grad is then this tensor. Undefined (the default): the
  // first gradient is a new tensor and later ones make new sums. The values are the same.
  void set_grad_buffer(const Tensor& buffer);
  Tensor grad_buffer() const;
  // Runs reverse mode from this tensor. `grad_output` defaults to 1 for one-element tensors.
  void backward(const Tensor& grad_output = Tensor()) const;
  // A tensor sharing storage with no autograd history.
  Tensor detach() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  int output_nr() const;
  // Used by operators: attach the node that produced this tensor (output `output_nr`).
  void set_grad_fn(std::shared_ptr<autograd::Node> node, int output_nr);

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // Identity: true when both handles refer to the same TensorImpl.
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

// Autograd state of one tensor.
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                                // accumulated gradient (leaves)
  Tensor grad_buffer;                         // where grad is kept, or undefined (leaves)
  bool grad_buffer_claimed = false;           // claimed by a backward function since zero_grad
                                              // (autograd/gradient_buffer.h)
  bool grad_buffer_pending = false;           // this pass's gradient so far is in grad_buffer,
                                              // not yet accumulated (gradient_buffer.h)
  std::shared_ptr<autograd::Node> grad_fn;    // producer (non-leaves)
  int output_nr = 0;                          // which output of grad_fn this tensor is
  std::weak_ptr<autograd::Node> accumulator;  // the leaf's AccumulateGrad node, made lazily
  // Called after a backward pass has finished accumulating into `grad` (leaves; see
  // autograd::register_post_accumulate_grad_hook), with the hook's id for removal.
  std::vector<std::pair<int64_t, std::function<void(const Tensor& leaf)>>>
      post_accumulate_grad_hooks;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  DType dtype = DType::F32;
  AutogradMeta autograd;
};

// The C++ type stored for a dtype (uint16_t for F16/BF16, uint8_t for FP8, bool for Bool).
template <class T>
constexpr bool dtype_matches(DType dtype);

template <class T>
T* Tensor::data() const {
  MICROLLM_CHECK(dtype_matches<T>(dtype()), "Tensor::data", "tensor ", describe(),
                 " accessed with the wrong element type");
  return static_cast<T*>(raw_data());
}

template <class T>
constexpr bool dtype_matches(DType dtype) {
  if constexpr (std::is_same_v<T, double>) return dtype == DType::F64;
  if constexpr (std::is_same_v<T, float>) return dtype == DType::F32;
  if constexpr (std::is_same_v<T, uint16_t>) return dtype == DType::F16 || dtype == DType::BF16;
  if constexpr (std::is_same_v<T, int64_t>) return dtype == DType::I64;
  if constexpr (std::is_same_v<T, int32_t>) return dtype == DType::I32;
  if constexpr (std::is_same_v<T, int8_t>) return dtype == DType::I8;
  if constexpr (std::is_same_v<T, uint8_t>)
    return dtype == DType::U8 || dtype == DType::F8E4M3 || dtype == DType::F8E5M2;
  if constexpr (std::is_same_v<T, bool>) return dtype == DType::Bool;
  return false;
}

}  // namespace microllm
