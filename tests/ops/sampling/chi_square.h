// Chi-square goodness of fit for the sampler's draw tests: the statistic over bins (bins with
// an expected count below 5 merged into one), and its p-value from the regularized upper
// incomplete gamma function Q(dof/2, χ²/2) — the power series below a + 1, the continued
// fraction (modified Lentz) above (Numerical Recipes §6.2 formulas, written out here).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace microllm::testing {

inline double upper_incomplete_gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefix = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000 && std::fabs(term) > 1e-17 * std::fabs(sum); ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefix);
  }
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefix) * h;
}

struct ChiSquare {
  double statistic = 0.0;
  int64_t dof = 0;
  double p_value = 1.0;
};

// counts[i] observed draws of outcome i; probs[i] its expected probability (summing to 1).
// Outcomes with probability 0 must have no draws (checked by the caller).
inline ChiSquare chi_square_test(const std::vector<int64_t>& counts,
                                 const std::vector<double>& probs) {
  double total = 0.0;
  for (int64_t c : counts) total += static_cast<double>(c);
  ChiSquare out;
  double rest_observed = 0.0, rest_expected = 0.0;
  int64_t bins = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = probs[i] * total;
    if (expected <= 0.0) continue;
    if (expected < 5.0) {
      rest_observed += static_cast<double>(counts[i]);
      rest_expected += expected;
      continue;
    }
    const double diff = static_cast<double>(counts[i]) - expected;
    out.statistic += diff * diff / expected;
    ++bins;
  }
  if (rest_expected > 0.0) {
    const double diff = rest_observed - rest_expected;
    out.statistic += diff * diff / rest_expected;
    ++bins;
  }
  out.dof = bins - 1;
  out.p_value = out.dof > 0 ? upper_incomplete_gamma_q(0.5 * static_cast<double>(out.dof),
                                                       0.5 * out.statistic)
                            : 1.0;
  return out;
}

}  // namespace microllm::testing
