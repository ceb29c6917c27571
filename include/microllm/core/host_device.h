// MICROLLM_HOST_DEVICE marks inline functions that host and device code share (the
// counter-based generator, the sampler's arithmetic): `__host__ __device__` when nvcc
// compiles the file, nothing otherwise. MICROLLM_DEVICE_CODE is 1 inside device passes.
#pragma once

#if defined(__CUDACC__)
#define MICROLLM_HOST_DEVICE __host__ __device__
#else
#define MICROLLM_HOST_DEVICE
#endif

#if defined(__CUDA_ARCH__)
#define MICROLLM_DEVICE_CODE 1
#else
#define MICROLLM_DEVICE_CODE 0
#endif
