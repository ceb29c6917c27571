// libFuzzer target for the safetensors header parser (io::parse_safetensors).
//
// Build and run (clang only; see docs/safetensors.md):
//   cmake -S . -B build/fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
//         -DMICROLLM_BUILD_FUZZERS=ON
//   cmake --build build/fuzz --target fuzz_safetensors_header
//   build/fuzz/tests/fuzz_safetensors_header -max_total_time=120 NEW_DIR
//   tests/fuzz/corpus/safetensors
//
// The first input byte picks the framing: odd — the rest is "HEADER \0 DATA" and the
// 8-byte length is computed, so mutations of the JSON reach the validator; even — the rest
// is a whole file, length field included. Any exception other than microllm::Error, any
// sanitizer report, and any accepted header that breaks the format's invariants is a crash.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "microllm/io/safetensors.h"

using namespace microllm;

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// What an accepted header promises: ranges tile the data section exactly, sizes match.
void check_invariants(const io::SafetensorsHeader& h, size_t file_size) {
  check(h.data_offset >= 8 && h.data_offset + h.data_size == file_size);
  uint64_t cursor = 0;
  for (const io::SafetensorsTensorInfo& t : h.tensors) {
    check(!t.name.empty() && t.begin == cursor && t.begin <= t.end && t.end <= h.data_size);
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      check(d >= 0);
      numel *= static_cast<uint64_t>(d);
    }
    check(numel * dtype_size(t.dtype) == t.nbytes());
    cursor = t.end;
  }
  check(cursor == h.data_size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<unsigned char> file;
  if (data[0] & 1) {
    const auto* rest = data + 1;
    const size_t n = size - 1;
    const auto* nul = static_cast<const uint8_t*>(std::memchr(rest, 0, n));
    const uint64_t header_len = nul ? static_cast<uint64_t>(nul - rest) : n;
    file.resize(8);
    for (int b = 0; b < 8; ++b) file[b] = static_cast<unsigned char>(header_len >> (8 * b));
    file.insert(file.end(), rest, rest + header_len);
    if (nul) file.insert(file.end(), nul + 1, rest + n);
  } else {
    file.assign(data + 1, data + size);
  }
  try {
    const io::SafetensorsHeader header = io::parse_safetensors(file.data(), file.size(), "fuzz");
    check_invariants(header, file.size());
  } catch (const Error&) {
    // Rejected with a message: the expected outcome for almost every input.
  }
  return 0;
}
