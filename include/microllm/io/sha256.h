// SHA-256 (FIPS 180-4), for the hashes in token-file manifests and model identities.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace microllm::io {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  std::string hex_digest();  // 64 lower-case hex digits; finishes the hash

 private:
  void compress(const uint8_t* block);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(const void* data, size_t size);

}  // namespace microllm::io
