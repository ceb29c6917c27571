// Strided converting copy, fill and arange kernels (the CUDA side of Tensor::copy_from, fill
// and arange).
//
// One thread per destination element in a grid-stride loop. Same-dtype dense copies go to
// cudaMemcpyAsync; same-dtype strided copies move raw 1/2/4/8-byte words; different dtypes
// convert through double (floats) or int64 (integer to integer), as the CPU backend does.
#include "indexer.h"
#include "kernel_utils.cuh"
#include "microllm/cuda/check.h"
#include "microllm/cuda/runtime.h"
#include "tensor_kernels.h"

namespace microllm::cuda {
namespace {

__device__ double load_as_double(const void* base, int64_t i, int dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::F64:
      return static_cast<const double*>(base)[i];
    case DType::F32:
      return static_cast<const float*>(base)[i];
    case DType::F16:
      return __half2float(static_cast<const __half*>(base)[i]);
    case DType::BF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::F8E4M3:
      return static_cast<float>(static_cast<const __nv_fp8_e4m3*>(base)[i]);
    case DType::F8E5M2:
      return static_cast<float>(static_cast<const __nv_fp8_e5m2*>(base)[i]);
    case DType::I64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::I32:
      return static_cast<const int32_t*>(base)[i];
    case DType::I8:
      return static_cast<const int8_t*>(base)[i];
    case DType::U8:
      return static_cast<const uint8_t*>(base)[i];
    case DType::Bool:
      return static_cast<const uint8_t*>(base)[i] != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

__device__ int64_t load_as_int64(const void* base, int64_t i, int dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::I64:
      return static_cast<const int64_t*>(base)[i];
    case DType::I32:
      return static_cast<const int32_t*>(base)[i];
    case DType::I8:
      return static_cast<const int8_t*>(base)[i];
    case DType::U8:
      return static_cast<const uint8_t*>(base)[i];
    case DType::Bool:
      return static_cast<const uint8_t*>(base)[i] != 0 ? 1 : 0;
    default:
      return static_cast<int64_t>(load_as_double(base, i, dtype));
  }
}

// Floating targets round to nearest even (narrow formats through F32; FP8 saturates).
__device__ void store_double(void* base, int64_t i, int dtype, double v) {
  switch (static_cast<DType>(dtype)) {
    case DType::F64:
      static_cast<double*>(base)[i] = v;
      return;
    case DType::F32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case DType::F16:
      static_cast<__half*>(base)[i] = __float2half_rn(static_cast<float>(v));
      return;
    case DType::BF16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(static_cast<float>(v));
      return;
    case DType::F8E4M3:
      static_cast<__nv_fp8_storage_t*>(base)[i] =
          __nv_cvt_float_to_fp8(static_cast<float>(v), __NV_SATFINITE, __NV_E4M3);
      return;
    case DType::F8E5M2:
      static_cast<__nv_fp8_storage_t*>(base)[i] =
          __nv_cvt_float_to_fp8(static_cast<float>(v), __NV_SATFINITE, __NV_E5M2);
      return;
    case DType::I64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      return;
    case DType::I32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      return;
    case DType::I8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v);
      return;
    case DType::U8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v);
      return;
    case DType::Bool:
      static_cast<uint8_t*>(base)[i] = v != 0.0 ? 1 : 0;
      return;
  }
}

__device__ void store_int64(void* base, int64_t i, int dtype, int64_t v) {
  switch (static_cast<DType>(dtype)) {
    case DType::I64:
      static_cast<int64_t*>(base)[i] = v;
      return;
    case DType::I32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      return;
    case DType::I8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v);
      return;
    case DType::U8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v);
      return;
    case DType::Bool:
      static_cast<uint8_t*>(base)[i] = v != 0 ? 1 : 0;
      return;
    default:
      store_double(base, i, dtype, static_cast<double>(v));
      return;
  }
}

template <class Word>
__global__ void copy_words_kernel(Word* dst, StridedIndexer dst_ix, const Word* src,
                                  StridedIndexer src_ix, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[dst_ix.offset(i)] = src[src_ix.offset(i)];
}

__global__ void convert_kernel(void* dst, int dst_dtype, StridedIndexer dst_ix, const void* src,
                               int src_dtype, StridedIndexer src_ix, int64_t n, bool integers) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = dst_ix.offset(i), s = src_ix.offset(i);
    if (integers)
      store_int64(dst, d, dst_dtype, load_as_int64(src, s, src_dtype));
    else
      store_double(dst, d, dst_dtype, load_as_double(src, s, src_dtype));
  }
}

__global__ void fill_kernel(void* dst, int dtype, StridedIndexer ix, double value, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_double(dst, ix.offset(i), dtype, value);
}

// dst[i] = start + i; integer dtypes through int64 so large values stay exact.
__global__ void arange_kernel(void* dst, int dtype, int64_t start, int64_t n, bool integer) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (integer)
      store_int64(dst, i, dtype, start + i);
    else
      store_double(dst, i, dtype, static_cast<double>(start + i));
  }
}

}  // namespace

void copy_tensor(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const cudaStream_t stream = current_stream_handle(dst.device());
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(),
                               cudaMemcpyDeviceToDevice, stream));
    count_transfer(cudaMemcpyDeviceToDevice, dst.nbytes());
    return;
  }
  constexpr int kThreads = 256;
  const unsigned blocks = grid_for(n, kThreads);
  const StridedIndexer dix = make_indexer(dst, "cuda copy"), six = make_indexer(src, "cuda copy");
  if (dst.dtype() == src.dtype()) {
    switch (dtype_size(dst.dtype())) {
      case 1:
        copy_words_kernel<<<blocks, kThreads, 0, stream>>>(
            static_cast<uint8_t*>(dst.raw_data()), dix, static_cast<const uint8_t*>(src.raw_data()),
            six, n);
        break;
      case 2:
        copy_words_kernel<<<blocks, kThreads, 0, stream>>>(
            static_cast<uint16_t*>(dst.raw_data()), dix,
            static_cast<const uint16_t*>(src.raw_data()), six, n);
        break;
      case 4:
        copy_words_kernel<<<blocks, kThreads, 0, stream>>>(
            static_cast<uint32_t*>(dst.raw_data()), dix,
            static_cast<const uint32_t*>(src.raw_data()), six, n);
        break;
      default:
        copy_words_kernel<<<blocks, kThreads, 0, stream>>>(
            static_cast<uint64_t*>(dst.raw_data()), dix,
            static_cast<const uint64_t*>(src.raw_data()), six, n);
        break;
    }
    CUDA_CHECK_LAUNCH("copy_words_kernel");
    return;
  }
  const bool integers = is_integral(dst.dtype()) && is_integral(src.dtype());
  convert_kernel<<<blocks, kThreads, 0, stream>>>(dst.raw_data(), static_cast<int>(dst.dtype()),
                                                  dix, src.raw_data(),
                                                  static_cast<int>(src.dtype()), six, n, integers);
  CUDA_CHECK_LAUNCH("convert_kernel");
}

void fill_tensor(const Tensor& dst, double value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  fill_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream_handle(dst.device())>>>(
      dst.raw_data(), static_cast<int>(dst.dtype()), make_indexer(dst, "cuda fill"), value, n);
  CUDA_CHECK_LAUNCH("fill_kernel");
}

void arange_tensor(const Tensor& dst, int64_t start) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  arange_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream_handle(dst.device())>>>(
      dst.raw_data(), static_cast<int>(dst.dtype()), start, n, is_integral(dst.dtype()));
  CUDA_CHECK_LAUNCH("arange_kernel");
}

}  // namespace microllm::cuda
