// Counter-based random numbers (see random.h).
#include "microllm/core/random.h"

#include <cmath>
#include <numbers>
#include <vector>

#include "microllm/core/hash.h"

namespace microllm {
namespace {
size_t checked_numel(const Shape& shape, const char* op) {
  for (int64_t s : shape) MICROLLM_CHECK(s >= 0, op, "negative size in shape ", shape_str(shape));
  return static_cast<size_t>(shape_numel(shape));
}

// Draw number `counter` (1, 2, ...) of `seed`: the SplitMix64 finalizer applied to
// seed + counter·golden ratio (Steele et al. 2014).
uint64_t draw_at(uint64_t seed, uint64_t counter) {
  return splitmix64_mix(seed + counter * 0x9e3779b97f4a7c15ull);
}

double uniform_of(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// Box–Muller from two uniforms; 1 - u keeps the logarithm's argument in (0, 1].
double normal_of(uint64_t bits1, uint64_t bits2) {
  const double u1 = 1.0 - uniform_of(bits1);
  const double u2 = uniform_of(bits2);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

uint64_t Generator::next_u64() { return draw_at(seed_, ++offset_); }

double Generator::next_uniform() { return uniform_of(next_u64()); }

double Generator::next_normal() {
  const uint64_t bits1 = next_u64();
  return normal_of(bits1, next_u64());
}

Tensor randn(const Shape& shape, Generator& gen, DType dtype, Device device, double mean,
             double std) {
  std::vector<double> values(checked_numel(shape, "randn"));
  // Sample i takes draws offset + 2i + 1 and offset + 2i + 2, exactly as a sequential loop of
  // next_normal() would, so the values do not depend on how the loop is split over threads.
  const uint64_t seed = gen.seed(), base = gen.offset();
  const auto n = static_cast<int64_t>(values.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t counter = base + 2 * static_cast<uint64_t>(i);
    values[static_cast<size_t>(i)] =
        mean + std * normal_of(draw_at(seed, counter + 1), draw_at(seed, counter + 2));
  }
  gen.set_state(seed, base + 2 * static_cast<uint64_t>(n));
  return Tensor::from_vector(values, shape, dtype, device);
}

Tensor rand_uniform(const Shape& shape, Generator& gen, double low, double high, DType dtype,
                    Device device) {
  std::vector<double> values(checked_numel(shape, "rand_uniform"));
  for (double& v : values) v = low + (high - low) * gen.next_uniform();
  return Tensor::from_vector(values, shape, dtype, device);
}

Tensor randint(const Shape& shape, int64_t low, int64_t high, Generator& gen, DType dtype,
               Device device) {
  MICROLLM_CHECK(high > low, "randint", "empty range [", low, ", ", high, ")");
  std::vector<int64_t> values(checked_numel(shape, "randint"));
  const uint64_t span = static_cast<uint64_t>(high - low);
  for (int64_t& v : values) v = low + static_cast<int64_t>(gen.next_u64() % span);
  return Tensor::from_vector(values, shape, dtype, device);
}

}  // namespace microllm
