// Strided converting copy, fill and arange kernels (the CUDA side of Tensor::copy_from, fill
// and arange).
//
// Grid-stride loops, one thread per index. Same-dtype dense copies go to cudaMemcpyAsync;
// same-dtype strided copies move raw words of up to 16 bytes over the merged dims of a
// CopyPlan (copy_plan.h); conversions among F32, BF16 and F16 go through float over the same
// merged dims; other conversions go through double (floats) or int64 (integer to integer),
// as the CPU backend does, one element and one full-rank index computation at a time.
#include "copy_plan.h"
#include "float_dispatch.h"
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

// A CopyPlan for the device: Index is uint32_t when every index and offset fits (32-bit
// division is several times cheaper than 64-bit), else int64_t.
template <class Index>
struct PlanArgs {
  int rank;
  Index words;
  Index sizes[kMaxRank];
  Index dst_strides[kMaxRank];
  Index src_strides[kMaxRank];
};

// The offsets of word i on both sides.
template <class Index>
__device__ __forceinline__ void plan_offsets(const PlanArgs<Index>& a, Index i, Index& dst,
                                             Index& src) {
  dst = 0;
  src = 0;
  // Unrolled over every possible dim, so each array element is read by a constant index (a
  // loop over a.rank indexes the parameter arrays at run time, which copies them to a stack
  // frame in local memory and reads it for every word).
#pragma unroll
  for (int d = kMaxRank - 1; d > 0; --d) {
    if (d >= a.rank) continue;
    const Index outer = i / a.sizes[d], at = i - outer * a.sizes[d];
    dst += at * a.dst_strides[d];
    src += at * a.src_strides[d];
    i = outer;
  }
  dst += i * a.dst_strides[0];
  src += i * a.src_strides[0];
}

template <class Word, class Index>
__global__ void copy_words_kernel(Word* dst, const Word* src, PlanArgs<Index> a) {
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; i < a.words;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    Index d, s;
    plan_offsets(a, i, d, s);
    dst[d] = src[s];
  }
}

// F32, BF16 and F16 among themselves: through float, which gives the bits of the path through
// double (every value of the three is exact in float; one rounding to the target).
template <class D, class S, class Index>
__global__ void convert_float_kernel(D* dst, const S* src, PlanArgs<Index> a) {
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; i < a.words;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    Index d, s;
    plan_offsets(a, i, d, s);
    dst[d] = from_float<D>(to_float(src[s]));
  }
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

// The plan's arguments with Index = uint32_t when they fit, else int64_t; fn(args). The plan
// has at most the tensors' rank (checked against kMaxRank by copy_tensor).
template <class Fn>
void with_plan_args(const CopyPlan& plan, Fn&& fn) {
  bool small = plan.words < (int64_t{1} << 31);
  int64_t dst_end = 0, src_end = 0;
  for (int d = 0; d < plan.rank; ++d) {
    small = small && plan.dst_strides[d] >= 0 && plan.src_strides[d] >= 0;
    dst_end += (plan.sizes[d] - 1) * plan.dst_strides[d];
    src_end += (plan.sizes[d] - 1) * plan.src_strides[d];
  }
  small = small && dst_end < (int64_t{1} << 31) && src_end < (int64_t{1} << 31);
  const auto fill = [&](auto& args) {
    using Index = std::remove_reference_t<decltype(args.words)>;
    args.rank = plan.rank;
    args.words = static_cast<Index>(plan.words);
    for (int d = 0; d < plan.rank; ++d) {
      args.sizes[d] = static_cast<Index>(plan.sizes[d]);
      args.dst_strides[d] = static_cast<Index>(plan.dst_strides[d]);
      args.src_strides[d] = static_cast<Index>(plan.src_strides[d]);
    }
    fn(args);
  };
  if (small) {
    PlanArgs<uint32_t> args{};
    fill(args);
  } else {
    PlanArgs<int64_t> args{};
    fill(args);
  }
}

template <class Word>
void launch_copy_words(const Tensor& dst, const Tensor& src, const CopyPlan& plan,
                       cudaStream_t stream) {
  constexpr int kThreads = 256;
  with_plan_args(plan, [&](const auto& args) {
    copy_words_kernel<<<grid_for(plan.words, kThreads), kThreads, 0, stream>>>(
        static_cast<Word*>(dst.raw_data()), static_cast<const Word*>(src.raw_data()), args);
  });
  CUDA_CHECK_LAUNCH("copy_words_kernel");
}

bool is_float_family(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// dst = src converted, both of F32, BF16, F16 (different dtypes).
void convert_floats(const Tensor& dst, const Tensor& src, cudaStream_t stream) {
  const CopyPlan plan = plan_copy(dst.shape(), dst.strides(), src.strides(), 1, 0, 0, 1);
  constexpr int kThreads = 256;
  dispatch_cuda_float(dst.dtype(), "cuda copy", [&](auto d_tag) {
    dispatch_cuda_float(src.dtype(), "cuda copy", [&](auto s_tag) {
      using D = decltype(d_tag);
      using S = decltype(s_tag);
      with_plan_args(plan, [&](const auto& args) {
        convert_float_kernel<<<grid_for(plan.words, kThreads), kThreads, 0, stream>>>(
            static_cast<D*>(dst.raw_data()), static_cast<const S*>(src.raw_data()), args);
      });
    });
  });
  CUDA_CHECK_LAUNCH("convert_float_kernel");
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
  MICROLLM_CHECK(dst.dim() <= kMaxRank, "cuda copy", "rank ", dst.dim(), " is above the supported ",
                 kMaxRank, " for ", dst.describe());
  if (dst.dtype() == src.dtype()) {
    const CopyPlan plan = plan_copy(
        dst.shape(), dst.strides(), src.strides(), static_cast<int>(dtype_size(dst.dtype())),
        reinterpret_cast<uintptr_t>(dst.raw_data()), reinterpret_cast<uintptr_t>(src.raw_data()));
    switch (plan.word_bytes) {
      case 1:
        return launch_copy_words<uint8_t>(dst, src, plan, stream);
      case 2:
        return launch_copy_words<uint16_t>(dst, src, plan, stream);
      case 4:
        return launch_copy_words<uint32_t>(dst, src, plan, stream);
      case 8:
        return launch_copy_words<uint2>(dst, src, plan, stream);
      default:
        return launch_copy_words<uint4>(dst, src, plan, stream);
    }
  }
  if (is_float_family(dst.dtype()) && is_float_family(src.dtype()))
    return convert_floats(dst, src, stream);
  constexpr int kThreads = 256;
  const unsigned blocks = grid_for(n, kThreads);
  const StridedIndexer dix = make_indexer(dst, "cuda copy"), six = make_indexer(src, "cuda copy");
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
