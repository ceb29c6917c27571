// cp.async copies global → shared (sm_80+), used by the kernels that stage tiles or rows in
// shared memory (flash attention, the wgmma kernels, the decode GEMV). Device code only;
// includes nothing else, so the lab programs can use it alone.
#pragma once

namespace microllm::cuda {

// 16 bytes global → shared without passing through registers; with valid false the 16 bytes
// are zero-filled and nothing is read.
__device__ __forceinline__ void copy16_async(void* shared, const void* global, bool valid) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
               "r"(source_bytes));
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n"); }
// Waits until at most `pending` committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

}  // namespace microllm::cuda
