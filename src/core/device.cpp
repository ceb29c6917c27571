// Device names: "cpu", "cuda", "cuda:N".
#include "microllm/core/device.h"

#include <charconv>

#include "microllm/core/error.h"

namespace microllm {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && index >= 0)
      return cuda(index);
  }
  MICROLLM_FAIL("device", "expected 'cpu', 'cuda' or 'cuda:N', found '", text, "'");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

}  // namespace microllm
