// Loading a safetensors checkpoint into a model's named parameters: the report of missing,
// unexpected and mis-shaped tensors, strict mode, and (CUDA builds) streaming into GPU
// parameters through a bounded pinned staging buffer.
#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>

#include "microllm/io/safetensors.h"
#include "safetensors_internal.h"

#if MICROLLM_WITH_CUDA
#include "microllm/cuda/check.h"
#include "microllm/cuda/pinned.h"
#include "microllm/cuda/runtime.h"
#endif

namespace microllm::io {
namespace {

// A BF16 checkpoint loads into F32 parameters and the reverse; floats never load into
// integer tensors or integers into floats.
bool dtypes_compatible(DType model, DType checkpoint) {
  return is_floating(model) == is_floating(checkpoint);
}

#if MICROLLM_WITH_CUDA
// Streams host tensors into CUDA tensors through page-locked memory split in two halves:
// while the DMA engine copies one half to the GPU, the host converts the next chunk into
// the other. A pageable cudaMemcpy per tensor would instead stage every byte through the
// driver's small bounce buffer synchronously, and need no dtype conversion on the way.
class PinnedStager {
 public:
  // `bytes`: the whole buffer (two halves), at most options.staging_bytes.
  explicit PinnedStager(size_t bytes) : half_bytes_(std::max<size_t>(bytes / 2, 8) & ~size_t{7}) {}
  PinnedStager(const PinnedStager&) = delete;
  PinnedStager& operator=(const PinnedStager&) = delete;
  ~PinnedStager() {
    try {
      finish();
    } catch (...) {
      // Destruction during another error: the device error resurfaces on its next use.
    }
  }

  // dst (CUDA, dtype D) = src (CPU, dense, any dtype), converted to D on the host.
  void copy(Tensor dst, const Tensor& src) {
    if (dst.numel() == 0) return;
    if (!device_ || *device_ != dst.device()) switch_device(dst.device());
    // Dense target: the parameter itself, or a dense temporary copied in at the end.
    const Tensor target =
        dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), dst.dtype(), dst.device());
    const Tensor flat = src.reshape({src.numel()});  // (numel,)
    const size_t item = dtype_size(dst.dtype());
    const int64_t chunk = static_cast<int64_t>(half_bytes_ / item);
    auto* base = static_cast<char*>(target.raw_data());
    const cuda::Stream stream = cuda::current_stream(*device_);
    for (int64_t first = 0; first < flat.numel(); first += chunk) {
      const int64_t n = std::min(chunk, flat.numel() - first);
      const size_t nbytes = static_cast<size_t>(n) * item;
      const int half = next_;
      next_ ^= 1;
      if (pending_[half]) events_[half]->synchronize();  // its previous DMA has finished
      void* staging = static_cast<char*>(buffer_.data()) + half * half_bytes_;
      Tensor staged = Tensor::from_storage(Storage::wrap(staging, nbytes, Device::cpu(), {}), {n},
                                           {1}, 0, dst.dtype());  // (n,)
      staged.copy_from(flat.narrow(0, first, n));                 // dtype conversion on the host
      CUDA_CHECK(cudaMemcpyAsync(base + first * static_cast<int64_t>(item), staging, nbytes,
                                 cudaMemcpyHostToDevice, stream.handle()));
      cuda::count_transfer(cudaMemcpyHostToDevice, nbytes);
      events_[half]->record(stream);
      pending_[half] = true;
    }
    if (!dst.same(target)) dst.copy_from(target);  // strided, on device
  }

  // Waits for every copy in flight (the buffer may then be freed or reused).
  void finish() {
    for (int half = 0; half < 2; ++half)
      if (pending_[half]) {
        pending_[half] = false;
        events_[half]->synchronize();
      }
  }

