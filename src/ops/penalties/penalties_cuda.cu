// CUDA apply_penalties: one block per row. The row's history becomes sort keys (id·2 +
// [generated], invalid entries last) in the workspace, a bitonic sort orders them in place
// (a fixed network: deterministic), then the thread at the head of each run of equal ids
// counts the run's generated entries and updates that id's logit — each distinct id by one
// thread, so no two threads write one logit and no atomics are needed. Reference:
// penalties_cpu.cpp (std::sort, the same penalty_math.h arithmetic, the same bits).
#include <bit>
#include <cstdint>

#include "../cuda_common.cuh"
#include "penalties_kernels.h"
#include "penalty_math.h"

namespace microllm::ops {
namespace {

using namespace cuda_detail;
using namespace penalty_math;

__global__ void penalties_kernel(float* logits, int64_t vocab, const int32_t* history,
                                 int64_t length, int64_t padded, const int32_t* prompt_lens,
                                 const float* repetition, const float* frequency,
                                 const float* presence, uint32_t* workspace) {
  const int64_t b = blockIdx.x;
  uint32_t* keys = workspace + b * padded;    // (padded)
  const int32_t* ids = history + b * length;  // (L)
  float* row = logits + b * vocab;            // (V)
  const int64_t prompt = prompt_lens[b];
  for (int64_t j = threadIdx.x; j < padded; j += blockDim.x)
    keys[j] = j < length ? history_key(ids[j], j >= prompt, vocab) : kInvalidKey;
  __syncthreads();
  // Bitonic sort, ascending: stage k merges runs of k, step j compares elements j apart.
  for (int64_t k = 2; k <= padded; k *= 2) {
    for (int64_t j = k / 2; j > 0; j /= 2) {
      for (int64_t i = threadIdx.x; i < padded; i += blockDim.x) {
        const int64_t partner = i ^ j;
        if (partner <= i) continue;
        const uint32_t a = keys[i], c = keys[partner];
        if ((a > c) == ((i & k) == 0)) {
          keys[i] = c;
          keys[partner] = a;
        }
      }
      __syncthreads();
    }
  }
  for (int64_t i = threadIdx.x; i < padded; i += blockDim.x) {
    const uint32_t key = keys[i];
    if (key == kInvalidKey) continue;
    const uint32_t id = key >> 1;
    if (i > 0 && (keys[i - 1] >> 1) == id) continue;  // not the head of its run
    int64_t generated = 0;
    for (int64_t j = i; j < padded && keys[j] != kInvalidKey && (keys[j] >> 1) == id; ++j)
      generated += keys[j] & 1u;
    row[id] = penalized(row[id], repetition[b], frequency[b], presence[b], generated);
  }
}

}  // namespace

void apply_penalties_cuda(const Tensor& logits, const Tensor& history, const Tensor& prompt_lens,
                          const PenaltyTensors& penalties, const Tensor& workspace) {
  const int64_t batch = logits.size(0), vocab = logits.size(1), length = history.size(1);
  const int64_t padded = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(length)));
  // Half as many threads as keys (one per compared pair), from one warp to 1024.
  const int threads =
      static_cast<int>(std::min<int64_t>(1024, std::max<int64_t>(kWarp, padded / 2)));
  penalties_kernel<<<static_cast<unsigned>(batch), threads, 0, stream_of(logits)>>>(
      ptr<float>(logits), vocab, ptr<const int32_t>(history), length, padded,
      ptr<const int32_t>(prompt_lens), ptr<const float>(penalties.repetition),
      ptr<const float>(penalties.frequency), ptr<const float>(penalties.presence),
      reinterpret_cast<uint32_t*>(workspace.raw_data()));
  CUDA_CHECK_LAUNCH("penalties_kernel");
}

}  // namespace microllm::ops
