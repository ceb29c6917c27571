// The SplitMix64 finalizer (Steele, Lea and Flood 2014): a bijection of 64-bit words with
// full avalanche, for hash tables and hash chains keyed by packed integers, and the core of
// the counter-based generator (core/random.h).
#pragma once

#include <cstdint>

namespace microllm {

constexpr uint64_t splitmix64_mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace microllm
