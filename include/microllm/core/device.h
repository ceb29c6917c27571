// Where a tensor's bytes live: the host or one CUDA device ("cpu", "cuda:0").
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace microllm {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // CUDA ordinal; always 0 for the CPU

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  // Parses "cpu", "cuda" (= cuda:0) and "cuda:N"; anything else is an Error.
  static Device parse(std::string_view text);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};

std::ostream& operator<<(std::ostream& out, const Device& device);

}  // namespace microllm