 private:
  void switch_device(Device device) {
    finish();
    cuda::set_device(device);  // events belong to the device current at creation
    for (auto& event : events_) event = std::make_unique<cuda::Event>();
    if (buffer_.size() < 2 * half_bytes_) buffer_.reserve(2 * half_bytes_);
    device_ = device;
  }

  size_t half_bytes_;
  cuda::PinnedBuffer buffer_;
  std::unique_ptr<cuda::Event> events_[2];
  bool pending_[2] = {false, false};
  int next_ = 0;
  std::optional<Device> device_;
};
#endif

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

}  // namespace

std::string LoadReport::describe() const {
  std::ostringstream out;
  if (!missing.empty())
    out << "  missing from the checkpoint (" << missing.size() << "): " << join(missing) << "\n";
  if (!unexpected.empty())
    out << "  unexpected in the checkpoint (" << unexpected.size() << "): " << join(unexpected)
        << "\n";
  if (!mismatched.empty()) {
    out << "  mis-shaped or mistyped (" << mismatched.size() << "):";
    for (size_t i = 0; i < mismatched.size(); ++i) {
      const Mismatch& m = mismatched[i];
      out << (i ? "; " : " ") << m.name << ": model " << shape_str(m.model_shape) << " "
          << m.model_dtype << ", checkpoint " << shape_str(m.checkpoint_shape) << " "
          << m.checkpoint_dtype;
    }
    out << "\n";
  }
  return out.str();
}

LoadReport load_into(const std::map<std::string, Tensor>& params,
                     const SafetensorsCheckpoint& checkpoint, bool strict) {
  LoadOptions options;
  options.strict = strict;
  return load_into(params, checkpoint, options);
}

LoadReport load_into(const std::map<std::string, Tensor>& params,
                     const SafetensorsCheckpoint& checkpoint, const LoadOptions& options) {
  // Match names, shapes and dtype kinds first: strict mode copies nothing on a mismatch.
  LoadReport report;
  std::vector<std::pair<std::string, Tensor>> matched;
  [[maybe_unused]] size_t largest_cuda_bytes = 0;
  for (const auto& [name, param] : params) {
    if (!param.defined())
      safetensors_fail(checkpoint.source(), "parameter '" + name + "' is undefined");
    if (!checkpoint.contains(name)) {
      report.missing.push_back(name);
      continue;
    }
    const SafetensorsTensorInfo& info = checkpoint.info(name);
    if (info.shape != param.shape() || !dtypes_compatible(param.dtype(), info.dtype)) {
      report.mismatched.push_back({name, param.shape(), info.shape, param.dtype(), info.dtype});
      continue;
    }
    matched.emplace_back(name, param);
    if (param.is_cuda()) largest_cuda_bytes = std::max(largest_cuda_bytes, param.nbytes());
  }
  for (const std::string& name : checkpoint.names())
    if (!params.count(name)) report.unexpected.push_back(name);
  if (options.strict && !report.ok())
    safetensors_fail(checkpoint.source(),
                     "the checkpoint does not match the model's " + std::to_string(params.size()) +
                         " parameters (strict loading; nothing was copied):\n" + report.describe());

#if MICROLLM_WITH_CUDA
  // Never larger than needed: two halves of the largest CUDA parameter, rounded up.
  MICROLLM_CHECK(options.staging_bytes >= 16, "safetensors", "staging_bytes ",
                 options.staging_bytes, " is too small (at least 16)");
  PinnedStager stager(std::min(options.staging_bytes, 2 * largest_cuda_bytes + 16));
#endif
  for (auto& [name, param] : matched) {
    const Tensor source = checkpoint.tensor(name);  // (shape) CPU view of the mapping
#if MICROLLM_WITH_CUDA
    if (param.is_cuda()) {
      stager.copy(param, source);
      report.loaded.push_back(name);
      continue;
    }
#endif
    param.copy_from(source);
    report.loaded.push_back(name);
  }
#if MICROLLM_WITH_CUDA
  stager.finish();
#endif
  return report;
}

}  // namespace microllm::io
