// Counter-based random numbers that host and device code compute identically: a draw is a
// pure function of (seed, position, lane), with no state, so the CPU and CUDA samplers get
// the same bits and a request's draws never depend on the batch it shares.
//
// Generator: Philox4x32-10 (J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw, "Parallel
// random numbers: as easy as 1, 2, 3", SC'11). A 128-bit counter (four 32-bit words) and a
// 64-bit key (two words) give four 32-bit words of output; each of the ten rounds takes
// (hi, lo) = 0xD2511F53 · c0 and 0xCD9E8D57 · c2 (32×32 → 64-bit products) and maps
//   (c0, c1, c2, c3) → (hi(M1·c2) ^ c1 ^ k0, lo(M1·c2), hi(M0·c0) ^ c3 ^ k1, lo(M0·c0)),
// and the key is bumped by (0x9E3779B9, 0xBB67AE85) between rounds.
//
// Keying used by microllm (counter_block):
//   key     = (seed low word, seed high word)
//   counter = (lane low, lane high, position low, position high)
// "position" is e.g. the token index within a request, "lane" e.g. a vocabulary id.
//
// Conversions to floating point (exact: every result is representable, 0 and 1 never occur):
//   uniform_f32_from_bits(w) = (2·⌊w / 2⁹⌋ + 1) · 2⁻²⁴    the 23 high bits k as (k + ½)·2⁻²³,
//                                                        in [2⁻²⁴, 1 − 2⁻²⁴]
//   uniform_f64_from_bits(w) = (2·⌊w / 2¹²⌋ + 1) · 2⁻⁵³   the 52 high bits, in [2⁻⁵³, 1 − 2⁻⁵³]
// (24 bits as k·2⁻²⁴ + 2⁻²⁵ would need 25 significant bits: near 1 it rounds to 1.0f.)
// Core layer: no dependency beyond <cstdint>. Weight initialization keeps core/random.h.
#pragma once

#include <cstdint>

#include "microllm/core/host_device.h"

namespace microllm {

// Four 32-bit words: a Philox counter or its output.
struct Philox4x32Block {
  uint32_t word[4];
};

// Philox4x32 with kRounds rounds (10 is the standard strength; 7 exists for the published
// known answers) applied to `counter` under the key (key0, key1).
template <int kRounds = 10>
MICROLLM_HOST_DEVICE inline Philox4x32Block philox4x32(Philox4x32Block counter, uint32_t key0,
                                                       uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kBump0 = 0x9E3779B9u, kBump1 = 0xBB67AE85u;
  uint32_t* c = counter.word;
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key0 += kBump0;
      key1 += kBump1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t next[4] = {hi1 ^ c[1] ^ key0, lo1, hi0 ^ c[3] ^ key1, lo0};
    for (int w = 0; w < 4; ++w) c[w] = next[w];
  }
  return counter;
}

// The block of four words for (seed, position, lane), keyed as the header says.
MICROLLM_HOST_DEVICE inline Philox4x32Block counter_block(uint64_t seed, uint64_t position,
                                                          uint64_t lane) {
  const Philox4x32Block counter{{static_cast<uint32_t>(lane), static_cast<uint32_t>(lane >> 32),
                                 static_cast<uint32_t>(position),
                                 static_cast<uint32_t>(position >> 32)}};
  return philox4x32<10>(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// 64 random bits for (seed, position, lane): word 1 above word 0 of counter_block.
MICROLLM_HOST_DEVICE inline uint64_t counter_u64(uint64_t seed, uint64_t position, uint64_t lane) {
  const Philox4x32Block b = counter_block(seed, position, lane);
  return (static_cast<uint64_t>(b.word[1]) << 32) | b.word[0];
}

// (2·⌊bits / 2⁹⌋ + 1)·2⁻²⁴: an odd multiple of 2⁻²⁴ below 1, exact in F32.
MICROLLM_HOST_DEVICE inline float uniform_f32_from_bits(uint32_t bits) {
  return static_cast<float>((bits >> 8) | 1u) * 0x1p-24f;
}

// (2·⌊bits / 2¹²⌋ + 1)·2⁻⁵³: an odd multiple of 2⁻⁵³ below 1, exact in F64.
MICROLLM_HOST_DEVICE inline double uniform_f64_from_bits(uint64_t bits) {
  return static_cast<double>((bits >> 11) | 1u) * 0x1p-53;
}

// A uniform F32 in (0, 1) from word 0 of counter_block(seed, position, lane).
MICROLLM_HOST_DEVICE inline float counter_uniform_f32(uint64_t seed, uint64_t position,
                                                      uint64_t lane) {
  return uniform_f32_from_bits(counter_block(seed, position, lane).word[0]);
}

// A uniform F64 in (0, 1) from counter_u64(seed, position, lane).
MICROLLM_HOST_DEVICE inline double counter_uniform_f64(uint64_t seed, uint64_t position,
                                                       uint64_t lane) {
  return uniform_f64_from_bits(counter_u64(seed, position, lane));
}

// The high 64 bits of the 128-bit product a·b.
MICROLLM_HOST_DEVICE inline uint64_t mul_hi_u64(uint64_t a, uint64_t b) {
#if MICROLLM_DEVICE_CODE
  return __umul64hi(a, b);
#else
  // Schoolbook on 32-bit halves: a·b = ah·bh·2⁶⁴ + (ah·bl + al·bh)·2³² + al·bl.
  const uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
  const uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
  const uint64_t middle = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
  return hh + (lh >> 32) + (hl >> 32) + (middle >> 32);
#endif
}

// ⌊U · n / 2⁶⁴⌋ for U = counter_u64(seed, position, lane): an integer in [0, n) (n > 0),
// each value with probability 1/n to within 2⁻⁶⁴.
MICROLLM_HOST_DEVICE inline uint64_t counter_below(uint64_t seed, uint64_t position, uint64_t lane,
                                                   uint64_t n) {
  return mul_hi_u64(counter_u64(seed, position, lane), n);
}

}  // namespace microllm
