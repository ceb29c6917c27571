// Seeded random numbers: a counter-based generator (SplitMix64 over a 64-bit counter), so
// the n-th draw of a seed is the same on every machine and can be computed in parallel.
// Normal samples use the Box–Muller transform.
#pragma once

#include <cstdint>

#include "microllm/core/tensor.h"

namespace microllm {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }  // number of 64-bit draws so far
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }

  uint64_t next_u64();
  double next_uniform();  // [0, 1), 53 random bits
  double next_normal();   // mean 0, standard deviation 1

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// N(mean, std²) samples.
Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::F32,
             Device device = Device::cpu(), double mean = 0.0, double std = 1.0);
// Uniform samples in [low, high).
Tensor rand_uniform(const Shape& shape, Generator& gen, double low, double high,
                    DType dtype = DType::F32, Device device = Device::cpu());
// Uniform integers in [low, high).
Tensor randint(const Shape& shape, int64_t low, int64_t high, Generator& gen,
               DType dtype = DType::I64, Device device = Device::cpu());

}  // namespace microllm
