// The softmax reference in double the softmax and cross-entropy tests share: plain
// exp / sum per row, no max subtraction (their inputs are small).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace microllm::testing::optest {

// Softmax of one row.
inline std::vector<double> ref_softmax(const std::vector<double>& row) {
  double total = 0.0;
  for (double v : row) total += std::exp(v);
  std::vector<double> out;
  for (double v : row) out.push_back(std::exp(v) / total);
  return out;
}

// x (R, N) row-major → softmax / log_softmax of every row.
inline std::vector<double> ref_softmax_rows(const std::vector<double>& x, int64_t n, bool log) {
  std::vector<double> out;
  for (size_t r = 0; r < x.size() / static_cast<size_t>(n); ++r) {
    std::vector<double> row(x.begin() + r * n, x.begin() + (r + 1) * n);
    for (double p : ref_softmax(row)) out.push_back(log ? std::log(p) : p);
  }
  return out;
}

}  // namespace microllm::testing::optest
