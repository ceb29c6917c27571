// Counter-based random numbers (see random.h).
#include "microllm/core/random.h"

#include <cmath>
#include <numbers>
#include <vector>

namespace microllm {
namespace {
size_t checked_numel(const Shape& shape, const char* op) {
  for (int64_t s : shape) MICROLLM_CHECK(s >= 0, op, "negative size in shape ", shape_str(shape));
  return static_cast<size_t>(shape_numel(shape));
}
}  // namespace

uint64_t Generator::next_u64() {
  // SplitMix64 finalizer applied to seed + counter·golden ratio (Steele et al. 2014).
  uint64_t z = seed_ + (++offset_) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Generator::next_uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Generator::next_normal() {
  // Box–Muller; 1 - u keeps the logarithm's argument in (0, 1].
  const double u1 = 1.0 - next_uniform();
  const double u2 = next_uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

Tensor randn(const Shape& shape, Generator& gen, DType dtype, Device device, double mean,
             double std) {
  std::vector<double> values(checked_numel(shape, "randn"));
  for (double& v : values) v = mean + std * gen.next_normal();
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
