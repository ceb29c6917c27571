// CPU reference attention: materialized scores, F64 dot products, F32/F64 probabilities.
//
// Work is split over (batch, KV head); the query heads of one group run in order inside,
// so the dK/dV sums over a group have a fixed order (deterministic).
//   forward:  S = Q·Kᵀ·scale, masked; P = softmax(S); O = P·V
//   backward: dV = Pᵀ·dO; dP = dO·Vᵀ; dS = P·(dP − Σ dP·P); dQ = dS·K·scale; dK = dSᵀ·Q·scale
#include <cmath>
#include <limits>
#include <vector>

#include "../common.h"
#include "attention_kernels.h"

namespace microllm::ops {

void attention_forward_cpu(const AttentionShape& s, const Tensor& q, const Tensor& k,
                           const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                           const Tensor& out, const Tensor& probs) {
  const int64_t group = s.H / s.Hkv;
  detail::dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pq = q.data<T>();                  // (B, H, T, D)
    const T* pk = k.data<T>();                  // (B, Hkv, S, D)
    const T* pv = v.data<T>();                  // (B, Hkv, S, D)
    T* po = out.data<T>();                      // (B, H, T, D)
    T* pp = probs.data<T>();                    // (B, H, T, S)
    const int64_t* qp = q_pos.data<int64_t>();  // (T)
    const int64_t* kp = k_pos.data<int64_t>();  // (S)
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t hk = 0; hk < s.Hkv; ++hk) {
        const T* kh = pk + (b * s.Hkv + hk) * s.S * s.D;       // (S, D)
        const T* vh = pv + (b * s.Hkv + hk) * s.S * s.D;       // (S, D)
        std::vector<double> scores(static_cast<size_t>(s.S));  // (S)
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
          for (int64_t t = 0; t < s.T; ++t) {
            const T* qr = pq + ((b * s.H + h) * s.T + t) * s.D;  // (D)
            T* prow = pp + ((b * s.H + h) * s.T + t) * s.S;      // (S)
            T* orow = po + ((b * s.H + h) * s.T + t) * s.D;      // (D)
            double row_max = -std::numeric_limits<double>::infinity();
            for (int64_t j = 0; j < s.S; ++j) {
              if (s.causal && kp[j] > qp[t]) {
                scores[j] = -std::numeric_limits<double>::infinity();
                continue;
              }
              double dot = 0.0;
              for (int64_t d = 0; d < s.D; ++d) dot += static_cast<double>(qr[d]) * kh[j * s.D + d];
              // Round the score to the compute dtype, as a materialized F32 score matrix is.
              scores[j] = static_cast<T>(dot * s.scale);
              row_max = std::max(row_max, scores[j]);
            }
            for (int64_t d = 0; d < s.D; ++d) orow[d] = T(0);
            if (row_max == -std::numeric_limits<double>::infinity()) {
              for (int64_t j = 0; j < s.S; ++j) prow[j] = T(0);  // no visible key
              continue;
            }
            double total = 0.0;
            for (int64_t j = 0; j < s.S; ++j) total += std::exp(scores[j] - row_max);
            for (int64_t j = 0; j < s.S; ++j)
              prow[j] = static_cast<T>(std::exp(scores[j] - row_max) / total);
            for (int64_t d = 0; d < s.D; ++d) {
              double acc = 0.0;
              for (int64_t j = 0; j < s.S; ++j)
                acc += static_cast<double>(prow[j]) * vh[j * s.D + d];
              orow[d] = static_cast<T>(acc);
            }
          }
      }
  });
}

void attention_backward_cpu(const AttentionShape& s, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& probs, const Tensor& dout,
                            const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const int64_t group = s.H / s.Hkv;
  detail::dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pq = q.data<T>();      // (B, H, T, D)
    const T* pk = k.data<T>();      // (B, Hkv, S, D)
    const T* pv = v.data<T>();      // (B, Hkv, S, D)
    const T* pp = probs.data<T>();  // (B, H, T, S)
    const T* pdo = dout.data<T>();  // (B, H, T, D)
    T* pdq = dq.data<T>();          // (B, H, T, D)
    T* pdk = dk.data<T>();          // (B, Hkv, S, D)
    T* pdv = dv.data<T>();          // (B, Hkv, S, D)
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t hk = 0; hk < s.Hkv; ++hk) {
        const int64_t kv_base = (b * s.Hkv + hk) * s.S * s.D;  // offset of the (S, D) K/V head
        std::vector<double> dk_acc(static_cast<size_t>(s.S * s.D), 0.0);  // (S, D)
        std::vector<double> dv_acc(static_cast<size_t>(s.S * s.D), 0.0);  // (S, D)
        std::vector<double> dscore(static_cast<size_t>(s.S));             // (S) dP
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
          for (int64_t t = 0; t < s.T; ++t) {
            const int64_t row = (b * s.H + h) * s.T + t;  // (b, h, t) flattened over (B, H, T)
            const T* prow = pp + row * s.S;               // (S)
            const T* dorow = pdo + row * s.D;             // (D)
            const T* qr = pq + row * s.D;                 // (D)
            double p_dot_dp = 0.0;                        // Σ_j P·dP
            for (int64_t j = 0; j < s.S; ++j) {
              double dp = 0.0;
              for (int64_t d = 0; d < s.D; ++d)
                dp += static_cast<double>(dorow[d]) * pv[kv_base + j * s.D + d];
              dscore[j] = dp;
              p_dot_dp += dp * prow[j];
              for (int64_t d = 0; d < s.D; ++d)
                dv_acc[j * s.D + d] += static_cast<double>(prow[j]) * dorow[d];
            }
            for (int64_t d = 0; d < s.D; ++d) pdq[row * s.D + d] = T(0);
            std::vector<double> dq_acc(static_cast<size_t>(s.D), 0.0);  // (D)
            for (int64_t j = 0; j < s.S; ++j) {
              const double ds = prow[j] * (dscore[j] - p_dot_dp) * s.scale;
              if (ds == 0.0) continue;
              for (int64_t d = 0; d < s.D; ++d) {
                dq_acc[d] += ds * pk[kv_base + j * s.D + d];
                dk_acc[j * s.D + d] += ds * qr[d];
              }
            }
            for (int64_t d = 0; d < s.D; ++d) pdq[row * s.D + d] = static_cast<T>(dq_acc[d]);
          }
        for (int64_t i = 0; i < s.S * s.D; ++i) {
          pdk[kv_base + i] = static_cast<T>(dk_acc[i]);
          pdv[kv_base + i] = static_cast<T>(dv_acc[i]);
        }
      }
  });
}

}  // namespace microllm::ops
